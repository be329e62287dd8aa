"""Checkpoint loads verify meaning, not only integrity: each mutation below is resealed the way the writer seals a
checkpoint (reconstruction fingerprints, content manifest, config.json and checksums recomputed from the mutated
content), so only the checks of what the tensors and metadata mean can refuse it. Every one is refused by
load_compressed, by transformers' from_pretrained and by `caldera info`, naming the file and the tensor or key."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file

from caldera.nn.compressed_linear import CompressedLinear
from caldera.pipeline import compress as C
from caldera.pipeline.checkpoint import CONFIG_FILE, MODEL_FILE, load_compressed, weight_fingerprint
from caldera.pipeline.hessians import collect_hessians
from tests.helpers import tiny_llama, word_tokenizer
from tests.pipeline.checkpoint_helpers import IDS, copy_checkpoint, edit_config, edit_tensors, reseal

CALDERA = {"rank": 4, "outer_iters": 1, "inner_iters": 1}


@pytest.fixture(scope="module")
def assembled(tmp_path_factory):
    """A `caldera compress` checkpoint of a tiny LLaMA: E8P Q codes, E8P-RVQ4 factor codes, RHT signs, and the
    bits / errors / dense_layers / ft_rank summaries that `caldera info` reports."""
    root = tmp_path_factory.mktemp("meaning")
    model = tiny_llama(0, tie_word_embeddings=False)
    ids = torch.randint(0, 128, (4, 16), generator=torch.Generator().manual_seed(0))
    collect_hessians(model, ids, root / "hess", progress=False)
    C.compress_model(model, root / "hess", "caldera", CALDERA, root / "layers", progress=False)
    path, _ = C.assemble_checkpoint(model, root / "layers", root / "ck", "caldera", CALDERA,
                                    tokenizer=word_tokenizer())
    return path


def reseal_as_writer(ck):
    """What the writer would have sealed for this content: every module's fingerprint recomputed from its
    (mutated) tensors and metadata where they still decode, then the manifest, config.json and checksums."""
    cfg = json.loads((ck / CONFIG_FILE).read_text())
    tensors = load_file(str(ck / MODEL_FILE))
    for path, meta in cfg["modules"].items():
        own = {k[len(path) + 1:]: v for k, v in tensors.items() if k.startswith(path + ".")}
        try:
            cfg["fingerprints"][path] = weight_fingerprint(CompressedLinear.from_tensors(meta, own))
        except (ValueError, KeyError, TypeError, RuntimeError, IndexError):
            pass  # the writer could not have decoded it either
    (ck / CONFIG_FILE).write_text(json.dumps(cfg))
    reseal(ck)


_M = "model.layers.0.self_attn.q_proj"
_T = "tensor '" + _M.replace(".", r"\.")
_set = edit_tensors


def _put(name, f):
    return _set(lambda t: t.__setitem__(name, f(t[name])))


def _codes_beyond(t):
    t = t.to(torch.int64).clone()
    t.view(-1)[0] = 1 << 40
    return t


MUTATIONS = {
    "RHT signs x2": (_put(_M + ".S_U", lambda s: s * 2), _T + r"\.S_U' of model\.safetensors holds \d+ values "
                                                              r"other than ±1 \(e\.g\. 2\)"),
    "RHT signs x0": (_put(_M + ".S_V", lambda s: s * 0), _T + r"\.S_V' .*holds \d+ values other than ±1"),
    "Q scale negated": (_put(_M + ".Q_scale", lambda s: -s), _T + r"\.Q_scale' .*negative or non-finite"),
    "Q scale zero": (_put(_M + ".Q_scale", lambda s: s * 0),
                     _T + r"\.Q_scale' .*is 0 where the codes are not those of an all-zero matrix"),
    "L scale negated": (_put(_M + ".L_scale", lambda s: -s), _T + r"\.L_scale' .*negative or non-finite"),
    "Q scale float64": (_put(_M + ".Q_scale", lambda s: s.double()), _T + r"\.Q_scale' .*dtype float64; scales "
                                                                          r"are stored as float32"),
    "L codes out of range": (_put(_M + ".L_codes", _codes_beyond), _T + r"\.L_codes' .*holds invalid codes .*"
                                                                        r"must lie in \[0, \d+\]"),
    "Q codes as float": (_put(_M + ".Q_codes", lambda c: c.float()), _T + r"\.Q_codes' .*dtype float32; e8p codes "
                                                                          r"are stored in an integer dtype"),
    "Q codes a column short": (_put(_M + ".Q_codes", lambda c: c[:, :-1].contiguous()),
                               _T + r"\.Q_codes' .*has shape \(64, 7\); e8p codes of a 64x64 matrix have shape "
                                    r"\(64, 8\)"),
    "dense weight fp16": (_put("model.norm.weight", lambda w: w.half()),
                          r"tensor 'model\.norm\.weight' of model\.safetensors is float16 but "
                          r"'(lm_head|model\.embed_tokens)\.weight' is float32"),
    "module rank 999": (edit_config(lambda c: c["modules"][_M].update(rank=999)),
                        _T + r"\.L_codes' of model\.safetensors has shape \(4, 8\); e8p-rvq4 codes of a 999x64 "
                             r"matrix have shape \(999, 8\)"),
    "codes dtype float": (edit_config(lambda c: c["modules"][_M].update(q_codes_dtype="float32")),
                          _T + r"\.Q_codes' .*read as codes of dtype 'float32', which is not an integer dtype"),
    "factor codes dtype int8": (edit_config(lambda c: c["modules"][_M].update(lr_codes_dtype="int8")),
                                _T + r"\.L_codes' .*invalid codes .*\(int8\).*must lie in \[0, 127\]"),
    "Q quantizer renamed": (edit_config(lambda c: c["modules"][_M].update(q_quantizer="e8p-rvq4")),
                            r"caldera_config\.json bits\.\w+ is .* but the stored tensors make it"),
    "bits 0.5": (edit_config(lambda c: c["bits"].update(average_bits=0.5)),
                 r"caldera_config\.json bits\.average_bits is 0\.5 but the stored tensors make it 2\.44\d+"),
    "method rank 999": (edit_config(lambda c: c["method_config"].update(rank=999)),
                        r"caldera_config\.json method_config\.rank is 999 but its modules have rank \[4\]"),
    "method q_bits 4": (edit_config(lambda c: c["method_config"].update(q_bits=4)),
                        r"caldera_config\.json method_config\.q_bits is 4 but modules\['model\.layers\.0\.mlp\."
                        r"down_proj'\] stores e8p codes \(2 bits per weight\)"),
    "method l_bits 2": (edit_config(lambda c: c["method_config"].update(l_bits=2)),
                        r"caldera_config\.json method_config\.l_bits is 2 but modules\['[\w.]+'\] stores e8p-rvq4 "
                        r"codes \(4 bits per weight\)"),
    "dense layers": (edit_config(lambda c: c.update(dense_layers=[1])),
                     r"caldera_config\.json dense_layers is \[1\] but the layers without a compressed module are \[\]"),
    "error NaN": (edit_config(lambda c: c["errors"][_M].update(error=float("nan"))),
                  r"caldera_config\.json errors\['model\.layers\.0\.self_attn\.q_proj'\]\.error is nan"),
    "ft_rank": (edit_config(lambda c: c.update(ft_rank=2)),
                r"caldera_config\.json ft_rank is 2 but its modules have ft_rank \[0\]"),
}


def _mutated(path, tmp_path, case):
    edit, msg = MUTATIONS[case]
    ck = copy_checkpoint(path, tmp_path / "ck")
    edit(ck)
    reseal_as_writer(ck)
    return ck, msg


def test_the_writer_output_loads_and_reports(assembled, capsys):
    from caldera import cli

    model, _ = load_compressed(assembled)
    with torch.no_grad():
        assert torch.isfinite(model(torch.tensor(IDS)).logits).all()
    assert cli.main(["info", "--json", str(assembled)]) == 0
    assert json.loads(capsys.readouterr().out)["bits"]["average_bits"] == pytest.approx(2.4444, abs=1e-4)


@pytest.mark.parametrize("case", list(MUTATIONS))
def test_meaningless_content_is_refused_by_every_loader(assembled, tmp_path, capsys, case):
    from transformers import AutoModelForCausalLM

    from caldera import cli

    ck, msg = _mutated(assembled, tmp_path, case)
    with pytest.raises(ValueError, match=rf"checkpoint .*ck is inconsistent: ({msg}).*re-run `caldera compress`"):
        load_compressed(ck)
    with pytest.raises(ValueError, match=rf"checkpoint .*ck is inconsistent: ({msg})"):
        AutoModelForCausalLM.from_pretrained(str(ck))
    capsys.readouterr()
    assert cli.main(["info", str(ck)]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and "inconsistent" in err


def test_a_plausible_recorded_error_is_not_checkable(assembled, tmp_path):
    """The per-matrix errors are measurements against the original weights and Hessians, which a checkpoint does
    not hold: a changed but plausible value loads (only its type and range are checked)."""
    ck = copy_checkpoint(assembled, tmp_path / "ck")
    edit_config(lambda c: c["errors"][_M].update(error=0.01))(ck)
    reseal_as_writer(ck)
    load_compressed(ck, load_tokenizer=False)


def test_unverified_load_skips_the_value_checks(assembled, tmp_path):
    """verify=False (the documented opt-out) loads signs that are not ±1."""
    ck, _ = _mutated(assembled, tmp_path, "RHT signs x2")
    model, _ = load_compressed(ck, verify=False, load_tokenizer=False)
    assert float(model.get_submodule(_M).S_U.abs().max()) == 2

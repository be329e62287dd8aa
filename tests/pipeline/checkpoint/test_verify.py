"""caldera.pipeline.checkpoint.verify: what a load checks before it builds anything. Damaged files (a flipped
byte, a truncated file, a missing config) are refused by their checksums; content edited with the checksums
recomputed is refused by the content manifest; an inconsistent config (structure, shapes, fingerprints) by the
checks behind the manifest. Files beside the model (a tokenizer, hidden files) are not refused. The meaning checks
are run on mutations resealed the way the writer seals a checkpoint (reconstruction fingerprints, content manifest,
config.json and checksums recomputed from the mutated content): each is refused by load_compressed, by
transformers' from_pretrained and by `caldera info`, naming the file and the tensor or key."""

from __future__ import annotations

import json
import re
import warnings

import pytest
import torch
from safetensors.torch import load_file

from caldera.nn.compressed_linear import CompressedLinear
from caldera.pipeline import compress as C
from caldera.pipeline.checkpoint.format import CHECKSUM_FILE, CONFIG_FILE, MODEL_FILE, weight_fingerprint
from caldera.pipeline.checkpoint.loader import load_compressed
from caldera.pipeline.hessians import collect_hessians
from tests.helpers import tiny_llama, word_tokenizer
from tests.pipeline.checkpoint_helpers import (
    IDS,
    copy_checkpoint,
    edit_config,
    edit_tensors,
    rechecksum,
    reseal,
)


def test_corrupt_byte_refused(saved, tmp_path):
    _, path = saved
    ck = copy_checkpoint(path, tmp_path / "ck")
    data = bytearray((ck / MODEL_FILE).read_bytes())
    data[len(data) // 2] ^= 0x01
    (ck / MODEL_FILE).write_bytes(bytes(data))
    with pytest.raises(ValueError, match=r"model\.safetensors is corrupt or truncated.*re-run `caldera compress`"):
        load_compressed(ck)


def test_truncated_refused(saved, tmp_path):
    _, path = saved
    ck = copy_checkpoint(path, tmp_path / "ck")
    (ck / MODEL_FILE).write_bytes((ck / MODEL_FILE).read_bytes()[:-1000])
    with pytest.raises(ValueError, match=r"model\.safetensors.*re-run `caldera compress`"):
        load_compressed(ck)
    ck2 = copy_checkpoint(path, tmp_path / "ck2")
    (ck2 / CHECKSUM_FILE).write_text("{")
    with pytest.raises(ValueError, match=r"checksums\.json.*re-run `caldera compress`"):
        load_compressed(ck2)
    ck3 = copy_checkpoint(path, tmp_path / "ck3")
    (ck3 / CONFIG_FILE).unlink()
    with pytest.raises(ValueError, match=r"caldera_config\.json is missing"):
        load_compressed(ck3)


# ---------------------------------------------------------------------------- valid checksums, wrong content


_Q = "model.layers.0.self_attn.q_proj"
INCONSISTENT = {
    "no modules": (edit_config(lambda c: c.pop("modules")), r"key 'modules' is missing"),
    "module without rank": (edit_config(lambda c: c["modules"][_Q].pop("rank")), r"q_proj'\]\.rank is missing"),
    "unknown model_type": (
        edit_config(lambda c: c["base_config"].update(model_type="nosuchmodel")),
        r"model_type 'nosuchmodel' is not a model type",
    ),
    "wrong hidden size": (
        edit_config(lambda c: c["base_config"].update(hidden_size=128)),
        r"is 64x128 but base_config makes it 128x128 \(hidden_size 128\)",
    ),
    "quantizer renamed (same code shape)": (
        edit_config(lambda c: c["modules"][_Q].update(q_quantizer="e8p-rvq4")),
        r"q_proj'\] decodes to a different weight than was saved",
    ),
    "quantizer unknown": (
        edit_config(lambda c: c["modules"][_Q].update(q_quantizer="e9p")),
        r"q_quantizer 'e9p' is not a known quantizer",
    ),
    "no quantizer and no float Q format": (
        edit_config(lambda c: c["modules"][_Q].update(q_quantizer=None)),
        r"q_proj'\]\.q_quantizer is None and q_format is None; a Q without a quantizer is stored as one of "
        r"\['float16', 'float32'\]",
    ),
    "NaN scale": (
        edit_tensors(lambda t: t.__setitem__(_Q + ".Q_scale", torch.tensor(float("nan")))),
        r"1 tensors hold NaN/Inf values, e.g. \['model\.layers\.0\.self_attn\.q_proj\.Q_scale'\]",
    ),
    "codes missing": (edit_tensors(lambda t: t.pop(_Q + ".Q_codes")), r"missing tensors \['Q_codes'\]"),
    "rht flag flipped": (
        edit_config(lambda c: c["modules"][_Q].update(rht=False)),
        r"q_proj'\] has tensors \['S_U', 'S_V'\] that its metadata does not use \(rht=False",
    ),
    "tied source missing": (
        edit_tensors(lambda t: t.pop("model.embed_tokens.weight")),
        r"points to 'model\.embed_tokens\.weight', which model\.safetensors does not hold",
    ),
}


@pytest.mark.parametrize("case", list(INCONSISTENT))
def test_inconsistent_content_refused_by_load_and_info(saved, tmp_path, capsys, case):
    from caldera import cli

    edit, msg = INCONSISTENT[case]
    _, path = saved
    ck = copy_checkpoint(path, tmp_path / "ck")
    edit(ck)
    reseal(ck)
    with pytest.raises(ValueError, match=msg + r".*re-run `caldera compress`"):
        load_compressed(ck, load_tokenizer=False)
    capsys.readouterr()
    assert cli.main(["info", str(ck)]) == 2  # a clear message, no traceback
    err = capsys.readouterr().err
    assert err.startswith("caldera info: error: checkpoint") and "Traceback" not in err
    assert re.search(msg, err)


def test_info_without_verification_still_has_no_traceback(saved, tmp_path, capsys):
    from caldera import cli

    _, path = saved
    ck = copy_checkpoint(path, tmp_path / "ck")
    edit_config(lambda c: c["modules"][_Q].pop("in_features"))(ck)
    assert cli.main(["info", "--no-verify", str(ck)]) == 2
    assert "q_proj'].in_features is missing" in capsys.readouterr().err
    assert cli.main(["info", "--json", str(path)]) == 0
    assert json.loads(capsys.readouterr().out)["n_compressed_modules"] == 14


# ------------------------------------------------------------ content verified, not only checksums


def _both(*edits):
    def go(ck):
        for e in edits:
            e(ck)

    return go


_FIX = r".*(delete it|re-run `caldera compress`)"
# Content mutations with checksums.json recomputed (nothing else).
TAMPERED = {
    "RHT signs negated": (
        edit_tensors(lambda t: t.__setitem__(_Q + ".S_U", -t[_Q + ".S_U"])),
        r"tensor 'model\.layers\.0\.self_attn\.q_proj\.S_U' differs from the one recorded in manifest\.tensors",
    ),
    "RHT signs zeroed": (
        edit_tensors(lambda t: t.__setitem__(_Q + ".S_V", torch.zeros_like(t[_Q + ".S_V"]))),
        r"tensor 'model\.layers\.0\.self_attn\.q_proj\.S_V' differs from the one recorded in manifest\.tensors",
    ),
    "fingerprints deleted + Q_scale doubled": (
        _both(edit_config(lambda c: c.pop("fingerprints")),
              edit_tensors(lambda t: t.__setitem__(_Q + ".Q_scale", t[_Q + ".Q_scale"] * 2))),
        r"tensor 'model\.layers\.0\.self_attn\.q_proj\.Q_scale' differs from the one recorded",
    ),
    "fingerprints deleted": (
        edit_config(lambda c: c.pop("fingerprints")),
        r"caldera_config\.json has no reconstruction fingerprint for modules .*verify=False",
    ),
    "manifest deleted": (
        edit_config(lambda c: c.pop("manifest")),
        r"caldera_config\.json has no content manifest .*verify=False",
    ),
    "hidden_act -> relu": (
        edit_config(lambda c: c["base_config"].update(hidden_act="relu")),
        r"caldera_config\.json key 'base_config' differs from the one recorded when the checkpoint was written",
    ),
    "config.json hidden_act -> relu": (
        edit_config(lambda c: c.update(hidden_act="relu"), "config.json"),
        r"config\.json differs from the file recorded in manifest\.files",
    ),
}


def _edited(path, tmp_path, cases, case, seal):
    """``(copy of the checkpoint at path with the edit cases[case] applied and sealed by seal, the message its
    load is refused with)``."""
    edit, msg = cases[case]
    ck = copy_checkpoint(path, tmp_path / "ck")
    edit(ck)
    seal(ck)
    return ck, msg


@pytest.mark.parametrize("case", list(TAMPERED))
def test_tampered_content_refused(saved, tmp_path, case):
    """Each content mutation (checksums recomputed) is refused by load_compressed and by transformers'
    from_pretrained (the same verification), with the file or key and the fix; verify=False loads it."""
    from transformers import AutoModelForCausalLM

    _, path = saved
    ck, msg = _edited(path, tmp_path, TAMPERED, case, rechecksum)
    with pytest.raises(ValueError, match=msg + _FIX):
        load_compressed(ck)
    with pytest.raises(ValueError, match=msg + _FIX):
        AutoModelForCausalLM.from_pretrained(str(ck))
    model, _ = load_compressed(ck, verify=False, load_tokenizer=False)  # the documented opt-out
    assert isinstance(model.model.layers[0].self_attn.q_proj, CompressedLinear)


def test_files_beside_the_model_are_not_refused_and_a_changed_tokenizer_is_named(saved, tmp_path):
    """Files that cannot change the model's computation (a tokenizer file added or edited, listed in checksums.json
    or not) load with identical logits; load_compressed warns which of them are not the ones written."""
    _, path = saved
    ids = torch.tensor([[1, 5, 9, 3]])
    want = load_compressed(path)[0](input_ids=ids).logits
    ck = copy_checkpoint(path, tmp_path / "ck")
    (ck / "special_tokens_map.json").write_text(json.dumps({"bos_token": "w5"}))
    (ck / "tokenizer.json").write_text((ck / "tokenizer.json").read_text().replace('"w9"', '"w99"'))
    for recomputed in (False, True):
        if recomputed:
            rechecksum(ck)
        with pytest.warns(UserWarning, match=r"added: \['special_tokens_map\.json'\]; changed: \['tokenizer\.json'\]"):
            model, tok = load_compressed(ck)
        assert tok is not None and torch.equal(model(input_ids=ids).logits, want)


def test_hidden_files_are_not_loader_inputs(saved, tmp_path):
    """Snakemake's .snakemake_timestamp in a directory output and huggingface_hub's .cache/ are not files any
    loader reads: they are not reported as files beside the model."""
    _, path = saved
    ck = copy_checkpoint(path, tmp_path / "ck")
    (ck / ".snakemake_timestamp").write_text("")
    (ck / ".cache" / "huggingface").mkdir(parents=True)
    (ck / ".cache" / "huggingface" / "model.safetensors.metadata").write_text("x")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        model, tok = load_compressed(ck)
    assert tok is not None and isinstance(model.model.layers[0].mlp.up_proj, CompressedLinear)
    # the same file made visible is reported as a file beside the model
    (ck / "snakemake_timestamp").write_text("")
    with pytest.warns(UserWarning, match=r"files beside the model are not the ones written.*snakemake_timestamp"):
        load_compressed(ck)


def test_config_json_must_say_what_base_config_says(saved, tmp_path):
    """config.json (what from_pretrained builds the model from) edited and its manifest entry recomputed: its
    content is still compared with the recorded base config."""
    from caldera.atomic import sha256_file

    _, path = saved
    ck = copy_checkpoint(path, tmp_path / "ck")
    edit_config(lambda c: c.update(hidden_act="relu"), "config.json")(ck)
    edit_config(lambda c: c["manifest"]["files"].update({"config.json": sha256_file(ck / "config.json")}))(ck)
    rechecksum(ck)
    with pytest.raises(ValueError, match=r"config\.json does not match caldera_config\.json \(its base_config and "
                       r"quantization scheme; keys \['hidden_act'\]\).*re-run"):
        load_compressed(ck)


# ------------------------------------------------------------ what the tensors and metadata mean


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


_T = "tensor '" + _Q.replace(".", r"\.")
_set = edit_tensors


def _put(name, f):
    return _set(lambda t: t.__setitem__(name, f(t[name])))


def _codes_beyond(t):
    t = t.to(torch.int64).clone()
    t.view(-1)[0] = 1 << 40
    return t



def _trainable_signs(f):
    """q_proj as RHT fine-tuning stores it (``signs_trainable``, float32 signs), its S_U signs then ``f(S_U)``."""
    def go(ck):
        edit_config(lambda c: c["modules"][_Q].update(signs_trainable=True))(ck)
        _set(lambda t: t.update({_Q + ".S_V": t[_Q + ".S_V"].float(), _Q + ".S_U": f(t[_Q + ".S_U"].float())}))(ck)

    return go


def _one(value):
    """The tensor with its first entry set to ``value``."""
    def go(t):
        t = t.clone()
        t.view(-1)[0] = value
        return t

    return go


MUTATIONS = {
    "RHT signs x2": (_put(_Q + ".S_U", lambda s: s * 2), _T + r"\.S_U' of model\.safetensors holds \d+ values "
                                                              r"other than ±1 \(e\.g\. 2\)"),
    "RHT signs x0": (_put(_Q + ".S_V", lambda s: s * 0), _T + r"\.S_V' .*holds \d+ values other than ±1"),
    "trainable signs zero": (_trainable_signs(_one(0.0)), _T + r"\.S_U' of model\.safetensors holds 1 zero or "
                                                              r"non-finite values \(e\.g\. 0\); trainable signs "
                                                              r"are finite and nonzero"),
    "Q scale negated": (_put(_Q + ".Q_scale", lambda s: -s), _T + r"\.Q_scale' .*negative or non-finite"),
    "Q scale zero": (_put(_Q + ".Q_scale", lambda s: s * 0),
                     _T + r"\.Q_scale' .*is 0 where the codes are not those of an all-zero matrix"),
    "L scale negated": (_put(_Q + ".L_scale", lambda s: -s), _T + r"\.L_scale' .*negative or non-finite"),
    "Q scale float64": (_put(_Q + ".Q_scale", lambda s: s.double()), _T + r"\.Q_scale' .*dtype float64; scales "
                                                                          r"are stored as float32"),
    "L codes out of range": (_put(_Q + ".L_codes", _codes_beyond), _T + r"\.L_codes' .*has dtype int64; e8p-rvq4 "
                                                                        r"codes \(0 \.\. 4294967295\) are stored in "
                                                                        r"the smallest integer dtype that holds them"),
    "L codes negative": (_put(_Q + ".L_codes", lambda c: _one(-1)(c.to(torch.int8))),
                         _T + r"\.L_codes' .*holds invalid codes .*must lie in \[0, \d+\]"),
    "Q codes as float": (_put(_Q + ".Q_codes", lambda c: c.float()), _T + r"\.Q_codes' .*dtype float32; e8p codes "
                                                                          r"are stored in an integer dtype"),
    "Q codes a column short": (_put(_Q + ".Q_codes", lambda c: c[:, :-1].contiguous()),
                               _T + r"\.Q_codes' .*has shape \(64, 7\); e8p codes of a 64x64 matrix have shape "
                                    r"\(64, 8\)"),
    "dense weight fp16": (_put("model.norm.weight", lambda w: w.half()),
                          r"tensor 'model\.norm\.weight' of model\.safetensors is float16 but "
                          r"'(lm_head|model\.embed_tokens)\.weight' is float32"),
    "module rank 999": (edit_config(lambda c: c["modules"][_Q].update(rank=999)),
                        _T + r"\.L_codes' of model\.safetensors has shape \(4, 8\); e8p-rvq4 codes of a 999x64 "
                             r"matrix have shape \(999, 8\)"),
    "codes dtype float": (edit_config(lambda c: c["modules"][_Q].update(q_codes_dtype="float32")),
                          _T + r"\.Q_codes' .*read as codes of dtype 'float32', which is not an integer dtype"),
    "factor codes dtype int8": (edit_config(lambda c: c["modules"][_Q].update(lr_codes_dtype="int8")),
                                _T + r"\.L_codes' .*invalid codes .*\(int8\).*must lie in \[0, 127\]"),
    "Q quantizer renamed": (edit_config(lambda c: c["modules"][_Q].update(q_quantizer="e8p-rvq4")),
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
    "error NaN": (edit_config(lambda c: c["errors"][_Q].update(error=float("nan"))),
                  r"caldera_config\.json errors\['model\.layers\.0\.self_attn\.q_proj'\]\.error is nan"),
    "ft_rank": (edit_config(lambda c: c.update(ft_rank=2)),
                r"caldera_config\.json ft_rank is 2 but its modules have ft_rank \[0\]"),
}


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

    ck, msg = _edited(assembled, tmp_path, MUTATIONS, case, reseal_as_writer)
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
    edit_config(lambda c: c["errors"][_Q].update(error=0.01))(ck)
    reseal_as_writer(ck)
    load_compressed(ck, load_tokenizer=False)


def test_unverified_load_skips_the_value_checks(assembled, tmp_path):
    """verify=False (the documented opt-out) loads signs that are not ±1."""
    ck, _ = _edited(assembled, tmp_path, MUTATIONS, "RHT signs x2", reseal_as_writer)
    model, _ = load_compressed(ck, verify=False, load_tokenizer=False)
    assert float(model.get_submodule(_Q).S_U.abs().max()) == 2


# ------------------------------------------------------------ one structure reading for both loaders

_LM = "lm_head.weight"
_EMB = "model.embed_tokens.weight"


def _pop(name):
    return _set(lambda t: t.pop(name))


def _refusals(ck):
    """The messages load_compressed and from_pretrained refuse ``ck`` with (None where one loads it)."""
    from transformers import AutoModelForCausalLM

    out = []
    for load in (lambda: load_compressed(ck, load_tokenizer=False), lambda: AutoModelForCausalLM.from_pretrained(
            str(ck))):
        try:
            load()
            out.append(None)
        except ValueError as e:
            out.append(str(e))
    return out


# Structure mutations of the tied checkpoint (`saved`), each resealed the way the writer seals one.
STRUCTURE = {
    "tie_word_embeddings false, tied map kept": (
        edit_config(lambda c: c["base_config"].update(tie_word_embeddings=False)),
        r"caldera_config\.json key 'tied' is \{'lm_head\.weight': 'model\.embed_tokens\.weight'\} but the "
        r"LlamaForCausalLM that base_config builds \(tie_word_embeddings False\) ties no weights"),
    "tied map emptied": (
        edit_config(lambda c: c.update(tied={})),
        r"caldera_config\.json key 'tied' is \{\} but the LlamaForCausalLM .* ties \{'lm_head\.weight'"),
    "lm_head tied to the norm": (
        edit_config(lambda c: c.update(tied={_LM: "model.norm.weight"})),
        r"caldera_config\.json key 'tied' is \{'lm_head\.weight': 'model\.norm\.weight'\} but the LlamaForCausalLM"),
    "lm_head stored while tied": (
        _set(lambda t: t.update({_LM: t[_EMB].clone()})),
        r"tensor 'lm_head\.weight' is stored in model\.safetensors but tied to 'model\.embed_tokens\.weight'"),
    "tied source missing": (
        _pop(_EMB), r"tied tensor 'lm_head\.weight' points to 'model\.embed_tokens\.weight', which "
                    r"model\.safetensors does not hold"),
    "a dense weight missing": (
        _pop("model.norm.weight"), r"tensor 'model\.norm\.weight', a weight of the model base_config builds, is not "
                                   r"in model\.safetensors"),
    "a tensor of no module": (
        _set(lambda t: t.update({"model.extra": torch.zeros(3)})),
        r"tensor 'model\.extra' of model\.safetensors is neither a weight of the model base_config builds"),
    "RHT flag off, signs stored": (
        edit_config(lambda c: c["modules"][_Q].update(rht=False)),
        r"modules\['model\.layers\.0\.self_attn\.q_proj'\] has tensors \['S_U', 'S_V'\] that its metadata does "
        r"not use"),
    "embedding cast to int64": (
        _put(_EMB, lambda w: w.to(torch.int64)),
        r"tensor 'model\.embed_tokens\.weight' of model\.safetensors has dtype int64; the uncompressed weights of "
        r"the LlamaForCausalLM are floating point"),
    "a (64,) lm_head stored while tied": (
        _set(lambda t: t.update({_LM: t["model.norm.weight"].clone()})),
        r"lm_head\.weight has shape \(64,\) in model\.safetensors but \(128, 64\) per base_config"),
    "codes int64, bits summary deleted": (
        _both(edit_config(lambda c: c.pop("bits", None)), _put(_Q + ".Q_codes", lambda c: c.to(torch.int64))),
        _T + r"\.Q_codes' of model\.safetensors has dtype int64; e8p codes \(0 \.\. 65535\) are stored in the "
             r"smallest integer dtype that holds them, at most uint16"),
    "signs float32, bits summary deleted": (
        _both(edit_config(lambda c: c.pop("bits", None)), _put(_Q + ".S_U", lambda s: s.float())),
        _T + r"\.S_U' of model\.safetensors has dtype float32; RHT signs are stored as int8 ±1"),
}


@pytest.mark.parametrize("case", list(STRUCTURE))
def test_both_loaders_refuse_a_structure_with_the_same_message(saved, tmp_path, case):
    """load_compressed and from_pretrained read a checkpoint's structure with one function (read_structure): a
    tied map the architecture does not tie (tie_word_embeddings false: from_pretrained would leave lm_head
    random), a stored tied alias, a missing or foreign tensor, a module with tensors it does not use, and codes or
    signs in a dtype the writer never uses are refused by both, with the same message naming the file."""
    _, path = saved
    ck, msg = _edited(path, tmp_path, STRUCTURE, case, reseal_as_writer)
    got = _refusals(ck)
    assert got[0] is not None and got[0] == got[1], got
    assert re.search(rf"checkpoint .*ck is inconsistent: {msg}.*re-run `caldera compress`", got[0]), got[0]


def test_an_untied_checkpoint_loads_the_same_both_ways(assembled):
    """tie_word_embeddings false with lm_head stored (and no tied map): both loaders give the same logits, so the
    refusal above is about the mismatch, not about untied heads."""
    from transformers import AutoModelForCausalLM

    a = load_compressed(assembled, load_tokenizer=False)[0]
    b = AutoModelForCausalLM.from_pretrained(str(assembled))
    with torch.no_grad():
        assert torch.equal(a(torch.tensor(IDS)).logits, b(torch.tensor(IDS)).logits)


def test_a_checkpoint_with_2_bit_l_and_4_bit_r_is_written_and_loads_both_ways(tmp_path):
    """l_bits 2 with r_bits 4 (R's codes wider than L's) through `caldera compress`'s library path: the
    checkpoint is assembled, and load_compressed and from_pretrained give the same logits."""
    from transformers import AutoModelForCausalLM

    params = {**CALDERA, "l_bits": 2, "r_bits": 4}
    model = tiny_llama(0, tie_word_embeddings=False)
    ids = torch.randint(0, 128, (4, 16), generator=torch.Generator().manual_seed(0))
    collect_hessians(model, ids, tmp_path / "hess", progress=False)
    C.compress_model(model, tmp_path / "hess", "caldera", params, tmp_path / "layers", progress=False)
    path, _ = C.assemble_checkpoint(model, tmp_path / "layers", tmp_path / "ck", "caldera", params)
    cfg = json.loads((path / CONFIG_FILE).read_text())
    assert {m["r_codes_dtype"] for m in cfg["modules"].values()} == {"int64"}
    from caldera.cli.info import _checkpoint_summary

    assert _checkpoint_summary(path, cfg, False)["quantizers"] == ["e8p", "e8p-rvq4"]  # R's named too
    a = load_compressed(path, load_tokenizer=False)[0]
    b = AutoModelForCausalLM.from_pretrained(str(path))
    with torch.no_grad():
        assert torch.equal(a(torch.tensor(IDS)).logits, b(torch.tensor(IDS)).logits)


# ------------------------------------------------------------ truncated or corrupt files, checksums recomputed


def _cut(name, n):
    def go(ck):
        b = (ck / name).read_bytes()
        (ck / name).write_bytes(b[:-n])

    return go


def _header_byte(ck):
    b = bytearray((ck / MODEL_FILE).read_bytes())
    b[10] = ord("{")
    (ck / MODEL_FILE).write_bytes(bytes(b))


def _garbage(name):
    def go(ck):
        (ck / name).write_bytes(b"\xff\xfe\x00 not json \x80")

    return go


_REFUSED = r"re-run `caldera compress` to rebuild the checkpoint$"
_TOKENIZER_FIX = (r".*; save the tokenizer there again \(tokenizer\.save_pretrained\) or copy its files from the "
                  r"original")
CORRUPT = {
    "model.safetensors truncated": (_cut(MODEL_FILE, 100), r"checkpoint file .*/model\.safetensors cannot be read "
                                                           r"\(.*incomplete metadata.*" + _REFUSED),
    "model.safetensors header": (_header_byte, r"checkpoint file .*/model\.safetensors cannot be read \(.*header.*"
                                 + _REFUSED),
    "caldera_config.json truncated": (_cut(CONFIG_FILE, 10), r".*/caldera_config\.json is missing or not valid JSON.*"
                                      + _REFUSED),
    "caldera_config.json garbage": (_garbage(CONFIG_FILE), r".*/caldera_config\.json is missing or not valid JSON.*"
                                    + _REFUSED),
    "checksums.json truncated": (_cut(CHECKSUM_FILE, 5), r".*/checksums\.json is missing or corrupt.*" + _REFUSED),
    "checksums.json garbage": (_garbage(CHECKSUM_FILE), r".*/checksums\.json is missing or corrupt.*" + _REFUSED),
    "config.json truncated": (_cut("config.json", 10), r"config\.json differs from the file recorded in "
                                                       r"manifest\.files.*" + _REFUSED),
    "config.json garbage": (_garbage("config.json"), r"config\.json differs from the file recorded in "
                                                     r"manifest\.files.*" + _REFUSED),
    "config.json with a base config its class refuses": (
        edit_config(lambda c: c["base_config"].update(hidden_size="big")),
        r"base_config of caldera_config\.json \(the base config of config\.json\) does not build a model "
        r"\(StrictDataclassFieldValidationError.*hidden_size.*" + _REFUSED),
    "tokenizer.json truncated": (_cut("tokenizer.json", 50), r".*/tokenizer\.json is not valid JSON \(JSONDecodeError"
                                 + _TOKENIZER_FIX),
    "tokenizer.json garbage": (_garbage("tokenizer.json"), r".*/tokenizer\.json is not valid JSON \(UnicodeDecodeError"
                               + _TOKENIZER_FIX),
    "tokenizer_config.json truncated": (_cut("tokenizer_config.json", 5), r".*/tokenizer_config\.json is not valid "
                                                                          r"JSON" + _TOKENIZER_FIX),
}


def _seal(case):
    """How each CORRUPT case is sealed: a checksums file left as it is, a base config edited in caldera_config.json
    written through to config.json as the writer would (manifest and checksums too), else checksums recomputed."""
    if "checksums" in case:
        return lambda ck: None
    return reseal if "base config" in case else rechecksum


@pytest.fixture(scope="module")
def with_dtype(saved, tmp_path_factory):
    """The tied checkpoint with ``dtype`` in its base config (as every real model's config has), resealed:
    transformers then reads no tensor file before the caldera quantizer does."""
    _, path = saved
    ck = copy_checkpoint(path, tmp_path_factory.mktemp("dtype") / "ck")
    edit_config(lambda c: c["base_config"].update(dtype="float32"))(ck)
    reseal(ck)
    return ck


@pytest.fixture(scope="module")
def without_dtype(saved, tmp_path_factory):
    """The tied checkpoint with no ``dtype`` key in its base config, resealed: transformers then reads
    model.safetensors' header itself, to choose a dtype, before the model is built."""
    _, path = saved
    ck = copy_checkpoint(path, tmp_path_factory.mktemp("nodtype") / "ck")
    edit_config(lambda c: c["base_config"].pop("dtype", None))(ck)
    reseal(ck)
    return ck


@pytest.mark.parametrize("dtype", ["dtype", "no dtype"])
@pytest.mark.parametrize("case", list(CORRUPT))
def test_truncated_or_corrupt_files_are_refused_naming_the_file(with_dtype, without_dtype, tmp_path, case, dtype):
    """Each file a load reads, truncated or replaced by bytes that are not JSON (checksums recomputed, or the
    checksums file itself), and a config.json whose base config its config class refuses, is refused with a
    ValueError naming it and the fix: by load_compressed, and the model files by from_pretrained with the same
    message (the tokenizer files are not its to read: it loads the model). With and without ``dtype`` in
    config.json: without it transformers reads model.safetensors' header itself, to choose a dtype, and the
    quantizer reads the checkpoint before that; config.json is read by transformers before any quantizer exists,
    and a failure to read it or build its config is explained by the checkpoint's own reading."""
    from transformers import AutoModelForCausalLM

    edit, msg = CORRUPT[case]
    if dtype == "dtype":
        assert json.loads((with_dtype / "config.json").read_text())["dtype"] == "float32"
        ck = copy_checkpoint(with_dtype, tmp_path / "ck")
    else:
        assert "dtype" not in json.loads((without_dtype / "config.json").read_text())
        ck = copy_checkpoint(without_dtype, tmp_path / "ck")
    edit(ck)
    _seal(case)(ck)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the changed tokenizer files are named in a warning first
        with pytest.raises(ValueError, match=msg) as e:
            load_compressed(ck)
    if "tokenizer" in case:
        AutoModelForCausalLM.from_pretrained(str(ck))
    else:
        with pytest.raises(ValueError) as e2:
            AutoModelForCausalLM.from_pretrained(str(ck))
        assert str(e2.value) == str(e.value)


def test_a_config_that_transformers_cannot_read_in_a_plain_folder_keeps_transformers_error(tmp_path):
    """The explanation is for caldera checkpoints only: a plain model folder with a truncated config.json still
    gets transformers' own OSError (the wrapper reads nothing else there)."""
    from transformers import AutoConfig

    from tests.helpers import tiny_model_dir

    folder = tiny_model_dir(tmp_path / "tiny")
    _cut("config.json", 10)(folder)
    with pytest.raises(OSError, match=r"config file at '.*/config\.json' is not a valid JSON file"):
        AutoConfig.from_pretrained(str(folder))


def test_a_dense_models_corrupt_tokenizer_is_named(tmp_path, capsys):
    from caldera import cli
    from caldera.pipeline.models import load_dense
    from tests.helpers import tiny_model_dir

    folder = tiny_model_dir(tmp_path / "tiny")
    _cut("tokenizer.json", 50)(folder)
    with pytest.raises(ValueError, match=r"tiny/tokenizer\.json is not valid JSON"):
        load_dense(str(folder))
    assert cli.main(["eval", "ppl", "--model", str(folder), "--seq-len", "8"]) == 2
    assert "tokenizer.json is not valid JSON" in capsys.readouterr().err


# ------------------------------------------------------------ each check guarded: weakening it fails a test


def _negate_sum(c):
    c["fingerprints"][_Q][0] = -c["fingerprints"][_Q][0]  # what a layer decoding to -W keeps: Σ W² only


def _zero_scale_one_code_left(t):
    """q_proj's Q scale 0 with every code that of an all-zero matrix but one: not what a writer stores."""
    from caldera.nn.format import resolve_quantizer

    q = resolve_quantizer("e8p")
    zero = int(q.quantize(torch.zeros(1, q.block_size)).reshape(-1)[0])
    codes = torch.full_like(t[_Q + ".Q_codes"], zero)
    codes.view(-1)[0] = zero + 1
    t[_Q + ".Q_codes"], t[_Q + ".Q_scale"] = codes, t[_Q + ".Q_scale"] * 0


# (edit, seal, message): each passes every check but the one it names
GUARDED = {
    "fingerprint: every number compared": (
        edit_config(_negate_sum), rechecksum,
        r"modules\['model\.layers\.0\.self_attn\.q_proj'\] decodes to a different weight than was saved"),
    "caldera_config.json checksum": (
        edit_config(lambda c: c["errors"][_Q].update(error=0.011)), lambda ck: None,
        r"checkpoint file .*/caldera_config\.json is corrupt or truncated \(sha256"),
    "zero scale: every code of an all-zero matrix": (
        _set(_zero_scale_one_code_left), reseal_as_writer,
        _T + r"\.Q_scale' of model\.safetensors is 0 where the codes are not those of an all-zero matrix"),
    "manifest: no tensor unlisted": (
        edit_config(lambda c: c["manifest"]["tensors"].pop("model.norm.weight")), rechecksum,
        r"tensor 'model\.norm\.weight' of model\.safetensors is not listed in manifest\.tensors"),
    "manifest: no listed tensor missing": (
        edit_config(lambda c: c["manifest"]["tensors"].update({"model.extra.weight": "0" * 64})), rechecksum,
        r"tensor 'model\.extra\.weight', listed in manifest\.tensors, is not in model\.safetensors"),
}


@pytest.mark.parametrize("case", list(GUARDED))
def test_each_check_refuses_what_only_it_can_see(assembled, tmp_path, case):
    """The per-module fingerprint compares both numbers, caldera_config.json is checksummed, a zero scale needs
    every code of its rows to be the zero code, and the manifest lists exactly the stored tensors: each edit
    below gets past every other check, so weakening the one it names (all -> any, the file skipped, any -> all,
    the name check removed) makes a loader accept it."""
    edit, seal, msg = GUARDED[case]
    ck = copy_checkpoint(assembled, tmp_path / "ck")
    edit(ck)
    seal(ck)
    got = _refusals(ck)
    assert got[0] is not None and got[0] == got[1], got
    assert re.search(msg, got[0]), got[0]


def test_a_base_config_dtype_that_is_no_dtype_is_refused_by_both_loaders(saved, tmp_path):
    """Found by the loaders' fuzz test: base_config dtype false (config.json resealed to match) made
    from_pretrained fail inside transformers with an AttributeError; both loaders now refuse it with a ValueError."""
    _, path = saved
    ck = copy_checkpoint(path, tmp_path / "ck")
    edit_config(lambda c: c["base_config"].update(dtype=False))(ck)
    reseal_as_writer(ck)
    got = _refusals(ck)
    assert got[0] is not None and "base_config" in got[0], got
    assert got[1] is not None and "config.json: dtype False is not a torch dtype name" in got[1], got


def test_a_config_json_without_the_guard_loads_and_an_edited_guard_is_refused(saved, tmp_path):
    """config.json as an earlier caldera wrote it (no ``transformers_weights`` guard), listed in the manifest:
    it loads as the saved model; a guard edited into a weights file name (which a transformers without caldera
    would read) is refused as a config.json that does not match caldera_config.json."""
    from caldera.atomic import sha256_file
    from caldera.pipeline.checkpoint.format import GUARD_KEY, HF_CONFIG_FILE
    from tests.pipeline.checkpoint_helpers import ids_logits

    model, path = saved
    cks = {}
    for name, value in (("old", None), ("edited", MODEL_FILE)):
        ck = cks[name] = copy_checkpoint(path, tmp_path / name)
        hc = json.loads((ck / HF_CONFIG_FILE).read_text())
        del hc[GUARD_KEY]
        if value is not None:
            hc[GUARD_KEY] = value
        (ck / HF_CONFIG_FILE).write_text(json.dumps(hc))
        cfg = json.loads((ck / CONFIG_FILE).read_text())
        cfg["manifest"]["files"][HF_CONFIG_FILE] = sha256_file(ck / HF_CONFIG_FILE)
        (ck / CONFIG_FILE).write_text(json.dumps(cfg))
        rechecksum(ck)
    assert torch.equal(ids_logits(load_compressed(cks["old"])[0]), ids_logits(model))
    with pytest.raises(ValueError, match=r"config\.json does not match caldera_config\.json .*keys "
                       r"\['transformers_weights'\]"):
        load_compressed(cks["edited"])

"""Checkpoint folder: save → load in a fresh process gives identical logits; corruption is refused."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import warnings

import pytest
import torch
from safetensors.torch import load_file

from caldera.nn.compressed_linear import CompressedLinear
from caldera.pipeline.checkpoint import (
    CHECKSUM_FILE,
    CONFIG_FILE,
    MODEL_FILE,
    load_compressed,
    materialize,
    save_compressed,
)
from caldera.pipeline.linears import LINEARS
from tests.helpers import tiny_gemma3, word_tokenizer
from tests.pipeline.checkpoint_helpers import (
    IDS,
    ROOT,
    check_lm_eval_output,
    compress_in_place,
    copy_checkpoint,
    edit_config,
    edit_tensors,
    lm_eval_args,
    rechecksum,
    reseal,
    tiny_llama,
)

CHILD = r"""
import json, sys, torch
from caldera.pipeline.checkpoint import load_compressed
model, tok = load_compressed(sys.argv[1])
ids = torch.tensor(json.loads(sys.argv[2]))
with torch.no_grad():
    logits = model(ids).logits
    gen = model.generate(ids[:1, :4], max_new_tokens=5, min_new_tokens=5, do_sample=False, pad_token_id=0)
torch.save({"logits": logits, "gen": gen, "tok": tok("w5 w9 w33")["input_ids"]}, sys.argv[3])
"""


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("ckpt")
    model, cfg = compress_in_place(tiny_llama())
    import dataclasses

    path = save_compressed(
        model, tmp / "ck", method="quip#", method_config=dataclasses.asdict(cfg), tokenizer=word_tokenizer()
    )
    return model, path


def test_a_tokenizer_folder_is_copied_and_loads_as_the_saved_tokenizer(saved, tmp_path):
    """``tokenizer=<folder>``: its tokenizer files byte for byte, listed in the manifest, and the tokenizer
    loaded from the checkpoint encodes as the one ``save_pretrained`` wrote; a folder without one is refused."""
    model, path = saved
    src = tmp_path / "src"
    word_tokenizer().save_pretrained(src)
    (src / "config.json").write_text("{}")  # not a tokenizer file: not copied
    cfg = json.loads((path / CONFIG_FILE).read_text())
    ck = save_compressed(model, tmp_path / "ck", method="quip#", method_config=cfg["method_config"], tokenizer=src)
    tok_files = sorted(p.name for p in src.iterdir() if p.name != "config.json")
    assert tok_files and all((ck / f).read_bytes() == (src / f).read_bytes() for f in tok_files)
    assert json.loads((ck / "config.json").read_text()) != {}
    manifest = json.loads((ck / CONFIG_FILE).read_text())["manifest"]["files"]
    assert set(tok_files) <= set(manifest)
    _, tok = load_compressed(ck)
    _, tok_saved = load_compressed(path)
    text = "w3 w17 w99 zz w5"
    assert tok(text)["input_ids"] == tok_saved(text)["input_ids"] == word_tokenizer()(text)["input_ids"]
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="holds no tokenizer file"):
        save_compressed(model, tmp_path / "ck2", method="quip#", method_config=cfg["method_config"],
                        tokenizer=tmp_path / "empty")
    assert not (tmp_path / "ck2").exists()


def test_layout(saved):
    model, path = saved
    files = {p.name for p in path.iterdir()}
    assert {MODEL_FILE, CONFIG_FILE, CHECKSUM_FILE} <= files
    assert not list(path.parent.glob("*.tmp-*"))
    cfg = json.loads((path / CONFIG_FILE).read_text())
    assert cfg["format_version"] == 2 and cfg["method"] == "quip#"
    hf = json.loads((path / "config.json").read_text())  # what from_pretrained / lm-eval read
    qc = hf["quantization_config"]
    assert {k: qc[k] for k in ("quant_method", "format_version", "method")} == {
        "quant_method": "caldera", "format_version": 2, "method": "quip#"}
    # the scheme, as caldera_config.json's modules say it: rank 0, E8P codes, the RHT, no layer kept dense
    assert (qc["ranks"], qc["q_quantizers"], qc["rht"], qc["dense_layers"]) == ([0], ["e8p"], [True], [])
    assert {k: v for k, v in hf.items() if k != "quantization_config"} == cfg["base_config"]
    man = cfg["manifest"]
    assert set(man["tensors"]) == set(load_file(str(path / MODEL_FILE)))  # every tensor, RHT signs included
    assert "model.layers.0.self_attn.q_proj.S_U" in man["tensors"]
    assert set(man["files"]) == files - {MODEL_FILE, CONFIG_FILE, CHECKSUM_FILE} and "config.json" in man["files"]
    assert cfg["tied"] == {"lm_head.weight": "model.embed_tokens.weight"}
    assert len(cfg["modules"]) == 14
    m = cfg["modules"]["model.layers.0.self_attn.k_proj"]
    assert (m["out_features"], m["in_features"], m["rank"], m["q_quantizer"]) == (32, 64, 0, "e8p")
    sums = json.loads((path / CHECKSUM_FILE).read_text())["sha256"]
    assert set(sums) == files - {CHECKSUM_FILE}
    from safetensors import safe_open

    with safe_open(str(path / MODEL_FILE), "pt") as f:
        keys = set(f.keys())
    assert "model.layers.1.mlp.down_proj.Q_codes" in keys and "model.norm.weight" in keys
    assert "model.layers.0.self_attn.q_proj.weight" not in keys and "lm_head.weight" not in keys


def _run_child(script: str, folder, out, *, cwd, pythonpath: str | None, plain: bool = False) -> None:
    """Run ``script folder IDS out`` in a fresh offline Python process (PYTHONPATH as given, or unset). ``plain``:
    as where caldera is not installed (its start-up hook off: ``caldera_transformers_hook``)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", **({"PYTHONPATH": pythonpath} if pythonpath else {}))
    if plain:
        env["CALDERA_NO_TRANSFORMERS_HOOK"] = "1"
    r = subprocess.run(
        [sys.executable, "-c", script, str(folder), json.dumps(IDS), str(out)],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr[-3000:]


def test_fresh_process_identical_logits_and_generate(saved, tmp_path):
    model, path = saved
    out = tmp_path / "child.pt"
    _run_child(CHILD, path, out, cwd=ROOT, pythonpath=str(ROOT))
    child = torch.load(out)
    ids = torch.tensor(IDS)
    with torch.no_grad():
        ref = model(ids).logits
        gen = model.generate(ids[:1, :4], max_new_tokens=5, min_new_tokens=5, do_sample=False, pad_token_id=0)
    assert torch.equal(child["logits"], ref)
    assert torch.equal(child["gen"], gen) and gen.shape == (1, 9)
    assert child["tok"] == [5, 9, 33]


def test_load_in_process_types(saved):
    model, path = saved
    loaded, tok = load_compressed(path)
    lin = loaded.model.layers[1].mlp.gate_proj
    assert isinstance(lin, CompressedLinear) and lin.Q_codes.dtype == torch.uint16
    assert loaded.lm_head.weight is loaded.model.embed_tokens.weight
    assert tok is not None and not loaded.training


def test_materialize_keeps_the_function(saved):
    """eval.weights: reconstructed swaps every CompressedLinear for its dense Ŵ; the logits stay the same
    (float rounding) and the tied head stays tied."""
    _, path = saved
    loaded, _ = load_compressed(path, load_tokenizer=False)
    ids = torch.tensor(IDS)
    with torch.no_grad():
        ref = loaded(ids).logits
        assert materialize(loaded) == 14
        got = loaded(ids).logits
    assert not any(isinstance(m, CompressedLinear) for m in loaded.modules())
    assert loaded.lm_head.weight is loaded.model.embed_tokens.weight
    torch.testing.assert_close(got, ref, rtol=1e-4, atol=1e-4 * float(ref.abs().max()))


def test_gemma3_round_trip(tmp_path):
    # Second architecture: Gemma3ForCausalLM (q/k norms, sliding-window layers, a non-persistent embed_scale
    # buffer that the meta-device rebuild must restore).
    import dataclasses

    model, cfg = compress_in_place(tiny_gemma3(tie_word_embeddings=True, bos_token_id=1, eos_token_id=2,
                                               pad_token_id=0))
    path = save_compressed(model, tmp_path / "ck", method="quip#", method_config=dataclasses.asdict(cfg))
    loaded, _ = load_compressed(path)
    assert type(loaded).__name__ == "Gemma3ForCausalLM"
    assert isinstance(loaded.model.layers[2].self_attn.o_proj, CompressedLinear)
    ids = torch.tensor(IDS)
    with torch.no_grad():
        assert torch.equal(loaded(ids).logits, model(ids).logits)
    assert torch.equal(loaded.model.embed_tokens.embed_scale, model.model.embed_tokens.embed_scale)
    from transformers import AutoModelForCausalLM  # the caldera quantization method, same model

    hf = AutoModelForCausalLM.from_pretrained(str(path))
    assert type(hf).__name__ == "Gemma3ForCausalLM" and isinstance(hf.model.layers[2].mlp.up_proj, CompressedLinear)
    with torch.no_grad():
        assert torch.equal(hf(ids).logits, model(ids).logits)


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


_S = "model.layers.0.self_attn.q_proj"
_FIX = r".*(delete it|re-run `caldera compress`)"
# The hostile tester's mutations: content changed, checksums.json recomputed (nothing else).
TAMPERED = {
    "RHT signs negated": (
        edit_tensors(lambda t: t.__setitem__(_S + ".S_U", -t[_S + ".S_U"])),
        r"tensor 'model\.layers\.0\.self_attn\.q_proj\.S_U' differs from the one recorded in manifest\.tensors",
    ),
    "RHT signs zeroed": (
        edit_tensors(lambda t: t.__setitem__(_S + ".S_V", torch.zeros_like(t[_S + ".S_V"]))),
        r"tensor 'model\.layers\.0\.self_attn\.q_proj\.S_V' differs from the one recorded in manifest\.tensors",
    ),
    "fingerprints deleted + Q_scale doubled": (
        _both(edit_config(lambda c: c.pop("fingerprints")),
              edit_tensors(lambda t: t.__setitem__(_S + ".Q_scale", t[_S + ".Q_scale"] * 2))),
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


def _tampered(path, tmp_path, case):
    edit, msg = TAMPERED[case]
    ck = copy_checkpoint(path, tmp_path / "ck")
    edit(ck)
    rechecksum(ck)
    return ck, msg


@pytest.mark.parametrize("case", list(TAMPERED))
def test_tampered_content_refused(saved, tmp_path, case):
    """Each content mutation (checksums recomputed) is refused by load_compressed and by transformers'
    from_pretrained (the same verification), with the file or key and the fix; verify=False loads it."""
    from transformers import AutoModelForCausalLM

    _, path = saved
    ck, msg = _tampered(path, tmp_path, case)
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


def test_hidden_size_mismatch_is_a_value_error(saved, tmp_path):
    """A hidden_size the head count does not divide (manifest resealed, so the model build is reached): a
    ValueError naming base_config, not transformers' StrictDataclassClassValidationError."""
    _, path = saved
    ck = copy_checkpoint(path, tmp_path / "ck")
    edit_config(lambda c: c["base_config"].update(hidden_size=63))(ck)
    reseal(ck)
    with pytest.raises(ValueError, match=r"base_config does not build a model \(StrictDataclassClassValidationError"
                       r".*hidden size \(63\) is not a multiple of the number of attention heads.*re-run"):
        load_compressed(ck)


EXPORT_CHILD = r"""
import sys, torch
from transformers import AutoModelForCausalLM
m = AutoModelForCausalLM.from_pretrained(sys.argv[1]).eval()
assert not [k for k in sys.modules if k.split(".")[0] in ("caldera", "tests")], "caldera was imported"
with torch.no_grad():
    torch.save(m(torch.tensor(eval(sys.argv[2]))).logits, sys.argv[3])
"""


def test_export_loads_in_plain_transformers(saved, tmp_path, capsys):
    """`caldera export` writes a folder that transformers loads in a process that never imports caldera, with
    the compressed model's logits (float rounding); a second export to the same folder is refused."""
    from caldera.cli import main

    model, path = saved
    out = tmp_path / "hf"
    assert main(["export", str(path), "--out", str(out)]) == 0
    assert (out / "config.json").exists() and (out / "model.safetensors").exists()
    assert not list(tmp_path.glob(".hf.tmp-*"))
    res = tmp_path / "logits.pt"
    _run_child(EXPORT_CHILD, out, res, cwd=tmp_path, pythonpath=None, plain=True)
    with torch.no_grad():
        ref = model(torch.tensor(IDS)).logits
    torch.testing.assert_close(torch.load(res), ref, rtol=1e-4, atol=1e-4 * float(ref.abs().max()))
    assert main(["export", str(path), "--out", str(out)]) != 0
    assert "already exists" in capsys.readouterr().err


# lm-eval's own command line (`python -m lm_eval`), in a process where `import caldera` fails: the project's task
# loader (caldera/eval/tasks/utils.py) then reads its data from $CALDERA_CACHE/tasks, as a bare lm-eval user's would.
LM_EVAL_CHILD = r"""
import runpy, sys
sys.modules["caldera"] = None  # any `import caldera...` raises ImportError
sys.argv = ["lm_eval", *sys.argv[1:]]
try:
    runpy.run_module("lm_eval", run_name="__main__", alter_sys=True)
finally:
    leaked = [k for k, v in sys.modules.items() if k.split(".")[0] in ("caldera", "tests") and v is not None]
    assert not leaked, f"caldera was imported: {leaked}"
"""


def test_export_runs_under_lm_eval_cli(saved, tmp_path):
    """`caldera export` → `python -m lm_eval --model hf --model_args pretrained=DIR` on the project's ARC-Easy task
    (4 local documents, --limit 4) with no caldera import: the result file has the task's accuracy over 4
    documents, and every logged log-likelihood equals the compressed model's own (oracle: a direct forward)."""
    from caldera.cli import main

    model, path = saved
    hf = tmp_path / "hf"
    assert main(["export", str(path), "--out", str(hf)]) == 0
    args, env, out = lm_eval_args(f"pretrained={hf},dtype=float32", tmp_path)
    env["CALDERA_NO_TRANSFORMERS_HOOK"] = "1"  # as where caldera is not installed (caldera_transformers_hook)
    r = subprocess.run([sys.executable, "-c", LM_EVAL_CHILD, *args], cwd=tmp_path, env=env, capture_output=True,
                       text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    _, tok = load_compressed(path)
    check_lm_eval_output(out, model, tok, abs_tol=1e-3)


def test_verified_load_leaves_no_dequantized_cache(saved):
    """Verification decodes every module (its fingerprint) but keeps no float32 copy of it: a 7B model would
    hold 26 GB of caches before the first forward. The reference forward still builds its cache."""
    _, path = saved
    model, _ = load_compressed(path, kernel="reference")
    mods = [m for m in model.modules() if isinstance(m, CompressedLinear)]
    assert mods and all(m._Q_cache is None and m._L_cache is None and m._R_cache is None for m in mods)
    with torch.no_grad():
        model(torch.tensor(IDS))
    assert all(m._Q_cache is not None for m in mods)  # cache_dequantized (default): unchanged


def test_materialize_in_a_16_bit_dtype(saved):
    _, path = saved
    ref, _ = load_compressed(path)
    half, _ = load_compressed(path)
    materialize(ref)
    assert materialize(half, torch.float16) == 14
    for name in LINEARS:
        a, b = (m.model.layers[1].get_submodule(name).weight for m in (ref, half))
        assert b.dtype == torch.float16 and torch.equal(b, a.half())


@pytest.mark.parametrize("vocab", [16, -1])  # -1: the small model cannot be built, the full one is
def test_non_persistent_buffers_come_from_a_small_vocabulary_model_with_the_same_values(monkeypatch, vocab):
    """Gemma-3's embed_scale and rotary frequencies, restored on load from a model built with a tiny vocabulary
    (or, when that fails, the full model): the values a full build gives."""
    from transformers import AutoModelForCausalLM

    import caldera.pipeline.checkpoint as CK
    from tests.helpers import tiny_gemma3

    monkeypatch.setattr(CK, "REFERENCE_VOCAB", vocab)
    config = tiny_gemma3(0, vocab_size=256).config
    full = dict(AutoModelForCausalLM.from_config(config).named_buffers())
    with torch.device("meta"):
        wanted = dict(AutoModelForCausalLM.from_config(config).named_buffers())
    assert "model.embed_tokens.embed_scale" in wanted
    got = CK.reference_buffers(config, wanted)
    assert set(got) == set(wanted) and all(torch.equal(got[n], full[n]) for n in wanted)
    assert config.vocab_size == 256  # the caller's config is not altered

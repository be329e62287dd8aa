"""The ``caldera`` quantization method of transformers (caldera.pipeline.hf): from_pretrained, save_pretrained,
a hub id, lm-eval's own CLI on a compressed checkpoint, and the scheme config.json states."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

from caldera.nn.compressed_linear import CompressedLinear
from caldera.pipeline.checkpoint import CHECKSUM_FILE, CONFIG_FILE, MODEL_FILE, load_compressed
from tests.helpers import word_tokenizer
from tests.pipeline.checkpoint_helpers import (
    IDS,
    ROOT,
    check_lm_eval_output,
    copy_checkpoint,
    ids_logits,
    lm_eval_args,
    rechecksum,
    save_tiny_checkpoint,
)


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    return save_tiny_checkpoint(tmp_path_factory.mktemp("hf") / "ck", seed=3, extra={"bits": {"avg_bits": 2.0}})


def test_from_pretrained_equals_load_compressed(saved):
    """AutoModelForCausalLM.from_pretrained(CKPT) builds the compressed model: CompressedLinear layers with the
    stored codes, tied head, and logits bit-identical to load_compressed's (and to the model that was saved)."""
    from transformers import AutoModelForCausalLM

    import caldera  # noqa: F401 - registers the quantization method

    model, path = saved
    hf = AutoModelForCausalLM.from_pretrained(str(path))
    ref, _ = load_compressed(path, load_tokenizer=False)
    assert type(hf).__name__ == "LlamaForCausalLM" and not hf.training
    lin = hf.model.layers[1].mlp.down_proj
    assert isinstance(lin, CompressedLinear) and lin.Q_codes.dtype == torch.uint16 and lin.S_U.dtype == torch.int8
    assert sum(isinstance(m, CompressedLinear) for m in hf.modules()) == 14
    assert hf.lm_head.weight is hf.model.embed_tokens.weight
    assert hf.config.quantization_config.quant_method == "caldera"
    a, b = ids_logits(hf), ids_logits(ref)
    assert torch.equal(a, b) and torch.equal(a, ids_logits(model))
    ids = torch.tensor(IDS)[:1, :4]
    gen = dict(max_new_tokens=5, min_new_tokens=5, do_sample=False, pad_token_id=0)
    with torch.no_grad():
        assert torch.equal(hf.generate(ids, **gen), ref.generate(ids, **gen))


CHILD = r"""
import json, sys, torch
import caldera
assert "transformers" not in sys.modules, "import caldera imported transformers"
from transformers import AutoModelForCausalLM, AutoTokenizer
m = AutoModelForCausalLM.from_pretrained(sys.argv[1])
assert type(m.model.layers[0].self_attn.q_proj).__name__ == "CompressedLinear"
with torch.no_grad():
    torch.save(m(torch.tensor(json.loads(sys.argv[2]))).logits, sys.argv[3])
"""


def test_import_caldera_then_transformers_in_a_fresh_process(saved, tmp_path):
    """`import caldera` does not import transformers, yet registers the method when transformers is imported
    later (the import hook): the usual `import caldera; from transformers import ...` order works."""
    model, path = saved
    out = tmp_path / "l.pt"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    r = subprocess.run([sys.executable, "-c", CHILD, str(path), json.dumps(IDS), str(out)], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert torch.equal(torch.load(out), ids_logits(model))


TRUNCATED_CONFIG = r"""
import sys
import caldera
from transformers import AutoModelForCausalLM
try:
    AutoModelForCausalLM.from_pretrained(sys.argv[1])
except ValueError as e:
    print(e)
"""


def test_a_truncated_config_json_is_named_with_its_fix_in_a_fresh_process(saved, tmp_path):
    """`import caldera` then transformers, fresh: transformers reads config.json before it imports its quantizer
    registry, so the import hook also wraps its config reading; a truncated config.json is refused with the
    checkpoint's own message (the file and the fix), not transformers' OSError."""
    _, path = saved
    ck = copy_checkpoint(path, tmp_path / "ck")
    (ck / "config.json").write_bytes((ck / "config.json").read_bytes()[:-10])
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    r = subprocess.run([sys.executable, "-c", TRUNCATED_CONFIG, str(ck)], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.startswith(f"checkpoint file {ck}/config.json is corrupt or truncated (sha256 "), r.stdout
    assert r.stdout.rstrip().endswith("re-run `caldera compress` to rebuild the checkpoint"), r.stdout


def test_save_pretrained_round_trip(saved, tmp_path):
    """save_pretrained of a from_pretrained (or load_compressed) model writes the checkpoint format again: the
    same tensors and config (extras kept), verified on reload by both loaders; a non-empty folder is refused."""
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    model, path = saved
    hf = AutoModelForCausalLM.from_pretrained(str(path))
    out = tmp_path / "again"
    hf.save_pretrained(out, tokenizer=word_tokenizer())
    assert {p.name for p in out.iterdir()} == {p.name for p in path.iterdir()}
    a, b = load_file(str(out / MODEL_FILE)), load_file(str(path / MODEL_FILE))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) and a[k].dtype == b[k].dtype for k in a)
    ca, cb = (json.loads((p / CONFIG_FILE).read_text()) for p in (out, path))
    assert ca["modules"] == cb["modules"] and ca["tied"] == cb["tied"]
    assert ca["bits"] == cb["bits"] and cb["bits"]["average_bits"] == 2.0  # recomputed from the modules
    # the one difference: from_pretrained records the dtype it loaded (the source model's config had None)
    assert {k: v for k, v in ca["base_config"].items() if k != "dtype"} == {
        k: v for k, v in cb["base_config"].items() if k != "dtype"} and ca["base_config"]["dtype"] == "float32"
    assert json.loads((out / "config.json").read_text())["quantization_config"]["quant_method"] == "caldera"
    assert torch.equal(ids_logits(AutoModelForCausalLM.from_pretrained(str(out))), ids_logits(model))
    lc, tok = load_compressed(out)
    assert tok is not None and torch.equal(ids_logits(lc), ids_logits(model))
    out2 = tmp_path / "again2"
    lc.save_pretrained(out2)  # a load_compressed model saves the same way
    assert torch.equal(load_file(str(out2 / MODEL_FILE))["model.norm.weight"], b["model.norm.weight"])
    with pytest.raises(ValueError, match=r"the folder exists and is not empty.*choose a new folder"):
        hf.save_pretrained(out)
    with pytest.raises(ValueError, match=r"does not support \['push_to_hub'\]"):
        hf.save_pretrained(tmp_path / "x", push_to_hub=True)


def test_lm_eval_cli_on_the_compressed_checkpoint(saved, tmp_path):
    """`caldera lm-eval` (lm-eval's own CLI main, in-process, after registering the method) with
    `--model hf --model_args pretrained=CKPT` evaluates the compressed checkpoint itself: every logged
    log-likelihood equals the compressed model's own forward (oracle), and the accuracy follows from them."""
    model, path = saved
    args, env, out = lm_eval_args(f"pretrained={path}", tmp_path)
    env["PYTHONPATH"] = str(ROOT)
    r = subprocess.run([sys.executable, "-m", "caldera.cli", "lm-eval", *args], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    _, tok = load_compressed(path)
    check_lm_eval_output(out, model, tok, abs_tol=1e-4)


HUB_CHILD = r"""
import json, sys, torch
import caldera
from transformers import AutoModelForCausalLM
m, tok = caldera.load_compressed("caldera-test/tiny")
h = AutoModelForCausalLM.from_pretrained("caldera-test/tiny")
assert tok is not None and type(h.model.layers[0].mlp.up_proj).__name__ == "CompressedLinear"
ids = torch.tensor(json.loads(sys.argv[1]))
with torch.no_grad():
    torch.save({"lc": m(ids).logits, "hf": h(ids).logits}, sys.argv[2])
"""


def test_hub_id_loads_from_the_hub_cache(saved, tmp_path):
    """A hub id (`org/name`) loads with load_compressed (huggingface_hub.snapshot_download) and with
    from_pretrained, from a hub cache holding the repository (offline: no network here), verified the same way."""
    import shutil

    model, path = saved
    commit = "0123456789abcdef0123456789abcdef01234567"
    repo = tmp_path / "hub" / "models--caldera-test--tiny"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(commit)
    shutil.copytree(path, repo / "snapshots" / commit)
    out = tmp_path / "l.pt"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
           "HF_HUB_CACHE": str(tmp_path / "hub")}
    r = subprocess.run([sys.executable, "-c", HUB_CHILD, json.dumps(IDS), str(out)], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    got = torch.load(out)
    assert torch.equal(got["lc"], ids_logits(model)) and torch.equal(got["hf"], ids_logits(model))


def _both_loaders_match(folder, model):
    from transformers import AutoModelForCausalLM

    assert torch.equal(ids_logits(AutoModelForCausalLM.from_pretrained(str(folder))), ids_logits(model))
    assert torch.equal(ids_logits(load_compressed(folder)[0]), ids_logits(model))


def test_the_usual_hugging_face_save_patterns_reload_with_identicalids_logits(saved, tmp_path):
    """model.save_pretrained then the tokenizer's own save_pretrained, a README.md model card written over the one
    saved, .gitattributes: files that cannot change the model's computation load with both loaders and give the
    same logits."""
    from transformers import AutoModelForCausalLM

    model, path = saved
    hf = AutoModelForCausalLM.from_pretrained(str(path))
    out = tmp_path / "usual"
    hf.save_pretrained(out)
    word_tokenizer().save_pretrained(out)
    (out / "README.md").write_text("---\nlibrary_name: transformers\ntags: [caldera]\n---\n# A compressed model\n")
    (out / ".gitattributes").write_text("*.safetensors filter=lfs diff=lfs merge=lfs -text\n")
    with pytest.warns(UserWarning, match=r"added: \['tokenizer\.json', 'tokenizer_config\.json'\]; changed: "
                      r"\['README\.md'\]"):
        _both_loaders_match(out, model)  # the tokenizer saved after the model is named, not refused


def test_the_folder_push_to_hub_uploads_reloads_with_identicalids_logits(saved, tmp_path, monkeypatch):
    """model.push_to_hub as transformers runs it (save_pretrained into an empty folder, then the model card),
    with the hub calls replaced by a copy of the folder it would upload."""
    import shutil
    import types

    import transformers.utils.hub as hub
    from huggingface_hub import ModelCard
    from transformers import AutoModelForCausalLM

    model, path = saved
    hf = AutoModelForCausalLM.from_pretrained(str(path))
    monkeypatch.setattr(hub, "hf_api", lambda: types.SimpleNamespace(
        create_repo=lambda repo_id, **kw: types.SimpleNamespace(repo_id=repo_id)))
    monkeypatch.setattr(hub, "create_and_tag_model_card", lambda repo_id, tags=None, **kw: ModelCard(
        "---\nlibrary_name: transformers\n---\n# " + repo_id + "\n"))
    uploaded = tmp_path / "uploaded"
    monkeypatch.setattr(hf, "_upload_modified_files", lambda folder, repo_id, **kw: shutil.copytree(folder, uploaded))
    hf.push_to_hub("org/tiny-caldera")
    assert {"README.md", MODEL_FILE, CONFIG_FILE, CHECKSUM_FILE, "config.json"} <= {p.name for p in uploaded.iterdir()}
    _both_loaders_match(uploaded, model)


def test_quantization_config_states_the_scheme_and_is_verified(saved, tmp_path):
    """config.json's quantization_config says what caldera_config.json stores (method, bits, ranks, quantizers,
    layers kept dense); an edited scheme, resealed, is refused."""
    from transformers import AutoModelForCausalLM

    from caldera.atomic import sha256_file

    model, path = saved
    qc = json.loads((path / "config.json").read_text())["quantization_config"]
    cfg = json.loads((path / CONFIG_FILE).read_text())
    assert qc["method"] == "quip#" and qc["q_bits"] == cfg["bits"]["b_q"] and qc["dense_layers"] == []
    assert qc["ranks"] == sorted({m["rank"] for m in cfg["modules"].values()})
    assert qc["q_quantizers"] == sorted({m["q_quantizer"] for m in cfg["modules"].values()})
    hf = AutoModelForCausalLM.from_pretrained(str(path))
    assert hf.config.quantization_config.to_dict() == qc
    ck = copy_checkpoint(path, tmp_path / "ck")
    hc = json.loads((ck / "config.json").read_text())
    hc["quantization_config"]["ranks"] = [999]
    (ck / "config.json").write_text(json.dumps(hc))
    c = json.loads((ck / CONFIG_FILE).read_text())
    c["manifest"]["files"]["config.json"] = sha256_file(ck / "config.json")
    (ck / CONFIG_FILE).write_text(json.dumps(c))
    rechecksum(ck)
    with pytest.raises(ValueError, match=r"config\.json does not match caldera_config\.json \(its base_config and "
                       r"quantization scheme; keys \['quantization_config'\]\)"):
        load_compressed(ck)


WITHOUT_CALDERA = r"""
import importlib.abc, sys


class NoCaldera(importlib.abc.MetaPathFinder):
    # as where caldera is not installed: neither the package nor its start-up hook can be imported
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in ("caldera", "caldera_transformers_hook"):
            raise ImportError(f"No module named {name!r} (blocked)")
        return None


sys.meta_path.insert(0, NoCaldera())
for name in [m for m in sys.modules if m.partition(".")[0] in ("caldera", "caldera_transformers_hook")]:
    del sys.modules[name]
try:
    import caldera
except ImportError:
    pass
else:
    sys.exit("caldera is importable: the child does not stand for an environment without it")
from transformers import AutoModelForCausalLM
m = AutoModelForCausalLM.from_pretrained(sys.argv[1])
print("LOADED", type(m.model.layers[0].self_attn.q_proj).__name__)
"""


def _without_caldera(folder, cwd):
    """Run :data:`WITHOUT_CALDERA` on ``folder``: a fresh offline process that cannot import caldera."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(PYTHONNOUSERSITE="1", CALDERA_NO_TRANSFORMERS_HOOK="1", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    return subprocess.run([sys.executable, "-c", WITHOUT_CALDERA, str(folder)], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300)


def test_without_caldera_transformers_refuses_the_checkpoint_naming_caldera(saved, tmp_path):
    """Where caldera cannot be imported, from_pretrained(CKPT) fails before building a model, with an error that
    names caldera and how to install it (config.json's guard); the same folder loads with caldera as the
    compressed model. The guard is what refuses: without it plain transformers builds the dense architecture,
    whose compressed layers it fills with random weights."""
    from transformers import AutoModelForCausalLM

    from caldera.pipeline.checkpoint import GUARD_KEY, HF_CONFIG_FILE, NEEDS_CALDERA

    model, path = saved
    r = _without_caldera(path, tmp_path)
    assert r.returncode != 0 and "LOADED" not in r.stdout, r.stdout + r.stderr[-3000:]
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith("ValueError") and last.endswith(NEEDS_CALDERA), r.stderr[-3000:]
    assert "pip install caldera" in last and "random weights" in last
    assert json.loads((path / HF_CONFIG_FILE).read_text())[GUARD_KEY] == NEEDS_CALDERA
    hf = AutoModelForCausalLM.from_pretrained(str(path))  # with caldera: the compressed model, guard removed
    assert isinstance(hf.model.layers[0].self_attn.q_proj, CompressedLinear)
    assert torch.equal(ids_logits(hf), ids_logits(model)) and GUARD_KEY not in hf.config.to_dict()
    bare = copy_checkpoint(path, tmp_path / "bare")
    hc = json.loads((bare / HF_CONFIG_FILE).read_text())
    del hc[GUARD_KEY]
    (bare / HF_CONFIG_FILE).write_text(json.dumps(hc))
    r = _without_caldera(bare, tmp_path)
    assert r.returncode == 0 and r.stdout.split() == ["LOADED", "Linear"], r.stderr[-3000:]


def test_save_pretrained_keeps_provenance_generation_config_and_card(tmp_path):
    """A checkpoint with provenance and the base model's generation_config.json, loaded by from_pretrained or
    load_compressed and saved with save_pretrained: the same provenance, the generation config byte for byte and
    the same model card."""
    import dataclasses

    from transformers import AutoModelForCausalLM

    from caldera.pipeline.checkpoint import save_compressed
    from tests.pipeline.checkpoint_helpers import compress_in_place, tiny_llama

    model, cfg = compress_in_place(tiny_llama(seed=4))
    prov = {"base_model": {"name": "org/tiny", "weights_sha256": "ab" * 32}, "caldera_version": "0.1.0",
            "git_commit": "unknown", "calibration": {"source": "wikitext2", "n_tokens": 64}}
    gen = b'{\n  "bos_token_id": 1,\n  "eos_token_id": 2,\n  "max_new_tokens": 7\n}\n'
    path = save_compressed(model, tmp_path / "ck", method="quip#", method_config=dataclasses.asdict(cfg),
                           extra={"provenance": prov}, generation_config=gen)
    hf = AutoModelForCausalLM.from_pretrained(str(path))
    assert hf.generation_config.max_new_tokens == 7
    lc, _ = load_compressed(path)
    for name, m in (("hf", hf), ("lc", lc)):
        out = tmp_path / name
        m.save_pretrained(out)
        assert json.loads((out / CONFIG_FILE).read_text())["provenance"] == prov
        for f in ("generation_config.json", "README.md"):
            assert (out / f).read_bytes() == (path / f).read_bytes(), (name, f)

"""The checkpoint package (caldera.pipeline.checkpoint) end to end: save → load in a fresh process gives identical
logits and generations, a second architecture round-trips through load_compressed and from_pretrained, and the
exported folder loads in plain transformers and under lm-eval's CLI."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

from caldera.nn.compressed_linear import CompressedLinear
from caldera.pipeline.checkpoint import load_compressed, save_compressed
from tests.helpers import tiny_gemma3
from tests.pipeline.checkpoint_helpers import (
    IDS,
    ROOT,
    check_lm_eval_output,
    compress_in_place,
    lm_eval_args,
    save_tiny_checkpoint,
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
    return save_tiny_checkpoint(tmp_path_factory.mktemp("ckpt") / "ck")


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

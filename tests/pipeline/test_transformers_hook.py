"""caldera-transformers.pth: a process that never imports caldera, such as lm-eval's own CLI
(`lm_eval --model hf --model_args pretrained=CKPT`), loads a compressed checkpoint as the compressed model.

Before the hook, lm-eval 0.4.13 stopped with "ValueError: Unknown quantization type, got caldera - supported types
are: [...]" (its HFLM parses the quantization_config), and a bare `AutoModelForCausalLM.from_pretrained(CKPT)`
is refused (config.json's guard: caldera is needed). The children below get
the hook as an installed package does: ``site.addsitedir`` on a folder holding what a wheel puts at the root of
site-packages (the .pth and its module), which processes the .pth as Python's start-up does."""

from __future__ import annotations

import dataclasses
import shutil
import subprocess
import sys
import zipfile

import pytest
import torch

from caldera.pipeline.checkpoint import load_compressed, save_compressed
from tests.helpers import word_tokenizer
from tests.pipeline.checkpoint_helpers import (
    IDS,
    ROOT,
    check_lm_eval_output,
    compress_in_place,
    lm_eval_args,
    tiny_llama,
)

PTH = "caldera-transformers.pth"
HOOK = "caldera_transformers_hook.py"


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("hook")
    model, cfg = compress_in_place(tiny_llama(seed=5))
    path = save_compressed(model, tmp / "ck", method="quip#", method_config=dataclasses.asdict(cfg),
                           tokenizer=word_tokenizer(), extra={"bits": {"avg_bits": 2.0}})
    return model, path


def site_dir(tmp_path):
    """What an installed caldera puts at the root of site-packages for the hook."""
    d = tmp_path / "site"
    d.mkdir()
    for f in (PTH, HOOK):
        shutil.copy(ROOT / f, d / f)
    return d


def child_env(**extra):
    import os

    return {**os.environ, "PYTHONPATH": str(ROOT), **extra}


FROM_PRETRAINED = r"""
import json, site, sys, torch
site.addsitedir(sys.argv[1])  # processes caldera-transformers.pth, as at interpreter start
assert "caldera" not in sys.modules
from transformers import AutoModelForCausalLM
m = AutoModelForCausalLM.from_pretrained(sys.argv[2])
print(type(m.model.layers[0].self_attn.q_proj).__name__)
with torch.no_grad():
    torch.save(m(torch.tensor(json.loads(sys.argv[3]))).logits, sys.argv[4])
"""


def test_from_pretrained_without_import_caldera(saved, tmp_path):
    """A child that never imports caldera: with the hook, from_pretrained builds CompressedLinear layers with the
    saved model's logits bit for bit; with the hook turned off, transformers refuses the folder with the error
    config.json's guard gives (caldera is needed, how to install it), not a model with random weights."""
    import json

    from caldera.pipeline.checkpoint import NEEDS_CALDERA

    model, path = saved
    d = site_dir(tmp_path)
    with torch.no_grad():
        want = model(torch.tensor(IDS)).logits
    for off in ("0", "1"):
        out = tmp_path / f"logits{off}.pt"
        r = subprocess.run([sys.executable, "-c", FROM_PRETRAINED, str(d), str(path), json.dumps(IDS), str(out)],
                           env=child_env(CALDERA_NO_TRANSFORMERS_HOOK=off), capture_output=True, text=True,
                           timeout=600)
        if off == "1":
            assert r.returncode != 0 and not out.exists(), r.stdout[-3000:]
            assert r.stderr.strip().splitlines()[-1].endswith(NEEDS_CALDERA), r.stderr[-3000:]
            continue
        assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
        assert r.stdout.split() == ["CompressedLinear"], r.stdout
        assert torch.equal(torch.load(out), want)


TRUNCATED_CONFIG = r"""
import site, sys
site.addsitedir(sys.argv[1])
assert "caldera" not in sys.modules
from transformers import AutoModelForCausalLM
try:
    AutoModelForCausalLM.from_pretrained(sys.argv[2])
except ValueError as e:
    print(e)
"""


def test_a_truncated_config_json_is_named_with_its_fix_without_import_caldera(saved, tmp_path):
    """A child that never imports caldera, on a checkpoint whose config.json was truncated: with the hook, the
    checkpoint's own refusal (the file and the fix), although transformers reads config.json before it imports
    its quantizer registry; with the hook off, transformers' OSError."""
    _, path = saved
    ck = tmp_path / "ck"
    shutil.copytree(path, ck)
    (ck / "config.json").write_bytes((ck / "config.json").read_bytes()[:-10])
    d = site_dir(tmp_path)
    for off in ("0", "1"):
        r = subprocess.run([sys.executable, "-c", TRUNCATED_CONFIG, str(d), str(ck)],
                           env=child_env(CALDERA_NO_TRANSFORMERS_HOOK=off), capture_output=True, text=True,
                           timeout=600)
        if off == "0":
            assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
            assert r.stdout.startswith(f"checkpoint file {ck}/config.json is corrupt or truncated (sha256 "), r.stdout
            assert r.stdout.rstrip().endswith("re-run `caldera compress` to rebuild the checkpoint"), r.stdout
        else:
            assert r.returncode != 0 and "is not a valid JSON file" in r.stderr, r.stderr[-3000:]


LM_EVAL = r"""
import site, sys
site.addsitedir(sys.argv[1])
assert "caldera" not in sys.modules
sys.argv = ["lm_eval", *sys.argv[2:]]
from lm_eval.__main__ import cli_evaluate
cli_evaluate()
"""


def test_bare_lm_eval_cli_evaluates_the_compressed_checkpoint(saved, tmp_path):
    """lm-eval's own CLI main (not `caldera lm-eval`) with `--model hf --model_args pretrained=CKPT` in a child
    that never imports caldera: every logged log-likelihood equals the compressed model's own forward (oracle),
    and the accuracy follows from them. Before the hook this stopped with "Unknown quantization type"."""
    model, path = saved
    args, env, out = lm_eval_args(f"pretrained={path}", tmp_path)
    env = {**env, "PYTHONPATH": str(ROOT)}
    r = subprocess.run([sys.executable, "-c", LM_EVAL, str(site_dir(tmp_path)), *args], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    _, tok = load_compressed(path)
    check_lm_eval_output(out, model, tok, abs_tol=1e-4)


def test_hook_costs_one_small_module_at_start_up(tmp_path):
    """The .pth imports one standard-library-only module and nothing else: no caldera, no transformers, no torch,
    until transformers imports its quantizer registry."""
    code = r"""
import site, sys
before = set(sys.modules)
site.addsitedir(sys.argv[1])
new = set(sys.modules) - before
import json, email.parser, xml.dom  # unrelated imports pass through the hook untouched
print(sorted(new), type(sys.meta_path[0]).__name__, "caldera" in sys.modules)
"""
    # -S: this interpreter's own site-packages (where an installed caldera's .pth already ran) stays out of it
    r = subprocess.run([sys.executable, "-S", "-c", code, str(site_dir(tmp_path))], env=child_env(),
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["['caldera_transformers_hook']", "CalderaTransformersHook", "False"], r.stdout


@pytest.mark.slow
def test_wheel_and_editable_install_ship_the_pth(tmp_path):
    """setup.py puts caldera-transformers.pth at the root of both the wheel and the editable wheel (PEP 517 hooks
    of setuptools, as pip calls them), beside the hook module (the editable wheel maps it to the source)."""
    src = tmp_path / "src"
    src.mkdir()
    for f in ("pyproject.toml", "setup.py", "README.md", PTH, HOOK):
        shutil.copy(ROOT / f, src / f)
    shutil.copytree(ROOT / "caldera", src / "caldera", symlinks=True,
                    ignore=shutil.ignore_patterns("__pycache__"))
    built = {}
    for hook in ("build_wheel", "build_editable"):  # one process each, as pip runs them
        dest = tmp_path / hook
        r = subprocess.run([sys.executable, "-c", f"import sys, setuptools.build_meta as b; b.{hook}(sys.argv[1])",
                            str(dest)], cwd=src, capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
        (built[hook],) = dest.glob("caldera-*.whl")
    wheel, editable = built["build_wheel"], built["build_editable"]
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        assert PTH in names and HOOK in names and "caldera/__init__.py" in names
        assert z.read(PTH) == (ROOT / PTH).read_bytes()
        assert any(n.endswith("RECORD") and PTH.encode() in z.read(n) for n in names)  # removed on uninstall
    with zipfile.ZipFile(editable) as z:
        names = z.namelist()
        assert PTH in names and z.read(PTH) == (ROOT / PTH).read_bytes()
        finder = next(n for n in names if n.endswith("_finder.py"))
        assert b"'caldera_transformers_hook'" in z.read(finder)

"""Whole-model compression: per-layer files, shared Hessian contexts, resumability, crash safety, assembly."""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch

from caldera.bits import average_bits
from caldera.methods import get_method
from caldera.nn.compressed_linear import CompressedLinear
from caldera.pipeline import compress as C
from caldera.pipeline.checkpoint import load_compressed
from caldera.pipeline.hessians import collect_hessians
from caldera.pipeline.layer_runner import decoder_layers
from tests.helpers import tiny_gemma3, tiny_llama

CALDERA = {"rank": 4, "outer_iters": 2, "inner_iters": 2}


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("compress")
    model = tiny_llama()
    ids = torch.randint(0, 128, (4, 16), generator=torch.Generator().manual_seed(0))
    collect_hessians(model, ids, root / "hess", progress=False)
    return model, root


def _mtimes(d):
    return {p.name: p.stat().st_mtime_ns for p in sorted(d.iterdir())}


def test_caldera_resumable_and_assembled(setup, caplog):
    model, root = setup
    ld = root / "caldera.layers"
    with caplog.at_level("INFO", logger="caldera.pipeline.compress"):
        s0 = C.compress_model(model, root / "hess", "caldera", CALDERA, ld, layers=[0], progress=False)
    assert s0["computed"] == [0] and s0["skipped"] == []
    assert sum("rel. data-aware error" in r.getMessage() for r in caplog.records) == 7
    before = _mtimes(ld)
    assert set(before) == {"layer_000.safetensors", "layer_000.json", "layer_000.timing.json"}
    s1 = C.compress_model(model, root / "hess", "caldera", CALDERA, ld, progress=False)
    assert s1["computed"] == [1] and s1["skipped"] == [0]
    after = _mtimes(ld)
    assert all(after[k] == v for k, v in before.items())  # layer 0 was not rewritten

    info = json.loads((ld / "layer_001.json").read_text())
    timing = json.loads(C.layer_timing_path(ld, 1).read_text())
    assert set(timing["matrices"]) == set(info["matrices"]) and timing["wall_s"] > 0
    for name, m in info["matrices"].items():
        assert 0 < m["error"] < 1 and m["rank"] == 4 and m["error_trace"] and "wall_s" not in m
        assert timing["matrices"][name]["wall_s"] > 0
    # one HessianContext per group: q/k/v share S_U (and so do gate/up); groups and layers differ
    t = C.load_layer_tensors(ld, 1)
    assert torch.equal(t["self_attn.q_proj.S_U"], t["self_attn.k_proj.S_U"])
    assert torch.equal(t["self_attn.q_proj.S_U"], t["self_attn.v_proj.S_U"])
    assert torch.equal(t["mlp.gate_proj.S_U"], t["mlp.up_proj.S_U"])
    assert not torch.equal(t["self_attn.q_proj.S_U"], C.load_layer_tensors(ld, 0)["self_attn.q_proj.S_U"])
    assert len({C.group_seed(0, li, g) for li in range(2) for g in ("qkv", "o", "up", "down")}) == 8

    shapes = C.model_linear_shapes(model)
    bits = s1["bits"]
    assert bits["average_bits"] == pytest.approx(average_bits(shapes, 2, 4, 4))
    params = sum(n * d for n, d in shapes)
    signs = sum(n + d for n, d in shapes)
    exact = (sum(2 * n * d + 4 * 4 * (n + d) for n, d in shapes) + signs + 3 * 32 * len(shapes)) / params
    assert bits["storage_bits_per_weight"] == pytest.approx(exact)

    path, summary = C.assemble_checkpoint(model, ld, root / "caldera.ckpt", "caldera", CALDERA)
    loaded, tok = load_compressed(path)
    assert tok is None
    cfg = json.loads((path / "caldera_config.json").read_text())
    assert cfg["bits"]["average_bits"] == pytest.approx(bits["average_bits"])
    assert len(cfg["errors"]) == 14 and cfg["dense_layers"] == []
    # the loaded model computes x Ŵᵀ with Ŵ the stored reconstruction
    ref = tiny_llama()
    for li, layer in enumerate(decoder_layers(loaded)):
        for name in C.LINEARS:
            mod = layer.get_submodule(name)
            assert isinstance(mod, CompressedLinear)
            decoder_layers(ref)[li].get_submodule(name).weight.data = mod.weight_reconstruction()
    x = torch.randint(0, 128, (2, 10), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        torch.testing.assert_close(loaded(x).logits, ref(x).logits, rtol=1e-4, atol=1e-4)
        dense = model(x).logits
        rel = (loaded(x).logits - dense).norm() / dense.norm()
    assert float(rel) < 0.5



@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_compression_on_cuda_matches_the_cpu_run_and_loads_on_the_cpu(setup):
    """``device="cuda"``: the matrices' mean error is the CPU run's (within 6 %: one matrix's error is chaotic in
    the last bits where the factors are quantized, see ``tests/test_device.py``), and the assembled checkpoint
    loads on the CPU and runs on CUDA with the logits of its CPU copy."""
    model, root = setup
    C.compress_model(model, root / "hess", "caldera", CALDERA, root / "on_cpu", progress=False)
    C.compress_model(model, root / "hess", "caldera", CALDERA, root / "on_cuda", progress=False, device="cuda")
    errors = {"on_cpu": [], "on_cuda": []}
    for li in range(len(decoder_layers(model))):
        for d in errors:
            matrices = json.loads((root / d / f"layer_{li:03d}.json").read_text())["matrices"]
            assert set(matrices) == set(C.LINEARS)
            errors[d] += [matrices[name]["error"] for name in C.LINEARS]
    cpu, gpu = (sum(v) / len(v) for v in errors.values())
    assert gpu == pytest.approx(cpu, rel=0.06), errors
    path, _ = C.assemble_checkpoint(model, root / "on_cuda", root / "on_cuda.ckpt", "caldera", CALDERA)
    loaded, _ = load_compressed(path)
    assert all(t.device.type == "cpu" for t in loaded.state_dict().values())
    x = torch.randint(0, 128, (2, 10), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        want = loaded(x).logits
        got = loaded.cuda()(x.cuda()).logits.cpu()
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4 * float(want.abs().max()))

def test_quip_sharp_and_rtn(setup):
    model, root = setup
    s = C.compress_model(model, root / "hess", "quip#", {}, root / "quip.layers", progress=False)
    assert s["computed"] == [0, 1]
    assert s["bits"]["average_bits"] == 2.0 and s["bits"]["rank"] == 0
    path, _ = C.assemble_checkpoint(model, root / "quip.layers", root / "quip.ckpt", "quip#", {})
    loaded, _ = load_compressed(path)
    assert loaded.model.layers[0].mlp.down_proj.rank == 0
    # RTN has no shared Hessian context and no RHT
    s = C.compress_model(model, root / "hess", "rtn", {"bits": 4}, root / "rtn.layers", layers=[1], progress=False)
    assert s["computed"] == [1] and all(m["error"] < 1 for m in s["matrices"].values())
    with pytest.raises(ValueError, match=r"layers \[0\].*not compressed"):
        C.assemble_checkpoint(model, root / "rtn.layers", root / "rtn.ckpt", "rtn", {"bits": 4})
    path, info = C.assemble_checkpoint(
        model, root / "rtn.layers", root / "rtn.ckpt", "rtn", {"bits": 4}, allow_partial=True
    )
    assert info["dense_layers"] == [0]
    loaded, _ = load_compressed(path)
    assert isinstance(loaded.model.layers[0].mlp.up_proj, torch.nn.Linear)
    assert torch.equal(loaded.model.layers[0].mlp.up_proj.weight, model.model.layers[0].mlp.up_proj.weight)


def test_crash_leaves_nothing_trusted(setup, monkeypatch):
    model, root = setup
    ld = root / "crash.layers"
    spec = get_method("quip#")
    calls = {"n": 0}

    def flaky(W, H, config, context=None):
        calls["n"] += 1
        if calls["n"] == 10:  # layer 1, third matrix
            raise RuntimeError("simulated crash")
        return spec.fn(W, H, config, context=context)

    monkeypatch.setattr(C, "get_method", lambda name: dataclasses.replace(spec, fn=flaky))
    with pytest.raises(RuntimeError, match="simulated crash"):
        C.compress_model(model, root / "hess", "quip#", {}, ld, progress=False)
    monkeypatch.undo()
    assert sorted(p.name for p in ld.iterdir()) == ["layer_000.json", "layer_000.safetensors", "layer_000.timing.json"]
    assert C.read_layer_result(ld, 1) is None

    # a safetensors file without its JSON, or a JSON whose checksum does not match, is redone
    (ld / "layer_001.safetensors").write_bytes((ld / "layer_000.safetensors").read_bytes())
    js = json.loads((ld / "layer_000.json").read_text())
    js["sha256"] = "0" * 64
    (ld / "layer_000.json").write_text(json.dumps(js))
    s = C.compress_model(model, root / "hess", "quip#", {}, ld, progress=False)
    assert s["computed"] == [0, 1] and s["skipped"] == []
    s = C.compress_model(model, root / "hess", "quip#", {}, ld, progress=False)
    assert s["computed"] == [] and s["skipped"] == [0, 1]
    assert not list(ld.glob("*.tmp-*"))

    with pytest.raises(ValueError, match="another output folder"):
        C.compress_model(model, root / "hess", "quip#", {"refine_passes": 1}, ld, progress=False)
    with pytest.raises(ValueError, match="ft_rank"):
        C.compress_model(model, root / "hess", "quip#", {}, ld, progress=False, ft_rank=1)
    # the workflow reruns a job when its config changed: the old layers are replaced instead of refused
    s = C.compress_model(model, root / "hess", "quip#", {"refine_passes": 1}, ld, progress=False, replace_stale=True)
    assert s["computed"] == [0, 1]
    assert all(C.read_layer_result(ld, li)["method_config"]["refine_passes"] == 1 for li in (0, 1))
    with pytest.raises(FileNotFoundError, match="caldera hessians"):
        C.compress_model(model, root / "nohess", "quip#", {}, root / "x", progress=False)
    with pytest.raises(ValueError, match="out of range"):
        C.compress_model(model, root / "hess", "quip#", {}, ld, layers=[5], progress=False)


@pytest.mark.parametrize("method,params", [("gptq", {"bits": 2}), ("loftq", {"rank": 4, "iters": 1})])
def test_every_registered_baseline_compresses_a_model(tmp_path, method, params):
    model = tiny_llama(3)
    ids = torch.randint(0, 128, (4, 16), generator=torch.Generator().manual_seed(0))
    collect_hessians(model, ids, tmp_path / "h", progress=False)
    C.compress_model(model, tmp_path / "h", method, params, tmp_path / "layers", progress=False)
    path, summary = C.assemble_checkpoint(model, tmp_path / "layers", tmp_path / "ckpt", method, params)
    loaded, _ = load_compressed(path)
    with torch.no_grad():
        assert torch.isfinite(loaded(ids).logits).all()
    assert summary["bits"]["n_matrices_compressed"] == 14


def test_gemma3_caldera_end_to_end(tmp_path):
    # The second model family (Gemma-3: q/k norms, sliding-window layers, 1 KV head): Hessians, CALDERA on every
    # layer, assembly and reload; the compressed model stays close to the dense one on its calibration text.
    model = tiny_gemma3(1, tie_word_embeddings=True)
    ids = torch.randint(0, 128, (4, 16), generator=torch.Generator().manual_seed(0))
    collect_hessians(model, ids, tmp_path / "h", progress=False)
    s = C.compress_model(model, tmp_path / "h", "caldera", CALDERA, tmp_path / "layers", progress=False)
    assert s["computed"] == [0, 1, 2]
    path, summary = C.assemble_checkpoint(model, tmp_path / "layers", tmp_path / "ckpt", "caldera", CALDERA)
    assert summary["bits"]["n_matrices_compressed"] == 21
    loaded, _ = load_compressed(path)
    assert type(loaded).__name__ == "Gemma3ForCausalLM"
    with torch.no_grad():
        dense, comp = model(ids).logits, loaded(ids).logits
    assert torch.isfinite(comp).all()
    rel = (comp - dense).norm() / dense.norm()
    assert 0 < rel < 0.5, rel


def test_layers_from_other_hessians_are_recomputed(tmp_path):
    # Hessians recomputed (e.g. another calibration set) make every layer computed from the old ones stale.
    model = tiny_llama(2)
    g = torch.Generator().manual_seed(0)
    collect_hessians(model, torch.randint(0, 128, (4, 16), generator=g), tmp_path / "h", progress=False)
    s = C.compress_model(model, tmp_path / "h", "quip#", {}, tmp_path / "layers", progress=False)
    assert s["computed"] == [0, 1]
    first = C.read_layer_result(tmp_path / "layers", 0)["matrices"]["mlp.up_proj"]["error"]
    collect_hessians(model, torch.randint(0, 128, (4, 16), generator=g), tmp_path / "h2", progress=False)
    (tmp_path / "h2" / "layer_000.safetensors").replace(tmp_path / "h" / "layer_000.safetensors")
    # one layer of another calibration set among the others: refused before any work
    with pytest.raises(ValueError, match=r"layer_000\.safetensors has calibration_sha256 '\w+' but .*hessians\.json"):
        C.compress_model(model, tmp_path / "h", "quip#", {}, tmp_path / "layers", progress=False)
    for f in ("layer_001.safetensors", "hessians.json"):  # the whole folder recomputed
        (tmp_path / "h2" / f).replace(tmp_path / "h" / f)
    s = C.compress_model(model, tmp_path / "h", "quip#", {}, tmp_path / "layers", progress=False)
    assert s["computed"] == [0, 1] and s["skipped"] == []
    assert C.read_layer_result(tmp_path / "layers", 0)["matrices"]["mlp.up_proj"]["error"] != first


def test_assembled_from_one_folder_per_job_equals_one_folder(setup):
    """The workflow compresses each chunk of layers into its own folder; assembling from those folders gives
    the same checkpoint as from one folder holding every layer. A typed config is accepted like its dict."""
    from safetensors.torch import load_file

    model, root = setup
    cfg = get_method("rtn").make_config({"bits": 3})
    C.compress_model(model, root / "hess", "rtn", cfg, root / "one", progress=False)
    for li in (0, 1):
        C.compress_model(model, root / "hess", "rtn", {"bits": 3}, root / f"job{li}", layers=[li], progress=False)
    p1, s1 = C.assemble_checkpoint(model, root / "one", root / "one.ckpt", "rtn", cfg)
    p2, s2 = C.assemble_checkpoint(model, [root / "job1", root / "job0"], root / "jobs.ckpt", "rtn", {"bits": 3})
    assert s1["dense_layers"] == s2["dense_layers"] == []
    assert {k: e["error"] for k, e in s1["errors"].items()} == {k: e["error"] for k, e in s2["errors"].items()}
    t1, t2 = load_file(str(p1 / "model.safetensors")), load_file(str(p2 / "model.safetensors"))
    assert t1.keys() == t2.keys() and all(torch.equal(t1[k], t2[k]) for k in t1)
    with pytest.raises(ValueError, match=r"layers \[1\].*not compressed"):
        C.assemble_checkpoint(model, [root / "job0"], root / "bad.ckpt", "rtn", cfg)


def test_rerun_is_byte_identical_file_by_file(setup):
    """Per-layer files (not only the final checkpoint) are reproducible: the safetensors have one metadata key, so
    the header does not depend on safetensors' per-process random map order, and the JSON holds no clock reading."""
    from safetensors import safe_open

    model, root = setup
    runs = [root / f"repro{i}.layers" for i in range(2)]
    for ld in runs:
        C.compress_model(model, root / "hess", "quip#", {}, ld, progress=False)
    for li in (0, 1):
        a, b = (C.layer_paths(ld, li)[0] for ld in runs)
        assert a.read_bytes() == b.read_bytes()
        with safe_open(str(a), "pt") as f:
            assert f.metadata() == {"caldera_layer": json.dumps({"format": C.FORMAT, "layer": li})}
        # the JSON too: the clock readings are in the timing file beside it
        ja, jb = (C.layer_paths(ld, li)[1] for ld in runs)
        assert ja.read_bytes() == jb.read_bytes() and b"wall_s" not in ja.read_bytes()
        ta, tb = (json.loads(C.layer_timing_path(ld, li).read_text()) for ld in runs)
        assert ta["finished_at"] != tb["finished_at"]


def test_orphaned_temporaries_are_removed_by_the_next_run(setup):
    """A kill -9 during a write leaves ``layer_XXX.*.tmp-<pid>``; the next compress run in that folder deletes
    the ones whose process is gone (never those of a live parallel job)."""
    import os
    import subprocess
    import sys

    from caldera.atomic import tmp_sibling

    model, root = setup
    ld = root / "orphans.layers"
    ld.mkdir()
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    orphans = [ld / f"layer_000.safetensors.tmp-{proc.pid}", ld / f"layer_001.json.tmp-{proc.pid}"]
    live = tmp_sibling(ld / "layer_001.safetensors")  # pid of this (live) process
    for p in (*orphans, live):
        p.write_bytes(b"partial")
    C.compress_model(model, root / "hess", "rtn", {"bits": 4}, ld, layers=[0], progress=False)
    assert not any(p.exists() for p in orphans) and live.exists()
    os.unlink(live)
    assert sorted(p.name for p in ld.iterdir()) == ["layer_000.json", "layer_000.safetensors", "layer_000.timing.json"]


def test_an_all_zero_matrix_does_not_stop_the_model(setup):
    """A dead (all-zero) linear must not raise ZeroDivisionError in caldera_decompose and end the whole
    compression; it is now stored exactly (Ŵ = 0, error 0) and the rest of the layer is unaffected."""
    model, root = setup
    zeroed = tiny_llama()
    with torch.no_grad():
        zeroed.model.layers[0].self_attn.v_proj.weight.zero_()
    ld = root / "zero.layers"
    s = C.compress_model(zeroed, root / "hess", "caldera", CALDERA, ld, layers=[0], progress=False)
    m = s["matrices"]["0.self_attn.v_proj"]
    assert m["error"] == 0.0 and m["error_reg"] == 0.0
    assert 0 < s["matrices"]["0.self_attn.q_proj"]["error"] < 1
    path, _ = C.assemble_checkpoint(zeroed, ld, root / "zero.ckpt", "caldera", CALDERA, allow_partial=True)
    loaded, _ = load_compressed(path)
    v = loaded.model.layers[0].self_attn.v_proj
    assert isinstance(v, CompressedLinear) and not v.weight_reconstruction().any()


def test_hessian_errors_name_the_file(tmp_path):
    """A corrupt Hessian file, and a well-formed (hashed) one the decomposition cannot use,
    both give an error naming the file."""
    from safetensors import safe_open
    from safetensors.torch import load_file, save_file

    from caldera.pipeline.hessian_files import META_KEY, layer_file, tensors_sha256

    model = tiny_llama()
    ids = torch.randint(0, 128, (4, 16), generator=torch.Generator().manual_seed(0))
    collect_hessians(model, ids, tmp_path / "h", layers=[0], progress=False)
    p = layer_file(tmp_path / "h", 0)
    with safe_open(str(p), "pt") as f:
        meta = json.loads(f.metadata()[META_KEY])
    tensors = {k: v.clone() for k, v in load_file(str(p)).items()}
    tensors["qkv.H"] = -tensors["qkv.H"]  # negative definite: no regularization makes it usable
    save_file(tensors, str(p), {META_KEY: json.dumps(meta)})  # stale hash
    with pytest.raises(ValueError, match=r"layer_000\.safetensors is corrupt.*content hash"):
        C.compress_model(model, tmp_path / "h", "caldera", CALDERA, tmp_path / "a", layers=[0], progress=False)
    meta["tensors_sha256"] = tensors_sha256(tensors)  # hashed: only the decomposition can object
    save_file(tensors, str(p), {META_KEY: json.dumps(meta)})
    with pytest.raises(ValueError, match=r"layer 0 with the Hessians of .*layer_000\.safetensors: "):
        C.compress_model(model, tmp_path / "h", "caldera", CALDERA, tmp_path / "b", layers=[0], progress=False)


def _docs_example(heading: str = "## Adding a compression method") -> str:
    """The first Python block under ``heading`` in docs/methods.md, exactly as printed."""
    import re
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / "docs" / "methods.md").read_text()
    section = text[text.index(heading):]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def _readme_method_source() -> str:
    """The worked example of docs/methods.md ("Adding a compression method")."""
    return _docs_example()


GROUP_EXAMPLE = "## A method with its own storage: scales per group"


@pytest.mark.parametrize("heading", ["## Adding a compression method", GROUP_EXAMPLE])
def test_the_documented_methods_import_without_torch(tmp_path, heading):
    """Each documented example module loads without torch (a pinned workflow job unpickles its config first),
    the per-group one with its quantizer class and registration."""
    import subprocess
    import sys

    (tmp_path / "example_method.py").write_text(_docs_example(heading))
    code = ("import sys; import example_method; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'torch')[:3])")
    r = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120,
                       env={**__import__("os").environ, "PYTHONPATH": str(tmp_path)})
    assert r.returncode == 0 and r.stdout.strip() == "[]", (r.stdout, r.stderr)


def test_the_per_group_method_stores_its_codes_and_scales_and_counts_them(setup, monkeypatch):
    """The per-group example of docs/methods.md, as printed: its checkpoint holds uint8 codes, one float32 scale
    per group of 64 and float16 factors (no dense Q); the loaded model computes with exactly its Q + L R; the
    bits are counted from what is stored: 3 per weight, 32 per scale of 64 weights, 16 per factor entry."""
    from caldera import quantizers
    from caldera.methods import registry

    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))
    monkeypatch.setattr(quantizers, "_REGISTERED", dict(quantizers._REGISTERED))
    ns: dict = {}
    exec(compile(_docs_example(GROUP_EXAMPLE), "docs/methods.md", "exec"), ns)
    model, root = setup
    s = C.compress_model(model, root / "hess", "group-rtn3-lr", {}, root / "group.layers", progress=False)
    shapes = [(lin.out_features, lin.in_features) for layer in decoder_layers(model)
              for lin in (layer.get_submodule(n) for n in C.LINEARS)]
    params = sum(n * d for n, d in shapes)
    want = sum(3 * n * d + 32 * n * d // 64 + 16 * 8 * (n + d) for n, d in shapes) / params
    assert s["bits"]["storage_bits_per_weight"] == pytest.approx(want, rel=1e-12)
    assert s["bits"]["b_q"] == 3 and s["bits"]["b_lr"] == 16 and s["bits"]["rank"] == 8
    assert s["bits"]["average_bits"] == pytest.approx(average_bits(shapes, 3, 16, 8))
    path, _ = C.assemble_checkpoint(model, root / "group.layers", root / "group.ckpt", "group-rtn3-lr", {})
    loaded, _ = load_compressed(path)
    ref = tiny_llama()
    cfg = ns["GroupRTNConfig"]()
    for li in range(2):
        for name in C.LINEARS:
            mod = loaded.model.layers[li].get_submodule(name)
            n, d = mod.out_features, mod.in_features
            assert mod.meta["q_quantizer"] == "group-rtn3-g64" and not mod.dense_q
            assert mod.Q_codes.dtype == torch.uint8 and mod.Q_scale.shape == (n, d // 64)
            assert mod.L_16.dtype == torch.float16 and mod.L_16.shape == (n, 8)
            lin = ref.model.layers[li].get_submodule(name)
            dec = ns["group_rtn3_lr"](lin.weight.data.float(), None, cfg)
            lin.weight.data = dec.reconstruction()
    ids = torch.randint(0, 128, (2, 12), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        torch.testing.assert_close(loaded(ids).logits, ref(ids).logits, rtol=1e-4, atol=1e-4)


def test_the_readme_method_compresses_stores_and_evaluates_a_float_q(setup, monkeypatch):
    """The documented example (a Q without codes) runs as printed: compressed, assembled, reloaded, and the
    loaded model computes with exactly its Q; its bits are the float32 Q's 32 per weight, not a quantizer's."""
    from caldera.methods import registry

    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))
    ns: dict = {}
    exec(compile(_readme_method_source(), "docs/methods.md", "exec"), ns)
    model, root = setup
    s = C.compress_model(model, root / "hess", "my-rounding", {"bits": 4}, root / "mine.layers", progress=False)
    assert s["computed"] == [0, 1]
    assert s["bits"]["b_q"] == 32 and s["bits"]["average_bits"] == 32
    assert s["bits"]["storage_bits_per_weight"] == 32  # no scales, no signs: the float32 Q only
    path, info = C.assemble_checkpoint(model, root / "mine.layers", root / "mine.ckpt", "my-rounding", {"bits": 4})
    loaded, _ = load_compressed(path)
    ref = tiny_llama()
    cfg = ns["MyConfig"](bits=4)
    for li in range(2):
        for name in C.LINEARS:
            lin = ref.model.layers[li].get_submodule(name)
            lin.weight.data = ns["my_rounding"](lin.weight.data.float(), None, cfg).Q
            assert loaded.model.layers[li].get_submodule(name).meta["q_format"] == "float32"
    ids = torch.randint(0, 128, (2, 12), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        torch.testing.assert_close(loaded(ids).logits, ref(ids).logits, rtol=1e-4, atol=1e-4)
        assert not torch.allclose(ref(ids).logits, tiny_llama()(ids).logits, atol=1e-3)  # Q is not W


def test_a_rank_too_large_for_some_matrix_is_refused_before_any_work(setup):
    """k/v_proj of the tiny model are 32×64: rank 40 fits q_proj (64×64) but not them. The error names the
    method, the rank, both matrices and their shape, and comes before any Hessian is read or folder made."""
    model, root = setup
    with pytest.raises(ValueError) as e:
        C.compress_model(model, root / "no-such-hessians", "loftq", {"rank": 40}, root / "lq.layers", progress=False)
    msg = str(e.value)
    assert "method 'loftq' cannot compress 2 matrices" in msg
    assert "self_attn.k_proj 32×64: rank=40 is too large (accepted: 1 <= rank < min(n, d) = 32)" in msg
    assert "self_attn.v_proj 32×64" in msg and "q_proj" not in msg
    assert not (root / "lq.layers").exists()
    with pytest.raises(ValueError, match=r"self_attn.q_proj 64×64: d=64 is not a multiple of block=48"):
        C.compress_model(model, root / "no-such-hessians", "loftq", {"rank": 4, "block": 48}, root / "lq.layers",
                         progress=False)

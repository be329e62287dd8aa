"""Hessian accumulation and layer-by-layer collection through a tiny random LLaMA."""

from __future__ import annotations

import json

import pytest
import torch

from caldera.pipeline.hessians import (
    GROUPS,
    HessianAccumulator,
    collect_hessians,
    layer_file,
    load_layer_hessians,
    read_layer_hessians,
)
from caldera.pipeline.layer_runner import decoder_layers
from tests.helpers import tiny_gemma3, tiny_llama
from tests.pipeline.hessian_helpers import rewrite, swap_layers, wrong_shape


def calib(n=5, t=12, seed=0):
    return torch.randint(0, 128, (n, t), generator=torch.Generator().manual_seed(seed))


def test_incremental_equals_batch():
    g = torch.Generator().manual_seed(0)
    X = torch.randn(3, 37, 24, generator=g, dtype=torch.float64)
    flat = X.reshape(-1, 24)
    acc = HessianAccumulator(24)
    cuts = sorted(torch.randperm(flat.shape[0] - 1, generator=g)[:6].add(1).tolist())
    for part in torch.tensor_split(flat, cuts):
        acc.update(part)
    assert acc.count == flat.shape[0]
    torch.testing.assert_close(acc.H, flat.T @ flat / flat.shape[0], rtol=0, atol=1e-12)
    torch.testing.assert_close(acc.mean, flat.mean(0), rtol=0, atol=1e-12)
    # leading dims are rows; low-precision input: each batch's product in float32, summed in float64, so
    # within float32 rounding of the float64 oracle (and not exact: the path is really float32)
    acc2 = HessianAccumulator(24)
    acc2.update(X.float())
    X32 = X.float().double().reshape(-1, 24)
    ref = X32.T @ X32 / X32.shape[0]
    torch.testing.assert_close(acc2.H, ref, rtol=0, atol=1e-6 * float(ref.abs().max()))
    torch.testing.assert_close(acc2.mean, X32.mean(0), rtol=0, atol=1e-12)


def test_accumulator_errors_and_roundtrip(tmp_path):
    acc = HessianAccumulator(8)
    with pytest.raises(ValueError, match="no data"):
        _ = acc.H
    with pytest.raises(ValueError, match="d=8"):
        acc.update(torch.randn(3, 7))
    acc.update(torch.randn(10, 8, generator=torch.Generator().manual_seed(1)))
    p = acc.save(tmp_path / "h.safetensors", layer=3, group="qkv", seed=7, model="m")
    back, meta = HessianAccumulator.load(p)
    assert meta["layer"] == 3 and meta["group"] == "qkv" and meta["n_tokens"] == 10 and meta["dtype"] == "float64"
    torch.testing.assert_close(back.H, acc.H, rtol=0, atol=1e-15)
    torch.testing.assert_close(back.mean, acc.mean, rtol=0, atol=1e-15)
    assert back.count == 10


def _direct_hessians(model, ids, batch_size):
    accs, handles = {}, []
    for li, layer in enumerate(decoder_layers(model)):
        for g, (path, _) in GROUPS.items():
            mod = layer
            for part in path.split("."):
                mod = getattr(mod, part)
            acc = accs[(li, g)] = HessianAccumulator(mod.in_features)
            handles.append(mod.register_forward_pre_hook(lambda _m, a, _acc=acc: _acc.update(a[0])))
    with torch.no_grad():
        for b in ids.split(batch_size):
            model(input_ids=b, use_cache=False)
    for h in handles:
        h.remove()
    return accs


@pytest.mark.parametrize("make", [tiny_llama, tiny_gemma3], ids=["llama", "gemma3"])
def test_pipeline_matches_direct_hooks(tmp_path, make):
    # Gemma-3: sliding-window layers (window 4 < 12 tokens) get other masks and RoPE than the global layer, so
    # this fails if a layer is run with another layer's keyword arguments.
    model = make()
    n_layers = len(decoder_layers(model))
    ids = calib()
    summary = collect_hessians(
        model,
        ids,
        tmp_path,
        batch_size=2,
        progress=False,
        store_dtype=torch.float64,
        seed=0,
        model_name="tiny",
    )
    assert summary["computed"] == list(range(n_layers)) and summary["skipped"] == []
    direct = _direct_hessians(model, ids, batch_size=3)
    for li in range(n_layers):
        H = load_layer_hessians(layer_file(tmp_path, li))
        groups, meta = read_layer_hessians(layer_file(tmp_path, li))
        assert meta["layer"] == li and meta["n_tokens"] == 60 and meta["model"] == "tiny"
        for g in GROUPS:
            ref = direct[(li, g)]
            assert int(groups[g]["count"]) == ref.count == 60
            torch.testing.assert_close(H[g], ref.H, rtol=1e-5, atol=1e-6)
            torch.testing.assert_close(groups[g]["mu"], ref.mean, rtol=1e-5, atol=1e-6)
    assert json.loads((tmp_path / "hessians.json").read_text())["n_tokens"] == 60


def test_resume_subset_and_corrupt(tmp_path):
    model = tiny_llama()
    ids = calib(n=3, t=8)
    s1 = collect_hessians(model, ids, tmp_path, layers=[1], progress=False)
    assert s1["computed"] == [1] and not layer_file(tmp_path, 0).exists()
    m1 = layer_file(tmp_path, 1).stat().st_mtime_ns
    s2 = collect_hessians(model, ids, tmp_path, progress=False)
    assert s2["computed"] == [0] and s2["skipped"] == [1]
    assert layer_file(tmp_path, 1).stat().st_mtime_ns == m1
    # a truncated artifact is reported clearly and recomputed by the next run
    p = layer_file(tmp_path, 0)
    p.write_bytes(p.read_bytes()[:-100])
    with pytest.raises(ValueError, match=r"layer_000\.safetensors.*delete it and rerun"):
        load_layer_hessians(p)
    s3 = collect_hessians(model, ids, tmp_path, progress=False)
    assert s3["computed"] == [0]
    load_layer_hessians(p)
    # what a run did goes to the timing file; the summary is the same bytes as an uninterrupted run's
    timing = json.loads((tmp_path / "hessians.timing.json").read_text())
    assert timing["computed"] == [0] and timing["skipped"] == [1] and timing["layers_run"] == 1
    assert timing["collect_s"] > 0
    collect_hessians(model, ids, tmp_path / "whole", progress=False)
    assert (tmp_path / "hessians.json").read_bytes() == (tmp_path / "whole" / "hessians.json").read_bytes()
    assert json.loads((tmp_path / "whole" / "hessians.timing.json").read_text())["layers_run"] == 2
    # different calibration data in the same folder is refused
    with pytest.raises(ValueError, match="different calibration data"):
        collect_hessians(model, calib(n=3, t=8, seed=5), tmp_path, progress=False)
    with pytest.raises(ValueError, match="out of range"):
        collect_hessians(model, ids, tmp_path, layers=[2], progress=False)
    assert not list(tmp_path.glob("*.tmp-*"))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA (paper-scale Hessians run on a GPU)")
def test_hessians_on_cuda_match_cpu(tmp_path):
    model, ids = tiny_llama(), calib()
    collect_hessians(model, ids, tmp_path / "cpu", progress=False)
    collect_hessians(tiny_llama().cuda(), ids, tmp_path / "cuda", progress=False)
    for li in range(len(decoder_layers(model))):
        a, b = (load_layer_hessians(layer_file(tmp_path / d, li)) for d in ("cpu", "cuda"))
        for g in a:
            torch.testing.assert_close(b[g], a[g], rtol=1e-4, atol=1e-5 * float(a[g].abs().max()))


def _flip(path, tensor, byte, bit):
    """Flip one bit of entry 0 of ``tensor`` in a safetensors file, in place (byte 0 = lowest mantissa bits of a
    little-endian float32, byte 3 bit 6 = an exponent bit)."""
    raw = bytearray(path.read_bytes())
    n = int.from_bytes(raw[:8], "little")
    start = 8 + n + json.loads(raw[8 : 8 + n])[tensor]["data_offsets"][0]
    raw[start + byte] ^= 1 << bit
    path.write_bytes(bytes(raw))


@pytest.mark.parametrize("byte, bit, what", [(0, 0, "low mantissa bit"), (3, 6, "exponent bit")])
def test_flipped_bit_is_an_error_naming_the_file_and_recomputed(tmp_path, byte, bit, what):
    """A flipped bit, even one that leaves every value finite and plausible, never loads."""
    model, ids = tiny_llama(), calib(n=3, t=8)
    collect_hessians(model, ids, tmp_path, progress=False)
    p = layer_file(tmp_path, 1)
    good = {g: H.clone() for g, H in load_layer_hessians(p).items()}  # not a view of the file
    _flip(p, "qkv.H", byte, bit)
    with pytest.raises(ValueError) as e:
        load_layer_hessians(p)
    msg = str(e.value)
    assert str(p) in msg and "do not match the content hash" in msg and "delete it and rerun" in msg
    assert "sigma_reg" not in msg
    s = collect_hessians(model, ids, tmp_path, progress=False)  # the next run recomputes exactly that layer
    assert s["computed"] == [1]
    again = load_layer_hessians(p)
    for g in good:
        assert torch.equal(again[g], good[g])  # recomputed: the same Hessians


def test_hessian_without_content_hash_is_refused(tmp_path):
    from safetensors.torch import load_file, save_file

    from caldera.pipeline.hessians import META_KEY

    collect_hessians(tiny_llama(), calib(n=3, t=8), tmp_path, layers=[0], progress=False)
    p = layer_file(tmp_path, 0)
    from safetensors import safe_open

    with safe_open(str(p), "pt") as f:
        meta = json.loads(f.metadata()[META_KEY])
    del meta["tensors_sha256"]
    save_file(load_file(str(p)), str(p), {META_KEY: json.dumps(meta)})
    with pytest.raises(ValueError, match=r"layer_000\.safetensors is corrupt.*no content hash 'tensors_sha256'"):
        load_layer_hessians(p)


def test_accumulator_file_records_and_checks_its_hash(tmp_path):
    acc = HessianAccumulator(8)
    acc.update(torch.randn(5, 8, dtype=torch.float64))
    p = acc.save(tmp_path / "h.safetensors", dtype=torch.float32)
    assert HessianAccumulator.load(p)[1]["tensors_sha256"]
    _flip(p, "H", 0, 0)
    with pytest.raises(ValueError, match=r"h\.safetensors is corrupt.*content hash"):
        HessianAccumulator.load(p)


def _hidden_state_bytes(hidden: int, T: int) -> int:
    """Bytes of the distinct storages of every live (batch, T, hidden) tensor (the calibration hidden states)."""
    import gc
    import warnings

    gc.collect()
    seen = {}
    with warnings.catch_warnings():  # isinstance() on some lazily deprecated torch objects warns
        warnings.simplefilter("ignore")
        tensors = [o for o in gc.get_objects() if isinstance(o, torch.Tensor)]
    for o in tensors:
        if o.ndim == 3 and tuple(o.shape[1:]) == (T, hidden):
            st = o.untyped_storage()
            seen[st.data_ptr()] = st.nbytes()
    return sum(seen.values())


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("offload", [False, True])
def test_one_copy_of_the_hidden_states_in_the_models_dtype(tmp_path, dtype, offload):
    """While every decoder layer runs, the calibration hidden states are held once (N x T x hidden in the
    model's dtype), not as the layer's inputs plus its outputs plus the captured layer-0 inputs; and the
    Hessians are those of the reference run (bitwise: the same operations)."""
    model = tiny_llama().to(dtype)
    ids = calib(n=6, t=12)
    hidden = model.config.hidden_size
    peaks = []
    hooks = [layer.register_forward_pre_hook(lambda *_: peaks.append(_hidden_state_bytes(hidden, 12)))
             for layer in decoder_layers(model)]
    collect_hessians(model, ids, tmp_path / "a", batch_size=2, progress=False, offload=offload)
    for h in hooks:
        h.remove()
    one_copy = 6 * 12 * hidden * dtype.itemsize
    assert len(peaks) == 2 * 3  # layers x batches
    assert max(peaks) == one_copy
    # the same files as collecting with whole-model hooks over the same batches, in one forward per batch
    direct = _direct_hessians(model, ids, batch_size=2)
    for li in range(2):
        H = load_layer_hessians(layer_file(tmp_path / "a", li))
        for g in GROUPS:
            torch.testing.assert_close(H[g], direct[(li, g)].H.float(), rtol=0, atol=0)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_layers_streamed_to_cuda_from_a_cpu_model(tmp_path):
    """The model stays on the CPU; each layer runs on CUDA for its pass (device=), states offloaded or not."""
    model, ids = tiny_llama(), calib()
    collect_hessians(model, ids, tmp_path / "cpu", progress=False)
    for offload in (False, True):
        collect_hessians(model, ids, tmp_path / f"s{offload}", progress=False, device="cuda", offload=offload)
        assert all(p.device.type == "cpu" for p in model.parameters())
        for li in range(len(decoder_layers(model))):
            a, b = (load_layer_hessians(layer_file(tmp_path / d, li)) for d in ("cpu", f"s{offload}"))
            for g in a:
                torch.testing.assert_close(b[g], a[g], rtol=1e-4, atol=1e-5 * float(a[g].abs().max()))


# ------------------------------------------------------------ a Hessian file proves which layer and job it is for


def _set_count(n):
    def go(t):
        for g in GROUPS:
            t[f"{g}.count"] = torch.tensor(n, dtype=torch.int64)
    return go


@pytest.fixture(scope="module")
def collected(tmp_path_factory):
    d = tmp_path_factory.mktemp("hess")
    model = tiny_llama()
    collect_hessians(model, calib(n=3, t=8), d / "h", progress=False)
    collect_hessians(model, calib(n=3, t=8, seed=9), d / "other", progress=False)
    return model, d


_L0 = r"layer_000\.safetensors"
# (mutation of a copy of the folder, what the refusal says); every file rewritten as the writer writes one
HESSIAN_MUTATIONS = {
    "two layer files swapped": (swap_layers, _L0 + r" is not what its name and metadata say \(its metadata says it "
                                                   r"holds layer 1, its name says layer 0"),
    "model edited": (lambda d: rewrite(layer_file(d, 0), lambda m: m.update(model="other/model")),
                     _L0 + r" has model 'other/model' but .*hessians\.json says 'LlamaForCausalLM'"),
    "calibration hash edited": (lambda d: rewrite(layer_file(d, 0), lambda m: m.update(calibration_sha256="0" * 16)),
                                _L0 + r" has calibration_sha256 '0{16}' but .*hessians\.json says"),
    "n_tokens edited": (lambda d: rewrite(layer_file(d, 0), lambda m: m.update(n_tokens=999)),
                        _L0 + r" .*group 'qkv' counted 24 tokens, its metadata says n_tokens 999"),
    "n_tokens and counts edited": (lambda d: rewrite(layer_file(d, 0), lambda m: m.update(n_tokens=999),
                                                      _set_count(999)),
                                   _L0 + r" has n_tokens 999 but .*hessians\.json says 24"),
    "count of 0": (lambda d: rewrite(layer_file(d, 0), lambda m: m.update(n_tokens=0), _set_count(0)),
                   _L0 + r" .*n_tokens 0 in its metadata; a Hessian is an average over at least one token"),
    "fp16 under a float32 header": (lambda d: rewrite(layer_file(d, 0), None, lambda t: t.update(
        {k: v.half() for k, v in t.items() if k.endswith(".H")})),
        _L0 + r" .*group '\w+' stores H as float16 under a header that says dtype 'float32'"),
    "wrong shape": (lambda d: rewrite(layer_file(d, 0), None, wrong_shape),
                    _L0 + r": group 'qkv' H has shape \(96, 96\); layer 0's self_attn\.q_proj takes 64 inputs, so "
                          r"the expected shape is \(64, 64\)"),
    "foreign file (other calibration)": (
        lambda d: layer_file(d, 1).write_bytes(layer_file(d.parent / "other", 1).read_bytes()),
        r"layer_001\.safetensors has calibration_sha256 '\w+' but .*hessians\.json says"),
    "foreign file, no summary": (
        lambda d: (layer_file(d, 1).write_bytes(layer_file(d.parent / "other", 1).read_bytes()),
                   (d / "hessians.json").unlink()),
        r"layer_001\.safetensors has calibration_sha256 '\w+' but .*layer_000\.safetensors says"),
}


@pytest.mark.parametrize("case", list(HESSIAN_MUTATIONS))
def test_wrong_hessians_are_refused_before_work(collected, tmp_path, case):
    """Each mutation (resealed as the writer seals a file) is refused by compress_model before any layer is
    compressed (its output folder is not even created), naming the file and what is wrong."""
    import shutil

    from caldera.pipeline.compress import compress_model

    model, d = collected
    h = tmp_path / "h"
    shutil.copytree(d / "h", h)
    (tmp_path / "other").symlink_to(d / "other")
    edit, msg = HESSIAN_MUTATIONS[case]
    edit(h)
    out = tmp_path / "layers"
    with pytest.raises(ValueError, match=msg):
        compress_model(model, h, "quip#", {}, out, progress=False)
    assert not out.exists()


def test_the_job_names_its_model_and_token_count(collected, tmp_path):
    """What the job knows (hessian_expect) wins over the folder's summary: another model's name or token count is
    refused; the same model spelled as another path to the same folder is the same model."""
    from caldera.pipeline.hessians import check_hessian_files

    model, d = collected
    name = json.loads((d / "h" / "hessians.json").read_text())["model"]
    check_hessian_files(d / "h", [0, 1], model, {"model": name, "n_tokens": 24})
    with pytest.raises(ValueError, match=r"layer_000\.safetensors has model '[^']+' but this job says 'llama-7b'"):
        check_hessian_files(d / "h", [0, 1], model, {"model": "llama-7b"})
    with pytest.raises(ValueError, match=r"has n_tokens 24 but this job says 4096"):
        check_hessian_files(d / "h", [0], model, {"n_tokens": 4096})
    m = tmp_path / "m"
    m.mkdir()
    (tmp_path / "link").symlink_to(m)
    rewrite(layer_file(d / "h", 0), lambda meta: meta.update(model=str(m)), dst=tmp_path / "layer_000.safetensors")
    check_hessian_files(tmp_path, [0], model, {"model": str(tmp_path / "link")})
    with pytest.raises(FileNotFoundError, match=r"no Hessians for layers \[1\]"):
        check_hessian_files(tmp_path, [0, 1], model)


def test_a_swapped_file_is_refused_by_every_reader(collected, tmp_path):
    """load_layer_hessians itself compares a file's layer with its name (a reader of one file refuses it too; the
    jobs' readers, compression, selection and figures, check the whole folder first:
    tests/experiments/jobs/test_hessian_readers.py), and a rerun of collection recomputes the two swapped layers."""
    import shutil

    model, d = collected
    h = tmp_path / "h"
    shutil.copytree(d / "h", h)
    swap_layers(h)
    with pytest.raises(ValueError, match=r"layer_001\.safetensors is not what its name and metadata say"):
        load_layer_hessians(layer_file(h, 1))
    assert collect_hessians(model, calib(n=3, t=8), h, progress=False)["computed"] == [0, 1]
    load_layer_hessians(layer_file(h, 0))


def test_the_recorded_model_comes_from_the_summary_else_from_a_layer_file(tmp_path):
    """recorded_model: hessians.json's model; without it, the first layer file's metadata; None for a folder
    that names none (empty, or files that cannot be read)."""
    from caldera.pipeline.hessians import recorded_model

    collect_hessians(tiny_llama(0), calib(2, 8), tmp_path, progress=False, model_name="my/model")
    assert recorded_model(tmp_path) == ("my/model", str(tmp_path / "hessians.json"))
    (tmp_path / "hessians.json").write_text(json.dumps({"model": "another"}))
    assert recorded_model(tmp_path)[0] == "another"
    (tmp_path / "hessians.json").unlink()
    assert recorded_model(tmp_path) == ("my/model", str(layer_file(tmp_path, 0)))
    empty = tmp_path / "empty"
    empty.mkdir()
    assert recorded_model(empty) is None
    (empty / "hessians.json").write_text("{}")
    (empty / "layer_000.safetensors").write_bytes(b"not safetensors")
    assert recorded_model(empty) is None

"""The Hessian files (caldera.pipeline.hessian_files): a changed bit, a missing content hash, a file in another
layer's place or of another job are refused by every reader, naming the file."""

from __future__ import annotations

import json

import pytest
import torch

from caldera.pipeline.hessian_files import layer_file, load_layer_hessians
from caldera.pipeline.hessians import collect_hessians
from caldera.pipeline.linears import GROUPS
from tests.helpers import tiny_llama
from tests.pipeline.hessian_helpers import flip_bit, rewrite, swap_layers, wrong_shape


def calib(n=5, t=12, seed=0):
    return torch.randint(0, 128, (n, t), generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("byte, bit, what", [(0, 0, "low mantissa bit"), (3, 6, "exponent bit")])
def test_flipped_bit_is_an_error_naming_the_file_and_recomputed(tmp_path, byte, bit, what):
    """A flipped bit, even one that leaves every value finite and plausible, never loads."""
    model, ids = tiny_llama(), calib(n=3, t=8)
    collect_hessians(model, ids, tmp_path, progress=False)
    p = layer_file(tmp_path, 1)
    good = {g: H.clone() for g, H in load_layer_hessians(p).items()}  # not a view of the file
    flip_bit(p, "qkv.H", byte, bit)
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

    from caldera.pipeline.hessian_files import META_KEY

    collect_hessians(tiny_llama(), calib(n=3, t=8), tmp_path, layers=[0], progress=False)
    p = layer_file(tmp_path, 0)
    from safetensors import safe_open

    with safe_open(str(p), "pt") as f:
        meta = json.loads(f.metadata()[META_KEY])
    del meta["tensors_sha256"]
    save_file(load_file(str(p)), str(p), {META_KEY: json.dumps(meta)})
    with pytest.raises(ValueError, match=r"layer_000\.safetensors is corrupt.*no content hash 'tensors_sha256'"):
        load_layer_hessians(p)


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
    from caldera.pipeline.hessian_files import check_hessian_files

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
    from caldera.pipeline.hessian_files import recorded_model

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

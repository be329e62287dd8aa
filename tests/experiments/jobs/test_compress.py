"""The compression jobs (caldera.experiments.jobs.compress): chunking a variant's layers, the per-layer files and
summary a chunk job writes, its rerun, and the one-job path of a variant of one chunk."""

from __future__ import annotations

import json

import pytest
import torch

from caldera.atomic import timing_path
from caldera.experiments.jobs import compress as J
from caldera.experiments.planning.plan import Variant
from caldera.experiments.planning.settings import RunContext
from caldera.methods import get_method
from caldera.pipeline.compress import layer_paths
from caldera.pipeline.hessians import collect_hessians
from tests.helpers import model_entry, tiny_model_dir

PARAMS = {"rank": 4, "outer_iters": 1, "inner_iters": 1}


@pytest.fixture(scope="module")
def model_and_hessians(tmp_path_factory):
    """A saved 2-layer tiny LLaMA with its tokenizer, and the Hessians of its layers."""
    from caldera.pipeline.assets import load_model

    root = tmp_path_factory.mktemp("compress_job")
    src = tiny_model_dir(root / "model")
    mdl, _ = load_model(str(src))
    ids = torch.randint(3, 128, (4, 16), generator=torch.Generator().manual_seed(1))
    collect_hessians(mdl, ids, root / "hess", progress=False, model_name="m")
    return src, root / "hess"


def _run(src, layers_per_job: int = 2, layers=None) -> RunContext:
    return RunContext(name="t", device="cpu", dtype="auto", layers_per_job=layers_per_job, layers=layers,
                      models={"m": model_entry(src)})


def _variant() -> Variant:
    return Variant(id="v", model="m", method="caldera", params=PARAMS,
                   config=get_method("caldera").make_config(PARAMS))


@pytest.mark.parametrize(("num_layers", "layers", "k", "want"), [
    (5, None, 2, [[0, 1], [2, 3], [4]]),
    (4, None, 4, [[0, 1, 2, 3]]),
    (4, None, 10, [[0, 1, 2, 3]]),
    (8, (1, 5, 6), 2, [[1, 5], [6]]),
])
def test_layer_chunks_split_the_layers_in_order_into_jobs(num_layers, layers, k, want):
    run = RunContext(name="t", device="cpu", dtype="auto", models={"m": model_entry(num_layers=num_layers)},
                     layers=layers, layers_per_job=k)
    assert J.layer_chunks(run, "m") == want


def test_chunk_job_writes_its_layers_and_summary_and_a_rerun_keeps_them(model_and_hessians, tmp_path):
    src, hess = model_and_hessians
    run, v = _run(src, layers_per_job=1), _variant()
    out = tmp_path / "job1" / "chunk.json"
    res = J.step_compress_layers(run, v, str(hess), 1, str(out))
    assert res == {"layers": [1], "computed": [1], "skipped": []}
    assert json.loads(out.read_text()) == {"layers": [1]}  # the summary holds no clock reading nor how it ran ...
    assert json.loads(timing_path(out).read_text()).keys() == {"wall_s", "computed", "skipped"}  # ... its timing file
    summary = out.read_bytes()
    assert all(p.is_file() for p in layer_paths(out.parent, 1))
    assert not any(p.exists() for p in layer_paths(out.parent, 0))  # chunk 1 is layer 1 only
    before = [p.read_bytes() for p in layer_paths(out.parent, 1)]
    again = J.step_compress_layers(run, v, str(hess), 1, str(out))
    assert again == {"layers": [1], "computed": [], "skipped": [1]}
    assert [p.read_bytes() for p in layer_paths(out.parent, 1)] == before
    assert out.read_bytes() == summary  # a job resumed from the layers it left writes the same summary


def test_variant_job_refuses_a_variant_of_several_chunks(model_and_hessians, tmp_path):
    src, hess = model_and_hessians
    with pytest.raises(ValueError, match=r"variant v: its layers are 2 chunks.*layers_per_job"):
        J.step_compress_variant(_run(src, layers_per_job=1), _variant(), str(hess), str(tmp_path / "layers"),
                                str(tmp_path / "ckpt"))
    assert not (tmp_path / "layers").exists() and not (tmp_path / "ckpt").exists()


def test_variant_job_writes_a_checkpoint_that_loads_and_matches_the_two_job_path(model_and_hessians, tmp_path):
    from caldera.pipeline.checkpoint import load_compressed, read_config
    from caldera.pipeline.checkpoint.provenance import calibration_record, weights_digest

    src, hess = model_and_hessians
    run, v = _run(src), _variant()
    summary = J.step_compress_variant(run, v, str(hess), str(tmp_path / "layers"), str(tmp_path / "one"))
    J.step_assemble(run, v, [str(tmp_path / "layers")], str(tmp_path / "two"), str(hess))
    assert read_config(tmp_path / "one")["method"] == "caldera"
    prov = read_config(tmp_path / "one")["provenance"]  # the stand-in, its weights and the Hessians it used
    assert prov["base_model"] == {"name": "m", "weights_sha256": weights_digest(src)}
    assert prov["calibration"] == calibration_record(hess)
    names = sorted(p.name for p in (tmp_path / "one").iterdir())
    assert names == sorted(p.name for p in (tmp_path / "two").iterdir())
    for name in names:
        assert (tmp_path / "one" / name).read_bytes() == (tmp_path / "two" / name).read_bytes(), name
    assert json.loads((tmp_path / "layers" / "chunk.json").read_text())["layers"] == [0, 1]
    mdl, tok = load_compressed(str(tmp_path / "one"))
    assert tok is not None and isinstance(summary, dict)
    with torch.inference_mode():
        logits = mdl(input_ids=torch.tensor([[1, 5, 9, 4]])).logits
    assert logits.shape == (1, 4, 128) and torch.isfinite(logits).all()

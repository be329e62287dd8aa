"""The jobs' model loaders and rank mapping (caldera.experiments.jobs.models), read from a run's typed settings."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch

from caldera.experiments.jobs.models import model_dtype, model_source, run_device, stand_in_rank
from caldera.experiments.planning.plan import mapped_rank
from caldera.experiments.planning.settings import RunContext
from caldera.strict_yaml import load_yaml_strict
from tests.helpers import model_entry

MINI = Path(__file__).resolve().parents[3] / "config" / "mini.yaml"


def _run(**fields) -> RunContext:
    return RunContext(**{"name": "t", "device": "auto", "dtype": "auto", "models": {}, **fields})


def test_run_device():
    has_cuda = torch.cuda.is_available()
    assert run_device(_run()).type == ("cuda" if has_cuda else "cpu")  # auto
    assert run_device(_run(device="cpu")).type == "cpu"
    if has_cuda:
        assert run_device(_run(device="cuda")).type == "cuda"
    else:
        with pytest.raises(ValueError, match="no CUDA device"):
            run_device(_run(device="cuda"))


def test_model_dtype_is_the_runs():
    assert model_dtype(_run(), "cpu") == torch.float32 and model_dtype(_run(), "cuda") == "auto"
    assert model_dtype(_run(dtype="float16"), "cpu") == torch.float16


def test_model_source_is_the_models_entry_and_names_its_key_on_an_unknown_asset(tmp_path):
    run = _run(models={"a": model_entry(tmp_path / "a"), "b": model_entry("asset:nope")})
    assert model_source(run, "a") == str(tmp_path / "a")
    with pytest.raises(ValueError, match=r"models\.b\.source 'asset:nope': unknown asset"):
        model_source(run, "b")


def test_stand_in_rank_is_the_configs_mapped_rank():
    """The run's typed stand-ins, shapes and rank multiple map a paper rank as the config does, for every paper
    model (the stand-in's shapes, not the paper model's) and a rank multiple other than the default."""
    cfg = load_yaml_strict(MINI)
    for multiple in (8, 16):
        cfg["rank_multiple"] = multiple
        run = RunContext.from_config(cfg)
        assert run.rank_multiple == multiple
        for paper_model in cfg["stand_ins"]:
            for rank, b_lr in ((64, 4), (256, 16)):
                assert stand_in_rank(run, paper_model, rank, b_lr) == mapped_rank(cfg, paper_model, rank, b_lr)
    gemma = dataclasses.replace(run, stand_ins={"llama-2-7b": "gemma3"})
    assert stand_in_rank(gemma, "llama-2-7b", 256, 4) != stand_in_rank(run, "llama-2-7b", 256, 4)

"""caldera.experiments.planning.memory: the peak memory of a job from shapes and dtypes."""

from __future__ import annotations

import pytest

from caldera.experiments.planning import cost as C
from caldera.experiments.planning import memory as M
from caldera.experiments.planning import slurm as S
from caldera.experiments.planning import workload as W
from tests.helpers import fake_costs


def test_70b_evaluate_streams_and_fits_a_gpu_and_the_slurm_profile():
    """Dense LLaMa-2 70B (138 GB in fp16) is over 80 % of an 80 GB GPU, so its evaluation streams its
    layers: one layer + embeddings/head + one window on the device, the hidden states of the largest pass (256
    C4 windows x 4096 tokens x 8192 x 2 bytes = 17.2 GB) + one layer on the host. The whole-model numbers come
    back with stream_layers: never, and a 7B model never streams."""
    from caldera.strict_yaml import load_yaml_strict

    cfg = C.load_workflow_config("config/paper.yaml")
    dense = M.job_memory("evaluate", "llama-2-70b", cfg)
    layer = sum(n * d for n, d in W.shapes_of("llama-2-70b")[0]) * 2 * 1e-9
    states = 256 * 4096 * 8192 * 2 * 1e-9
    assert dense["host"] == pytest.approx(states + layer, rel=1e-6)
    assert layer < dense["device"] < 6 and dense["host"] < 20
    whole = M.job_memory("evaluate", "llama-2-70b", {**cfg, "eval": {**cfg["eval"], "stream_layers": "never"}})
    assert whole["host"] > 130 and whole["device"] > 130
    assert M.job_memory("evaluate", "llama-2-70b", cfg, device_gb=1000) == whole  # a device it fits: in memory
    assert not M.evaluate_streams(cfg, "llama-2-7b", 80.0) and M.evaluate_streams(cfg, "llama-2-70b", 80.0)
    est = C.estimate(cfg, fake_costs("cuda"))
    row = est["llama-2-70b"]["rules"]["evaluate"]
    assert row["stream"] and not est["llama-2-13b"]["rules"]["evaluate"]["stream"]
    assert row["mem_gb"]["device"] < 0.8 * M.DEVICE_GB["cuda"] and row["mem_gb"]["host"] < 25
    # the row's largest job is a compressed variant held whole (~2.2 bits per weight), above the streamed dense one
    assert row["mem_gb"]["device"] > dense["device"]
    # the SLURM profile's per-job memory holds every evaluate job
    want = S.slurm_resources(cfg, None)["evaluate"]["mem_mb"]
    profile = load_yaml_strict("workflow/profiles/slurm/config.yaml")
    assert want == profile["set-resources"]["evaluate"]["mem_mb"] <= profile["default-resources"]["mem_mb"]
    # the time: the same forwards plus one read of the checkpoint per pass (and the state copies on a GPU)
    never = C.estimate({**cfg, "eval": {**cfg["eval"], "stream_layers": "never"}}, fake_costs("cuda"))
    extra = row["s_per_job"] - never["llama-2-70b"]["rules"]["evaluate"]["s_per_job"]
    assert extra == pytest.approx(C.stream_seconds(cfg, "llama-2-70b", True)) and extra > 3 * 138 / C.STREAM_READ_GBPS
    # ... for the dense job alone: the rule's hours count it once, not once per variant
    hours = row["hours"] - never["llama-2-70b"]["rules"]["evaluate"]["hours"]
    assert hours * 3600 == pytest.approx(extra)

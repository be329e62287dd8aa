"""caldera.experiments.planning.slurm: the SLURM profile's requests come from caldera cost's predictions."""

from __future__ import annotations

from caldera.experiments.planning import cost as C
from caldera.experiments.planning import slurm as S
from tests.helpers import fake_costs


def test_slurm_profile_memory_and_gpus_come_from_caldera_cost():
    """The SLURM profile's mem_mb and gpu requests are `caldera cost --device cuda --slurm`'s (memory needs no
    timings); every rule that runs the engine or a forward gets a GPU."""
    from caldera.strict_yaml import load_yaml_strict

    want = S.slurm_resources(C.load_workflow_config("config/paper.yaml"), None)
    profile = load_yaml_strict("workflow/profiles/slurm/config.yaml")["set-resources"]
    assert {"hessians", "compress_layers", "evaluate"} <= set(want)  # paper.yaml: one layer per compression job
    for rule in S.GPU_RULES:
        assert profile[rule]["gpu"] == 1, rule
        if rule in want:
            assert want[rule]["gpu"] == 1 and profile[rule]["mem_mb"] == want[rule]["mem_mb"], rule
    # a variant of one chunk (compress_variant) needs what its compress_layers job would
    assert profile["compress_variant"] == profile["compress_layers"]
    # a seed replicate of one chunk (replicate) needs what its evaluate job would, and more time
    assert profile["replicate"]["mem_mb"] == profile["evaluate"]["mem_mb"]
    assert profile["replicate"]["runtime"] >= profile["evaluate"]["runtime"]
    # 70B: one layer per compression job fits far below a node (the whole model never loads there)
    assert want["compress_layers"]["mem_mb"] < 32000


def test_slurm_profile_runtimes_are_caldera_cost_from_the_committed_cuda_costs():
    """With ``benchmarks/results/costs-cuda.json`` committed, every runtime `caldera cost --slurm` predicts is the
    profile's; the rules it does not price run its rules' work (compress_variant, profile_layers: compress_layers;
    replicate: compress_variant then evaluate)."""
    from caldera.strict_yaml import load_yaml_strict

    want = S.slurm_resources(C.load_workflow_config("config/paper.yaml"), C.load_costs("cuda"))
    profile = load_yaml_strict("workflow/profiles/slurm/config.yaml")["set-resources"]
    for rule, res in want.items():
        assert profile[rule]["runtime"] == res["runtime"], rule
    for rule in ("compress_variant", "profile_layers"):
        assert profile[rule]["runtime"] == want["compress_layers"]["runtime"], rule
    assert profile["replicate"]["runtime"] == want["compress_layers"]["runtime"] + want["evaluate"]["runtime"]


def test_slurm_runtime_from_measured_costs_scales_with_the_prediction():
    cfg = C.load_workflow_config("config/paper.yaml")
    a = S.slurm_resources(cfg, fake_costs("cuda"))
    costs = fake_costs("cuda")
    costs["components"]["ldlq"]["coef"] = [x * 10 for x in costs["components"]["ldlq"]["coef"]]
    b = S.slurm_resources(cfg, costs)
    assert b["compress_layers"]["runtime"] > a["compress_layers"]["runtime"] >= 10
    assert "runtime" not in S.slurm_resources(cfg, None)["compress_layers"]

"""caldera-rank-per-layer: the profile is Algorithm 1's own rank-error curve, the allocation is the optimum of
the predicted objective at the uniform rank's bits, and the method reaches the pipeline through ModelPlan."""

from __future__ import annotations

import dataclasses
import itertools
import json

import pytest
import torch

from caldera.algorithm.config import CalderaConfig
from caldera.algorithm.decomposition import caldera_decompose
from caldera.methods import get_method
from caldera.methods.rank_per_layer import (
    RankPerLayerConfig,
    allocate,
    caldera_config,
    max_rank,
    predicted_error,
    profile,
)
from caldera.pipeline import compress as C
from caldera.pipeline.allocate import allocate_model, profile_model, read_allocation
from caldera.pipeline.hessians import collect_hessians
from tests.helpers import tiny_llama

SPEC = get_method("caldera-rank-per-layer")


def _hessian(d: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(4 * d, d, generator=g, dtype=torch.float64) * torch.linspace(0.2, 3.0, d, dtype=torch.float64)
    return X.T @ X / X.shape[0]


def _profile(sigma2, n=8, d=8, norm2=1.0, residual2=None):
    return {"shape": [n, d], "sigma2": list(sigma2), "norm2": norm2,
            "residual2": sum(sigma2) if residual2 is None else residual2}


def _objective(profiles, ranks):
    return sum(predicted_error(profiles[k], r) for k, r in ranks.items())


def test_profile_is_algorithm_1s_rank_error_curve():
    """predicted_error(profile, k) is exactly the error² that Algorithm 1 reports after its first LR step (Q-first,
    16-bit factors, exact SVD: the Eckart–Young optimum of the first Q's residual in the H-weighted norm)."""
    torch.manual_seed(0)
    W, H = torch.randn(32, 64), _hessian(64, 1)
    cfg = SPEC.make_config({"rank": 8, "l_bits": 16, "r_bits": 16, "outer_iters": 1, "svd": "exact",
                            "min_rank": 2, "rank_multiple": 2, "seed": 3})
    prof = profile(W, H, cfg)
    assert prof["shape"] == [32, 64] and len(prof["sigma2"]) == max_rank(cfg, 32, 64) == 30
    assert prof["sigma2"] == sorted(prof["sigma2"], reverse=True)
    for k in (2, 6, 12):
        dec = caldera_decompose(W, H, dataclasses.replace(caldera_config(cfg), rank=k))
        lr = [e for e in dec.error_trace if e["step"] == "LR"][0]["error"]
        assert predicted_error(prof, k) == pytest.approx(lr**2, rel=1e-6)
    # at rank 0 the predicted error is the first Q step's own error (the context's seeds and RHT, not others)
    q = caldera_decompose(W, H, dataclasses.replace(caldera_config(cfg), rank=2)).error_trace[0]["error"]
    assert predicted_error(prof, 0) == pytest.approx(q**2, rel=1e-6)


def test_allocation_of_equal_sized_matrices_is_the_brute_force_optimum():
    """Equal sizes: every feasible split of the budget is enumerated and none beats the greedy choice."""
    g = torch.Generator().manual_seed(0)
    profiles = {}
    for i in range(3):
        s = torch.rand(7, generator=g).sort(descending=True).values.pow(2 + i).tolist()
        profiles[f"0.m{i}"] = _profile(s, norm2=1.0 + i, residual2=sum(s) + 0.1)
    cfg = RankPerLayerConfig(rank=3, rank_multiple=1, min_rank=1, max_rank_factor=2)
    got = {k: v["rank"] for k, v in allocate(profiles, cfg).items()}
    keys = sorted(profiles)
    best = min((dict(zip(keys, rs)) for rs in itertools.product(range(1, 7), repeat=3) if sum(rs) <= 9),
               key=lambda r: _objective(profiles, r))
    assert sum(got.values()) == 9
    assert _objective(profiles, got) == pytest.approx(_objective(profiles, best))


def test_allocation_spends_the_uniform_ranks_parameters_by_gain_per_parameter():
    """Budget Σ k_i (n_i + d_i) ≤ Σ k (n_i + d_i); the same relative gains on a matrix with twice the
    parameters per rank buy it fewer ranks; a matrix with nothing left to fit keeps the minimum."""
    decay = [0.9**j for j in range(40)]
    profiles = {"0.small": _profile(decay, n=64, d=64, residual2=12.0),
                "0.large": _profile(decay, n=128, d=128, residual2=12.0),
                "0.flat": _profile([0.0] * 40, n=64, d=64, residual2=1.0)}
    cfg = RankPerLayerConfig(rank=8, rank_multiple=2, min_rank=2, max_rank_factor=4)
    ranks = {k: v["rank"] for k, v in allocate(profiles, cfg).items()}
    size = {k: sum(p["shape"]) for k, p in profiles.items()}
    assert sum(ranks[k] * size[k] for k in ranks) <= 8 * sum(size.values())
    assert all(r % 2 == 0 and 2 <= r <= max_rank(cfg, *profiles[k]["shape"]) for k, r in ranks.items())
    assert ranks["0.flat"] == 2 and ranks["0.small"] > ranks["0.large"] > 2


def test_allocation_counts_each_matrix_relative_to_its_own_output():
    """Two matrices whose spectra differ only by a scale (a layer with 100× larger activations) get the same
    ranks: the objective is each matrix's relative error, not the sum of absolute ones."""
    s = [0.6**j for j in range(32)]
    profiles = {"0.a": _profile(s, n=16, d=16, norm2=1.0), "1.a": _profile([100 * x for x in s], n=16, d=16,
                                                                             norm2=100.0)}
    cfg = RankPerLayerConfig(rank=8, rank_multiple=2, min_rank=2, max_rank_factor=3)
    ranks = {k: v["rank"] for k, v in allocate(profiles, cfg).items()}
    assert ranks["0.a"] == ranks["1.a"] == 8


def test_allocation_beats_uniform_rank_on_its_objective_and_never_exceeds_the_cap():
    g = torch.Generator().manual_seed(1)
    profiles = {f"{i}.m": _profile(torch.rand(64, generator=g).sort(descending=True).values.pow(1 + 3 * (i % 3))
                                   .tolist(), n=24, d=48) for i in range(9)}
    cfg = RankPerLayerConfig(rank=8, rank_multiple=4, min_rank=4, max_rank_factor=2)
    ranks = {k: v["rank"] for k, v in allocate(profiles, cfg).items()}
    assert max(ranks.values()) <= 16 and min(ranks.values()) >= 4
    assert _objective(profiles, ranks) < _objective(profiles, dict.fromkeys(profiles, 8))


@pytest.mark.parametrize("params, words", [
    ({"rank": 8, "min_rank": 16}, "min_rank=16 exceeds rank=8"),
    ({"rank": 8, "min_rank": 6, "rank_multiple": 4}, "not a multiple of rank_multiple"),
    ({"rank": 8, "rank_multiple": 0}, "rank_multiple=0"),
])
def test_bad_allocation_settings_are_named(params, words):
    with pytest.raises(ValueError, match=words):
        SPEC.make_config(params)


def test_method_is_caldera_with_the_allocated_rank():
    torch.manual_seed(2)
    W, H = torch.randn(16, 32), _hessian(32, 2)
    cfg = SPEC.make_config({"rank": 4, "min_rank": 2, "rank_multiple": 2, "outer_iters": 2, "l_bits": 16,
                            "r_bits": 16})
    dec = SPEC.fn(W, H, dataclasses.replace(cfg, rank=6))
    ref = caldera_decompose(W, H, CalderaConfig(rank=6, outer_iters=2, l_bits=16, r_bits=16))
    assert dec.L.shape[1] == 6 and torch.equal(dec.Q, ref.Q) and torch.equal(dec.L, ref.L)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    root = tmp_path_factory.mktemp("rpl")
    model = tiny_llama(0, tie_word_embeddings=False)
    ids = torch.randint(0, 128, (4, 16), generator=torch.Generator().manual_seed(0))
    collect_hessians(model, ids, root / "hess", progress=False)
    return model, root


PARAMS = {"rank": 4, "min_rank": 2, "rank_multiple": 2, "max_rank_factor": 3, "outer_iters": 2, "inner_iters": 1}


def test_pipeline_profiles_allocates_and_compresses_each_matrix_at_its_rank(tiny):
    model, root = tiny
    with pytest.raises(ValueError, match="run caldera.pipeline.allocate.allocate_model first"):
        C.compress_model(model, root / "hess", "caldera-rank-per-layer", PARAMS, root / "none", progress=False)
    runs = [profile_model(model, root / "hess", "caldera-rank-per-layer", PARAMS, layers=[li], progress=False)
            for li in (0, 1)]
    alloc = allocate_model(runs, "caldera-rank-per-layer", PARAMS)
    ranks = {k: o["rank"] for k, o in alloc["overrides"].items()}
    assert len(ranks) == 14 and len(set(ranks.values())) > 1  # not uniform
    # the chunks' profiles together are the whole model's: the same allocation as one profile of all layers
    whole = profile_model(model, root / "hess", "caldera-rank-per-layer", PARAMS, progress=False)
    assert allocate_model([whole], "caldera-rank-per-layer", PARAMS)["overrides"] == alloc["overrides"]
    out = root / "layers"
    s = C.compress_model(model, root / "hess", "caldera-rank-per-layer", PARAMS, out, progress=False,
                         overrides=alloc["overrides"])
    assert {k: m["rank"] for k, m in s["matrices"].items()} == ranks
    shapes = {k: m["shape"] for k, m in s["matrices"].items()}
    assert sum(ranks[k] * sum(shapes[k]) for k in ranks) <= 4 * sum(sum(v) for v in shapes.values())
    # rerun with the same allocation: nothing recomputed; with another one: the layers whose ranks changed
    again = C.compress_model(model, root / "hess", "caldera-rank-per-layer", PARAMS, out, progress=False,
                             overrides=alloc["overrides"])
    assert again["computed"] == [] and again["skipped"] == [0, 1]
    other = {**alloc["overrides"], "1.self_attn.q_proj": {"rank": 2 if ranks["1.self_attn.q_proj"] != 2 else 4}}
    third = C.compress_model(model, root / "hess", "caldera-rank-per-layer", PARAMS, out, progress=False,
                             overrides=other)
    assert third["computed"] == [1] and third["skipped"] == [0]


def test_profiles_of_another_config_and_missing_matrices_are_refused(tiny, tmp_path):
    model, root = tiny
    run = profile_model(model, root / "hess", "caldera-rank-per-layer", PARAMS, layers=[0], progress=False)
    with pytest.raises(ValueError, match="profile the model again"):
        allocate_model([run], "caldera-rank-per-layer", {**PARAMS, "seed": 5})
    with pytest.raises(ValueError, match="profiled twice"):
        allocate_model([run, run], "caldera-rank-per-layer", PARAMS)
    alloc = allocate_model([run], "caldera-rank-per-layer", PARAMS)
    with pytest.raises(ValueError, match=r"1\.self_attn\.q_proj: no allocation"):
        C.compress_model(model, root / "hess", "caldera-rank-per-layer", PARAMS, tmp_path / "x", progress=False,
                         overrides=alloc["overrides"])
    too_big = {**alloc["overrides"], "0.self_attn.k_proj": {"rank": 40}}
    with pytest.raises(ValueError, match=r"0\.self_attn\.k_proj 32×64: rank=40 is too large"):
        C.compress_model(model, root / "hess", "caldera-rank-per-layer", PARAMS, tmp_path / "x", layers=[0],
                         progress=False, overrides=too_big)
    with pytest.raises(ValueError, match="has no per-matrix settings"):
        C.compress_model(model, root / "hess", "caldera", {"rank": 4}, tmp_path / "y", progress=False,
                         overrides=alloc["overrides"])
    path = tmp_path / "allocation.json"
    path.write_text(json.dumps(alloc))
    assert read_allocation(path, "caldera-rank-per-layer", PARAMS) == alloc["overrides"]
    with pytest.raises(ValueError, match="run the allocation again"):
        read_allocation(path, "caldera-rank-per-layer", {**PARAMS, "rank": 6})

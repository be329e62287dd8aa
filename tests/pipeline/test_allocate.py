"""caldera.pipeline.allocate: profile_model visits every matrix of the chosen layers once, allocate_model joins the
chunks' profiles and checks them, read_allocation returns only an allocation of the same method and config,
model_allocation makes, writes and reuses the allocation of a whole model.

The method's own profile/allocate are replaced by recording fakes, so what is checked is the pipeline step."""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch

from caldera.methods import registry
from caldera.pipeline.allocate import (
    PROFILE_FORMAT,
    allocate_model,
    model_allocation,
    profile_model,
    read_allocation,
)
from caldera.pipeline.hessians import collect_hessians
from caldera.pipeline.linears import LINEARS
from tests.helpers import gen, tiny_llama

METHOD = "caldera-rank-per-layer"
PARAMS = {"rank": 4, "min_rank": 2, "rank_multiple": 2}


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    model = tiny_llama(0, tie_word_embeddings=False)
    hess = tmp_path_factory.mktemp("alloc") / "hess"
    collect_hessians(model, torch.randint(0, 128, (2, 8), generator=gen(0)), hess, progress=False)
    return model, hess


@pytest.fixture
def fake_plan(monkeypatch):
    """METHOD with a profile that records what it was given and an allocation that is rank 2 everywhere (or
    whatever ``calls["allocate"]`` returns); ``calls`` records the allocate calls."""
    calls = {"allocate": [], "result": None}

    def profile(W, H, config, context=None):
        return {"shape": list(W.shape), "w_sum": float(W.double().sum()), "h_dim": H.shape[0],
                "seed": config.seed, "dtypes": [str(W.dtype), str(H.dtype)]}

    def allocate(profiles, config):
        calls["allocate"].append(dict(profiles))
        return calls["result"] if calls["result"] is not None else {k: {"rank": 2} for k in profiles}

    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))
    spec = registry.get_method(METHOD)
    registry._REGISTRY[METHOD] = dataclasses.replace(spec, plan=registry.ModelPlan(profile, allocate))
    return calls


def test_profile_visits_each_matrix_of_the_wanted_layers_once(tiny, fake_plan):
    model, hess = tiny
    run = profile_model(model, hess, METHOD, PARAMS, layers=[1, 1], progress=False)
    assert run["format"] == PROFILE_FORMAT and run["method"] == METHOD and run["layers"] == [1]
    assert run["method_config"]["rank"] == 4 and run["wall_s"] >= 0
    assert set(run["profiles"]) == {f"1.{name}" for name in LINEARS}
    for name in LINEARS:
        W = model.model.layers[1].get_submodule(name).weight.detach()
        p = run["profiles"][f"1.{name}"]
        assert p["shape"] == list(W.shape) and p["h_dim"] == W.shape[1]
        assert p["w_sum"] == pytest.approx(float(W.double().sum()), rel=1e-6)
        assert p["dtypes"] == ["torch.float32", "torch.float64"]
    everything = profile_model(model, hess, METHOD, PARAMS, progress=False)
    assert everything["layers"] == [0, 1] and len(everything["profiles"]) == 2 * len(LINEARS)
    # the same matrix gets the same profile (and seed) whichever chunk it is profiled in
    assert all(everything["profiles"][k] == v for k, v in run["profiles"].items())


def test_allocate_joins_the_chunks_and_sums_their_profile_time(tiny, fake_plan):
    model, hess = tiny
    runs = [profile_model(model, hess, METHOD, PARAMS, layers=[li], progress=False) for li in (0, 1)]
    runs[0]["wall_s"], runs[1]["wall_s"] = 1.5, 2.25
    alloc = allocate_model(runs, METHOD, PARAMS)
    assert fake_plan["allocate"] == [{**runs[0]["profiles"], **runs[1]["profiles"]}]
    assert alloc["overrides"] == {k: {"rank": 2} for li in (0, 1) for k in (f"{li}.{n}" for n in LINEARS)}
    assert alloc["method"] == METHOD and alloc["method_config"] == runs[0]["method_config"]
    assert alloc["profile_wall_s"] == 3.75 and alloc["allocate_wall_s"] >= 0


def test_allocate_refuses_foreign_overlapping_or_no_profiles(tiny, fake_plan):
    model, hess = tiny
    run = profile_model(model, hess, METHOD, PARAMS, layers=[0], progress=False)
    for bad in ({**run, "format": "caldera-profiles/0"}, {**run, "method": "caldera"},
                {**run, "method_config": {**run["method_config"], "rank": 6}}):
        with pytest.raises(ValueError, match="profiles #1 were made by .*profile the model again"):
            allocate_model([run, bad], METHOD, PARAMS)
    with pytest.raises(ValueError, match="profile the model again"):
        allocate_model([run], METHOD, {**PARAMS, "rank": 6})
    with pytest.raises(ValueError, match=r"profiles #1: matrices \['0\.mlp\.down_proj'.*profiled twice"):
        allocate_model([run, run], METHOD, PARAMS)
    with pytest.raises(ValueError, match="no profiles to allocate from"):
        allocate_model([], METHOD, PARAMS)
    assert fake_plan["allocate"] == []


def test_allocate_refuses_an_allocation_that_misses_a_matrix(tiny, fake_plan):
    model, hess = tiny
    run = profile_model(model, hess, METHOD, PARAMS, layers=[0], progress=False)
    fake_plan["result"] = {k: {"rank": 2} for k in run["profiles"] if k != "0.self_attn.q_proj"}
    with pytest.raises(ValueError, match=r"settings for 6 matrices, not the 7 profiled.*0\.self_attn\.q_proj"):
        allocate_model([run], METHOD, PARAMS)


def test_a_method_without_a_model_level_step_is_refused(tiny):
    model, hess = tiny
    with pytest.raises(ValueError, match="'caldera' has no model-level step.*nothing to profile"):
        profile_model(model, hess, "caldera", {"rank": 4}, progress=False)
    with pytest.raises(ValueError, match="'caldera' has no model-level step.*nothing to allocate"):
        allocate_model([], "caldera", {"rank": 4})


def test_read_allocation_returns_the_overrides_of_the_same_method_and_config(tmp_path):
    want = registry.config_to_json(registry.get_method(METHOD).make_config(PARAMS))
    alloc = {"method": METHOD, "method_config": json.loads(want), "overrides": {"0.mlp.up_proj": {"rank": 6}}}
    path = tmp_path / "allocation.json"
    path.write_text(json.dumps(alloc))
    assert read_allocation(path, METHOD, PARAMS) == {"0.mlp.up_proj": {"rank": 6}}
    for method, params in ((METHOD, {**PARAMS, "rank": 6}), ("caldera", {"rank": 4})):
        with pytest.raises(ValueError, match="allocation.json was allocated for .*run the allocation again"):
            read_allocation(path, method, params)
    path.write_text("{not json")
    with pytest.raises(ValueError, match="allocation.json: cannot read the allocation"):
        read_allocation(path, METHOD, PARAMS)
    with pytest.raises(ValueError, match="missing.json: cannot read the allocation"):
        read_allocation(tmp_path / "missing.json", METHOD, PARAMS)


def test_model_allocation_is_made_once_written_and_reused(tiny, fake_plan, tmp_path):
    """Profiled over every layer and allocated into work/allocation.json; the next call reads it (no allocate
    call); a file of another config given as ``allocation`` is refused naming the option; a stale default file
    is made again."""
    model, hess = tiny
    work = tmp_path / "work"
    got = model_allocation(model, hess, METHOD, PARAMS, work, progress=False)
    assert got == {f"{li}.{name}": {"rank": 2} for li in (0, 1) for name in LINEARS}
    assert len(fake_plan["allocate"]) == 1 and len(fake_plan["allocate"][0]) == 2 * len(LINEARS)
    assert read_allocation(work / "allocation.json", METHOD, PARAMS) == got
    assert model_allocation(model, hess, METHOD, PARAMS, work, progress=False) == got
    assert len(fake_plan["allocate"]) == 1
    other = {**PARAMS, "rank": 6}
    with pytest.raises(ValueError, match=r"^--allocation .*allocation.json: .*run the allocation again"):
        model_allocation(model, hess, METHOD, other, work, allocation=work / "allocation.json", option="--allocation")
    assert model_allocation(model, hess, METHOD, other, work, progress=False) == got  # the default file: made again
    assert len(fake_plan["allocate"]) == 2
    assert read_allocation(work / "allocation.json", METHOD, other) == got


def test_model_allocation_of_a_method_without_a_model_level_step(tiny, tmp_path):
    model, hess = tiny
    assert model_allocation(model, hess, "caldera", {"rank": 4}, tmp_path / "w") is None
    assert not (tmp_path / "w").exists()
    with pytest.raises(ValueError, match=r"^allocation: method 'caldera' takes no per-matrix settings; remove it"):
        model_allocation(model, hess, "caldera", {"rank": 4}, tmp_path / "w", allocation=tmp_path / "a.json")

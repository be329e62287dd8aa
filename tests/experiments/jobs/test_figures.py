"""Figure data steps read only the weights they use (the figure's layer, or the linear layers for the spectra),
and give what the whole fp32 model gave."""

from __future__ import annotations

import json

import pytest
import torch

import caldera.pipeline.assets as assets
from caldera.experiments.jobs import figures as F
from caldera.experiments.planning.settings import FiguresSettings, RunContext
from caldera.pipeline.hessians import collect_hessians
from caldera.pipeline.layer_runner import decoder_layers
from tests.helpers import model_entry, tiny_llama


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    root = tmp_path_factory.mktemp("fig")
    model = tiny_llama(0, num_hidden_layers=3, tie_word_embeddings=False)
    model.save_pretrained(root / "m", max_shard_size="40KB")
    ids = torch.randint(0, 128, (4, 16), generator=torch.Generator().manual_seed(0))
    collect_hessians(model, ids, root / "hess", progress=False, model_name="m")  # the run's name for it
    # shapes named as the paper model's: the paper rank passes through unmapped
    run = RunContext(name="t", device="cpu", dtype="auto",
                     models={"m": model_entry(root / "m", 3, shapes="llama-2-7b")},
                     stand_ins={"llama-2-7b": "m"}, rank_multiple=8)
    figures = {"model": "m", "layer": 1, "paper_model": "llama-2-7b", "paper_ranks": [8], "matrices": ["k_proj"],
               "ablations": ["4bit-factors"], "outer_iters": 2, "lplr_matrices": ["k_proj"], "lplr_inner_iters": 2}
    return model, root, run, figures


def test_lplr_traces_read_one_layer(source, tmp_path, monkeypatch):
    model, root, run, figures = source
    fs = FiguresSettings.from_block(figures)
    monkeypatch.setattr(assets, "load_model", lambda *a, **k: pytest.fail("the whole model was loaded"))
    res = F.step_lplr_traces(run, "m", str(root / "hess"), str(tmp_path / "a.json"), fs)
    monkeypatch.undo()
    # the same curves from the in-memory fp32 model
    monkeypatch.setattr(F, "load_layers", lambda *a, **k: model)
    ref = F.step_lplr_traces(run, "m", str(root / "hess"), str(tmp_path / "b.json"), fs)
    assert res == ref and json.loads((tmp_path / "a.json").read_text())["curves"]


def test_spectra_read_every_layers_linears(source, tmp_path, monkeypatch):
    model, root, run, _ = source
    monkeypatch.setattr(assets, "load_model", lambda *a, **k: pytest.fail("the whole model was loaded"))
    res = F.step_spectra(run, "m", str(tmp_path / "s.json"))
    q = torch.stack([torch.linalg.svdvals(layer.self_attn.q_proj.weight.detach()) for layer in decoder_layers(model)])
    q = q / q[:, :1]
    assert res["spectra"]["q_proj"]["mean"] == q.mean(0).tolist()


def test_figure3_split_per_curve_gives_the_one_job_figure(source, tmp_path):
    """figures.trace_jobs: per-curve (one decomposition trace per job, paper scale) merges to exactly the JSON of
    the single job, in the figure's order whatever order the parts come in; a missing part is refused."""
    model, root, run, figures = source
    block = {**figures, "matrices": ["k_proj", "o_proj"], "outer_iters": 2,
             "ablations": ["16bit-factors", "4bit-factors"], "svd": "exact"}
    fs = FiguresSettings.from_block(block)
    one = F.figure3_jobs(fs)
    assert fs.trace_jobs == "one" and list(one) == ["all"]
    assert len(one["all"]) == 2 * 1 * 3  # matrices x paper ranks x (ablations + QuIP#-LR)
    F.step_ablation_traces(run, "m", str(root / "hess"), "all", str(tmp_path / "all.json"), fs)
    whole = F.step_figure3_data("m", [str(tmp_path / "all.json")], str(tmp_path / "fig_one.json"), fs)
    split = FiguresSettings.from_block({**block, "trace_jobs": "per-curve"})
    jobs = F.figure3_jobs(split)
    assert list(jobs) == one["all"] and all(v == [k] for k, v in jobs.items())
    parts = []
    for job in reversed(list(jobs)):
        F.step_ablation_traces(run, "m", str(root / "hess"), job, str(tmp_path / f"{job}.json"), split)
        parts.append(str(tmp_path / f"{job}.json"))
    merged = F.step_figure3_data("m", parts, str(tmp_path / "fig_split.json"), split)
    assert merged == whole and [c["method"] for c in whole["curves"][:3]] == ["16bit-factors", "4bit-factors",
                                                                              "quip#-lr"]
    assert (tmp_path / "fig_split.json").read_bytes() == (tmp_path / "fig_one.json").read_bytes()
    with pytest.raises(ValueError, match="5 curves in 5 parts, 6 expected"):
        F.step_figure3_data("m", parts[1:], str(tmp_path / "x.json"), split)

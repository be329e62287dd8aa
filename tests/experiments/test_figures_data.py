"""Figure data steps read only the weights they use (the figure's layer, or the linear layers for the spectra),
and give what the whole fp32 model gave."""

from __future__ import annotations

import json

import pytest
import torch

from caldera.experiments import figures as F
from caldera.experiments import steps
from caldera.pipeline.hessians import collect_hessians, decoder_layers
from tests.helpers import tiny_llama


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    root = tmp_path_factory.mktemp("fig")
    model = tiny_llama(0, num_hidden_layers=3, tie_word_embeddings=False)
    model.save_pretrained(root / "m", max_shard_size="40KB")
    ids = torch.randint(0, 128, (4, 16), generator=torch.Generator().manual_seed(0))
    collect_hessians(model, ids, root / "hess", progress=False)
    # shapes named as the paper model's: the paper rank passes through unmapped
    config = {"models": {"m": {"source": str(root / "m"), "label": "tiny", "num_layers": 3, "shapes": "llama-2-7b"}},
              "stand_ins": {"llama-2-7b": "m"},
              "figures": {"layer": 1, "paper_model": "llama-2-7b", "paper_ranks": [8], "lplr_matrices": ["k_proj"],
                          "lplr_inner_iters": 2}, "rank_multiple": 8}
    return model, root, config


def test_lplr_traces_read_one_layer(source, tmp_path, monkeypatch):
    model, root, config = source
    monkeypatch.setattr(steps, "load_dense", lambda *a, **k: pytest.fail("the whole model was loaded"))
    res = F.step_lplr_traces(config, "m", str(root / "hess"), str(tmp_path / "a.json"))
    monkeypatch.undo()
    # the same curves from the in-memory fp32 model
    monkeypatch.setattr(F, "load_layers", lambda *a, **k: model)
    ref = F.step_lplr_traces(config, "m", str(root / "hess"), str(tmp_path / "b.json"))
    assert res == ref and json.loads((tmp_path / "a.json").read_text())["curves"]


def test_spectra_read_every_layers_linears(source, tmp_path, monkeypatch):
    model, root, config = source
    monkeypatch.setattr(steps, "load_dense", lambda *a, **k: pytest.fail("the whole model was loaded"))
    res = F.step_spectra(config, "m", str(tmp_path / "s.json"))
    q = torch.stack([torch.linalg.svdvals(layer.self_attn.q_proj.weight.detach()) for layer in decoder_layers(model)])
    q = q / q[:, :1]
    assert res["spectra"]["q_proj"]["mean"] == q.mean(0).tolist()

"""The RHT fine-tuning job (caldera.experiments.jobs.rhtft): its train / held-out split of the calibration text, and
the fine-tuned checkpoint and summary it writes from a tiny QuIP# checkpoint."""

from __future__ import annotations

import json

import pytest
import torch

from caldera.atomic import timing_path
from caldera.experiments.jobs import rhtft as J
from caldera.experiments.planning.plan import Variant
from caldera.experiments.planning.settings import RhtFtSettings, RunContext
from tests.helpers import model_entry

FT = {"n_samples": 6, "held_out": 2, "seq_len": 12, "epochs": 2, "lr": 1e-2, "batch_size": 2, "seed": 3,
      "rows": None}


@pytest.fixture
def numbered_sequences(monkeypatch):
    """calibration_sequences replaced by (n, seq_len) ids whose row i is all i + 3; records its arguments."""
    import caldera.pipeline.text as text

    calls = []

    def fake(tok, n, seq_len, seed, source):
        calls.append((n, seq_len, seed, source))
        return (torch.arange(n).unsqueeze(1) + 3).expand(n, seq_len).contiguous()

    monkeypatch.setattr(text, "calibration_sequences", fake)
    return calls


def test_finetune_data_holds_out_the_last_sequences(numbered_sequences):
    train, held = J.finetune_data(RhtFtSettings.from_block(FT), "lambada-books", tokenizer=None)
    assert numbered_sequences == [(6, 12, 3, "lambada-books")]
    assert train.shape == (4, 12) and held.shape == (2, 12)
    assert train[:, 0].tolist() == [3, 4, 5, 6] and held[:, 0].tolist() == [7, 8]


@pytest.fixture
def checkpoint(tmp_path):
    """(dense model folder, QuIP# checkpoint folder, its method config): every linear of a tiny LLaMA as 2-bit E8P
    with RHT, identity Hessian."""
    from caldera.pipeline.assets import load_model
    from caldera.pipeline.checkpoint import save_compressed
    from tests.helpers import quip_sharp_copy, tiny_model_dir

    src = tiny_model_dir(tmp_path / "dense")
    dense, tok = load_model(str(src))
    student, method_config = quip_sharp_copy(dense)
    save_compressed(student, tmp_path / "base", method="quip#", method_config=method_config, tokenizer=tok)
    return src, tmp_path / "base", method_config


def test_writes_the_finetuned_checkpoint_and_summary(checkpoint, tmp_path, numbered_sequences):
    from caldera.pipeline.checkpoint import load_compressed, read_config

    src, base, method_config = checkpoint
    run = RunContext(name="t", device="cpu", dtype="auto", models={"m": model_entry(src)})
    v = Variant(id="v", model="m", method="quip#", params={}, config=None)
    settings = RhtFtSettings.from_block(FT)
    out, summary_out = tmp_path / "ft", tmp_path / "rhtft.json"
    summary = J.step_rht_finetune(settings, run, "lambada-books", v, str(base), str(out), str(summary_out))
    assert numbered_sequences == [(6, 12, 3, "lambada-books")]
    assert json.loads(summary_out.read_text()) == summary
    assert summary["variant"] == "v" and summary["n_train"] == 4 and summary["n_heldout"] == 2
    assert summary["base_checkpoint"] == str(base) and summary["source"] == "lambada-books"
    assert [h["epoch"] for h in summary["history"]] == [0, 1, 2]  # epoch 0: the untrained signs
    assert 0 <= summary["best_epoch"] <= 2
    assert summary["n_sign_params"] > 0 and summary["heldout_kl_best"] <= summary["heldout_kl_before"]
    # the seconds are in the timing file only: the summary and checkpoint hold no clock reading
    assert "wall_s" not in json.dumps(summary)
    timing = json.loads(timing_path(summary_out).read_text())
    assert len(timing["epoch_wall_s"]) == 3 and "wall_s" in timing
    cfg = read_config(out)
    assert cfg["method"] == "quip#" and cfg["method_config"] == method_config
    record = cfg["rht_ft"]
    assert record["config"] == settings.training() and record["best_epoch"] == summary["best_epoch"]
    assert record["history"] == summary["history"]
    # only the signs were trained: every other tensor is the base checkpoint's
    tuned, tok = load_compressed(str(out))
    before, _ = load_compressed(str(base))
    assert tok is not None
    a, b = tuned.state_dict(), before.state_dict()
    assert a.keys() == b.keys()
    for k in a:
        if not k.endswith((".S_U", ".S_V")):
            assert torch.equal(a[k], b[k]), k


def test_a_killed_and_resumed_job_writes_the_same_bytes_and_removes_its_state(checkpoint, tmp_path, monkeypatch,
                                                                              numbered_sequences):
    """A job killed after epoch 1 resumes from its state; its summary and checkpoint are byte-identical to an
    uninterrupted job's, the epoch it resumed from is in the timing file only, and the state is gone."""
    import caldera.finetune.rht as rht

    src, base, _ = checkpoint
    run = RunContext(name="t", device="cpu", dtype="auto", models={"m": model_entry(src)})
    v = Variant(id="v", model="m", method="quip#", params={}, config=None)
    settings = RhtFtSettings.from_block(FT)

    def job(folder, state):
        return J.step_rht_finetune(settings, run, "lambada-books", v, str(base), str(folder / "ft"),
                                   str(folder / "rhtft.json"), str(state))

    whole, killed = tmp_path / "whole", tmp_path / "killed"
    job(whole, whole / "state.safetensors")
    assert not (whole / "state.safetensors").exists()
    real = rht.rht_finetune

    def killed_after_epoch_1(*a, **k):
        def kill(rec):
            if rec["epoch"] == 1:
                raise KeyboardInterrupt
        return real(*a, **k, on_epoch=kill)

    monkeypatch.setattr(rht, "rht_finetune", killed_after_epoch_1)
    with pytest.raises(KeyboardInterrupt):
        job(killed, killed / "state.safetensors")
    assert (killed / "state.safetensors").is_file() and not (killed / "rhtft.json").exists()
    monkeypatch.setattr(rht, "rht_finetune", real)
    job(killed, killed / "state.safetensors")
    assert not (killed / "state.safetensors").exists()
    assert json.loads(timing_path(killed / "rhtft.json").read_text())["resumed_from"] == 1
    assert json.loads(timing_path(whole / "rhtft.json").read_text())["resumed_from"] is None
    for rel in ["rhtft.json", *(p.relative_to(whole) for p in sorted((whole / "ft").rglob("*")) if p.is_file())]:
        assert (killed / rel).read_bytes() == (whole / rel).read_bytes(), rel

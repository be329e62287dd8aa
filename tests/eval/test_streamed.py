"""Layer-streamed evaluation (caldera.eval.streamed): the numbers of the in-memory path, one layer real at a time."""

from __future__ import annotations

import pytest
import torch

from caldera.eval import streamed as S
from caldera.eval.perplexity import perplexity
from caldera.pipeline.layer_runner import decoder_layers
from caldera.pipeline.partial import LazyLayers
from tests.helpers import byte_tokenizer, model_entry, tiny_gemma3, tiny_llama


def _saved(tmp_path, make: str):
    model = (tiny_llama(0, num_hidden_layers=3, tie_word_embeddings=False) if make == "llama"
             else tiny_gemma3(0))
    model.save_pretrained(tmp_path / "m", max_shard_size="40KB")
    return model, tmp_path / "m"


def _count_real_layers(model) -> list[int]:
    """A list that gets, each time a decoder layer runs, how many decoder layers have real (non-meta) weights."""
    layers = decoder_layers(model)
    real: list[int] = []
    for layer in layers:
        layer.register_forward_pre_hook(
            lambda *_: real.append(sum(any(p.device.type != "meta" for p in lyr.parameters()) for lyr in layers)))
    return real


@pytest.mark.parametrize("make", ["llama", "gemma3"])
@pytest.mark.parametrize("batch_size", [1, 2])
def test_streamed_perplexity_is_the_in_memory_one_with_one_layer_real_at_a_time(tmp_path, make, batch_size):
    """Bitwise on a float32 CPU model (same batches, same ops); checked with a tight tolerance too, and a
    perturbed forward (a skipped layer, no final norm, shifted positions) is far outside it."""
    model, src = _saved(tmp_path, make)
    stream = torch.randint(0, 128, (1, 5 * 16 + 3), generator=torch.Generator().manual_seed(1))
    want = perplexity(model, stream, 16, batch_size=batch_size, progress=False)
    lazy = LazyLayers.open(src)
    assert all(p.device.type == "meta" for p in decoder_layers(lazy.model).parameters())
    real = _count_real_layers(lazy.model)
    got = S.perplexity(lazy.model, stream, 16, loader=lazy, batch_size=batch_size, offload=True, progress=False)
    assert set(got) == set(want)
    assert got["n_windows"] == want["n_windows"] == 5 and got["n_tokens"] == want["n_tokens"]
    assert got["window_tokens"] == want["window_tokens"]
    torch.testing.assert_close(torch.tensor(got["window_nll"]), torch.tensor(want["window_nll"]), rtol=1e-5,
                               atol=0)
    assert got == want  # bitwise: every float of the result dict
    n_layers = len(decoder_layers(lazy.model))
    # layer-major: each layer read once, in order, and only one real while it runs (once per batch)
    assert lazy.stats["loaded"] == list(range(n_layers))
    assert real and max(real) == 1 and len(real) == n_layers * len(range(0, 5, batch_size))
    assert all(p.device.type == "meta" for p in decoder_layers(lazy.model).parameters())


def _nll(model, stream, **kw):
    return torch.tensor(S.perplexity(model, stream, 16, progress=False, **kw)["window_nll"])


@pytest.mark.parametrize("bug", ["skipped layer", "no final norm", "layer 0's masks and rotary tables everywhere"])
def test_the_tolerance_catches_the_plausible_bugs(monkeypatch, bug):
    """The comparison above is not vacuous: a skipped layer, a missing final norm, or every layer given layer 0's
    keyword arguments (Gemma-3: its global layer would get the sliding-window mask and local RoPE) each move
    the window losses far beyond rtol 1e-5. (A uniform shift of the position ids is no bug to catch: RoPE
    scores depend on relative positions only, so it changes the losses by float rounding alone.)"""
    import caldera.pipeline.layer_runner as H

    model = tiny_gemma3(0)
    stream = torch.randint(0, 128, (1, 48), generator=torch.Generator().manual_seed(1))
    good = torch.tensor(perplexity(model, stream, 16, progress=False)["window_nll"])
    torch.testing.assert_close(_nll(model, stream), good, rtol=1e-5, atol=0)
    if bug == "skipped layer":
        monkeypatch.setattr(H, "_run_layer", lambda layer, hs, kw, _f=H._run_layer: (
            hs if layer is decoder_layers(model)[1] else _f(layer, hs, kw)))
    elif bug == "no final norm":
        monkeypatch.setattr(model.model.norm, "forward", lambda x: x)
    else:
        def first_kwargs(*a, _f=H.initial_states, **k):
            states, kws = _f(*a, **k)
            return states, [[per_layer[0]] * len(per_layer) for per_layer in kws]

        monkeypatch.setattr(H, "initial_states", first_kwargs)
    bad = _nll(model, stream)
    assert float(((bad - good).abs() / good.abs()).max()) > 1e-3


def test_head_logits_is_the_models_own_head():
    """Final norm, LM head and Gemma-3's final-logit soft-capping, as the model's forward applies them."""
    capped = tiny_gemma3(0, final_logit_softcapping=0.5)  # small: the capping changes these small logits
    for model in (tiny_llama(0), tiny_gemma3(0), capped):
        ids = torch.randint(0, 128, (2, 9), generator=torch.Generator().manual_seed(0))
        with torch.no_grad():
            want = model(input_ids=ids).logits
        hidden = S.final_states(model, [ids])[0]
        assert torch.equal(S.head_logits(model, hidden), want)
    assert not torch.allclose(model.lm_head(model.model.norm(hidden)), want, rtol=1e-3)  # capping was applied


@pytest.mark.parametrize("make", ["llama", "gemma3"])
def test_streamed_zeroshot_gives_the_in_memory_scores(tmp_path, make):
    """lm-eval's loglikelihood through the streamed class: the in-memory class's scores (bitwise here: the
    same padded batches through the same layers), one layer real at a time, each layer read once."""
    pytest.importorskip("lm_eval")
    from caldera.eval.zeroshot import continuation_lm_class
    tok = byte_tokenizer()
    model = (tiny_llama(0, vocab_size=len(tok), num_hidden_layers=3, tie_word_embeddings=False) if make == "llama"
             else tiny_gemma3(0, vocab_size=len(tok)))
    model.save_pretrained(tmp_path / "m", max_shard_size="40KB")
    g = torch.Generator().manual_seed(0)

    def ids(n):
        return torch.randint(3, len(tok), (n,), generator=g).tolist()

    requests = [(("", ""), ids(c), ids(k)) for c, k in [(9, 2), (4, 1), (13, 5), (6, 3), (2, 7), (11, 1), (9, 2)]]
    requests.append((("", ""), ids(5) + [0], [0, 0]))  # ends in token 0, like padding
    want = continuation_lm_class()(pretrained=model, tokenizer=tok, batch_size=3)._loglikelihood_tokens(requests)
    lazy = LazyLayers.open(tmp_path / "m")
    real = _count_real_layers(lazy.model)
    lm = S.streamed_lm_class()(pretrained=lazy.model, tokenizer=tok, batch_size=3, loader=lazy, offload=True)
    got = lm._loglikelihood_tokens(requests)
    assert [b for _, b in got] == [b for _, b in want]
    torch.testing.assert_close(torch.tensor([a for a, _ in got]), torch.tensor([a for a, _ in want]),
                               rtol=1e-5, atol=1e-6)
    assert got == want
    assert lazy.stats["loaded"] == [0, 1, 2] and max(real) == 1


@pytest.mark.usefixtures("prepared")
def test_streamed_zeroshot_tasks_match(tmp_path):
    """zeroshot(..., lm_class=S.streamed_lm_class()) on the fixture tasks: the accuracies and per-document
    log-likelihoods of the in-memory path."""
    pytest.importorskip("lm_eval")
    from caldera.eval import zeroshot as zs
    tok = byte_tokenizer()
    model = tiny_llama(0, vocab_size=len(tok), num_hidden_layers=3, tie_word_embeddings=False)
    model.save_pretrained(tmp_path / "m", max_shard_size="40KB")
    tasks = ["piqa", "caldera_winogrande", "arc_easy"]
    want = zs.zeroshot(model, tok, tasks=tasks, limit=3, batch_size=4)
    lazy = LazyLayers.open(tmp_path / "m")
    got = zs.zeroshot(lazy.model, tok, tasks=tasks, limit=3, batch_size=4, lm_class=S.streamed_lm_class(),
                      lm_kwargs={"loader": lazy})
    assert lazy.stats["loaded"] == [0, 1, 2]  # all tasks' requests in one layer-major pass
    for name in want["tasks"]:
        assert got["tasks"][name]["acc"] == want["tasks"][name]["acc"]
        for a, b in zip(got["tasks"][name]["docs"], want["tasks"][name]["docs"]):
            assert a["acc"] == b["acc"] and a["ll"] == pytest.approx(b["ll"], rel=1e-5)


def test_should_stream_rule():
    from caldera.eval.streamed import should_stream

    assert not should_stream("auto", 79, 100) and should_stream("auto", 81, 100)  # 80 % of the budget
    assert should_stream("always", 1, 10**12) and not should_stream("never", 10**12, 1)
    with pytest.raises(ValueError, match="eval.stream_layers"):
        should_stream("sometimes", 1, 1)


def test_step_evaluate_auto_streams_only_a_model_over_the_budget(tmp_path, monkeypatch):
    """``eval.stream_layers: auto``: a small model within the budget takes the in-memory path (nothing opened
    lazily); with a tiny budget the same step streams, reading each layer once, and writes the same numbers.
    A compressed variant never streams; ``never`` never does."""
    import json

    import caldera.pipeline.text as text
    from caldera.experiments.jobs import evaluate as evaluate_job
    from caldera.experiments.planning.plan import Variant
    from caldera.experiments.planning.settings import EvalSettings, RunContext
    from tests.helpers import word_tokenizer

    _, src = _saved(tmp_path, "llama")
    word_tokenizer().save_pretrained(src)
    stream = torch.randint(0, 128, (1, 4 * 16), generator=torch.Generator().manual_seed(2))
    monkeypatch.setattr(text, "perplexity_stream", lambda tok, source: stream)
    opened: list = []
    real_open = LazyLayers.open.__func__
    monkeypatch.setattr(LazyLayers, "open", classmethod(lambda cls, *a, **k: opened.append(
        real_open(cls, *a, **k)) or opened[-1]))
    block = {"ppl": {"wiki": {"source": "wikitext2", "protocol": "stream", "seq_len": 16}},
             "zeroshot": {"tasks": ["caldera_piqa"]}}
    settings = EvalSettings.from_block(block)
    run = RunContext(name="t", device="cpu", dtype="auto", models={"m": model_entry(src, 3)})
    v = Variant(id="m-dense", model="m", method="dense", replicate_of="m")  # a replicate: perplexity only
    weights = evaluate_job.dense_weight_bytes(run, "m", torch.float32)
    assert weights == 4 * sum(p.numel() for p in tiny_llama(0, num_hidden_layers=3,
                                                               tie_word_embeddings=False).parameters())
    assert not evaluate_job.streams(settings, run, v)  # the machine's own budget: a tiny model fits
    assert not evaluate_job.streams(settings, run, v, budget_bytes=2 * weights)
    assert evaluate_job.streams(settings, run, v, budget_bytes=weights)  # more than 80 % of it
    never = EvalSettings.from_block({**block, "stream_layers": "never"})
    assert not evaluate_job.streams(never, run, v, budget_bytes=1)
    assert evaluate_job.streams(EvalSettings.from_block({**block, "stream_layers": "always"}), run, v)
    assert not evaluate_job.streams(settings, run, Variant(id="c", model="m", method="caldera"), budget_bytes=1)

    outs = {}
    for name, budget in [("memory", 10 * weights), ("streamed", weights // 2)]:
        out = tmp_path / f"{name}.json"
        evaluate_job.step_evaluate(settings, run, v, None, {"wiki": str(out)}, str(tmp_path / f"{name}-zs.json"),
                            budget_bytes=budget)
        outs[name] = json.loads(out.read_text())  # no clock reading in it: the two paths write the same file
        assert len(opened) == (name == "streamed")
    assert opened[0].stats["loaded"] == [0, 1, 2]
    assert outs["memory"] == outs["streamed"] and outs["memory"]["n_windows"] == 4

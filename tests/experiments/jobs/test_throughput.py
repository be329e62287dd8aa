"""Table 6's measurement step on a tiny checkpoint (caldera.experiments.jobs.throughput)."""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch

from caldera.experiments.jobs.throughput import step_throughput, tensor_bytes
from caldera.experiments.planning.settings import RunContext, ThroughputSettings


def test_tensor_bytes_counts_shared_tensors_once():
    m = torch.nn.Sequential(torch.nn.Embedding(10, 4), torch.nn.Linear(4, 10, bias=False))
    m[1].weight = m[0].weight  # tied, as an LM head
    m.register_buffer("b", torch.zeros(3, dtype=torch.float16))
    assert tensor_bytes(m) == 10 * 4 * 4 + 3 * 2


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    """A dense tiny LLaMA folder and its QuIP# checkpoint (tests/pipeline/test_checkpoint.py's helpers)."""
    from caldera.pipeline.checkpoint import save_compressed
    from tests.helpers import word_tokenizer
    from tests.pipeline.checkpoint_helpers import compress_in_place, tiny_llama

    tmp = tmp_path_factory.mktemp("tp")
    dense = tiny_llama()
    dense.save_pretrained(tmp / "dense")
    word_tokenizer().save_pretrained(tmp / "dense")
    model, mcfg = compress_in_place(tiny_llama())
    ck = save_compressed(model, tmp / "ck", method="quip#", method_config=dataclasses.asdict(mcfg),
                         tokenizer=word_tokenizer())
    cfg = {"name": "t", "device": "cpu",
           "models": {"tiny": {"source": str(tmp / "dense"), "label": "tiny", "shapes": "tiny-llama-2",
                               "num_layers": 2}},
           "throughput": {"rounds": 3, "warmup": 1, "new_tokens": 3, "calls": 2, "kernel": "reference",
                          "prompt": "w5 w9 w33"}}
    return tmp, cfg, ck


def test_step_throughput_times_every_variant_of_the_model_in_the_same_rounds(tiny_run):
    from caldera.experiments.planning.plan import Variant

    tmp, cfg, ck = tiny_run
    variants = [Variant("tiny-dense", "tiny", "dense"), Variant("tiny-quip#", "tiny", "quip#")]
    out = tmp / "tiny.json"
    s = ThroughputSettings.from_block(cfg["throughput"])
    res = step_throughput(s, RunContext.from_config(cfg), variants, {"tiny-quip#": str(ck)}, str(out),
                          torch_threads=1)
    assert json.loads(out.read_text())["model"] == "tiny" and set(res["variants"]) == {v.id for v in variants}
    assert len(res["orders"]) == 3 and res["orders"][0]["single_token"] in (["tiny-dense", "tiny-quip#"],
                                                                            ["tiny-quip#", "tiny-dense"])
    for v, m in res["variants"].items():
        assert m["load_s"] > 0 and m["model_tensor_mb"] > 0 and m["method"] == v.split("-")[1]
        for proto, per in (("decode", 3), ("single_token", 2)):
            r = m[proto]
            assert len(r["tokens_per_s"]) == len(r["times_s"]) == 3  # one per round
            assert [t * s for t, s in zip(r["tokens_per_s"], r["times_s"])] == pytest.approx([per] * 3)
            assert r["min"] <= r["median"] <= r["max"]
    assert res["torch_threads"] == 1 and res["peak_rss_mb"] > 0
    # what the job records is what it measured with, the rounds' seed included
    assert res["settings"]["rounds"] == 3 and res["settings"]["seed"] == 0
    assert res["variants"]["tiny-quip#"]["kernel_backends"] == ["None"]  # kernel=reference: the reference path


def test_step_throughput_refuses_what_it_cannot_time(tiny_run):
    from caldera.experiments.planning.plan import Variant

    tmp, cfg, ck = tiny_run
    s, run = ThroughputSettings.from_block(cfg["throughput"]), RunContext.from_config(cfg)
    with pytest.raises(ValueError, match="one model"):
        step_throughput(s, run, [Variant("a-dense", "tiny", "dense"), Variant("b-dense", "other", "dense")], {},
                        str(tmp / "x.json"))
    with pytest.raises(ValueError, match="no checkpoint was given for it"):
        step_throughput(s, run, [Variant("tiny-quip#", "tiny", "quip#")], {}, str(tmp / "x.json"))


def test_a_variant_that_does_not_fit_is_recorded_and_the_others_still_timed(tiny_run, monkeypatch):
    """As the paper's 70B dense row: the variant whose loading runs out of memory is recorded as such, and the
    rounds time the variants that loaded."""
    from caldera.experiments.jobs import throughput as job
    from caldera.experiments.planning.plan import Variant

    tmp, cfg, ck = tiny_run
    real = job._load

    def load(v, *a):
        if v.method == "dense":
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 140 GiB")
        return real(v, *a)

    monkeypatch.setattr(job, "_load", load)
    variants = [Variant("tiny-dense", "tiny", "dense"), Variant("tiny-quip#", "tiny", "quip#")]
    s, run = ThroughputSettings.from_block(cfg["throughput"]), RunContext.from_config(cfg)
    res = step_throughput(s, run, variants, {"tiny-quip#": str(ck)}, str(tmp / "oom.json"))
    assert "Tried to allocate 140 GiB" in res["variants"]["tiny-dense"]["oom"]
    assert "single_token" not in res["variants"]["tiny-dense"]
    assert len(res["variants"]["tiny-quip#"]["single_token"]["times_s"]) == 3
    assert all(o["single_token"] == ["tiny-quip#"] for o in res["orders"])
    with pytest.raises(RuntimeError, match="no variant of tiny could be loaded"):
        step_throughput(s, run, variants[:1], {}, str(tmp / "none.json"))

"""caldera.experiments.planning.workload: what a run computes, independent of the machine."""

from __future__ import annotations

import pytest

from caldera.experiments.planning import cost as C
from caldera.experiments.planning import workload as W


def test_eval_pass_tokens_are_the_corpora_then_zero_shot():
    cfg = C.load_workflow_config("config/paper.yaml")
    passes = W.eval_pass_tokens(cfg)
    assert passes[:2] == [W.STREAM_TOKENS["wikitext2"], 256 * 4096] and len(passes) == 3
    assert sum(passes) == W.eval_tokens(cfg)


def test_a_dense_llama_2_7b_is_its_published_parameter_count():
    """32 decoder layers of 4 attention projections (4096²) and 3 MLP ones (4096 × 11008), plus the embeddings
    and the LM head (32,000 × 4096 each): 6.74 B parameters (Touvron et al., 2023), 2 bytes each in fp16."""
    shapes, (h, f, heads, kv, hd), n_layers = W.shapes_of("llama-2-7b")
    assert (h, f, n_layers) == (4096, 11008, 32) and len(shapes) == 7
    assert W.dense_eval_bytes("llama-2-7b") / 2 == pytest.approx(6.738e9, rel=1e-3)
    assert W.dense_eval_bytes("llama-2-7b", bytes_per=4) == 2 * W.dense_eval_bytes("llama-2-7b")


def test_a_compressed_variants_bits_are_the_papers_average_and_the_dense_model_has_none():
    """CALDERA at 2-bit Q, rank 64 at 4 bits on LLaMa-2 7B: 2 + 64·4·(n + d)/(n·d) averaged over the linears
    (about 2.1 bits, the paper's Table 1 column); the dense model: None."""
    from types import SimpleNamespace

    from caldera.algorithm.config import CalderaConfig

    cfg = CalderaConfig.preset("paper").replace(rank=64, l_bits=4, r_bits=4)
    v = SimpleNamespace(method="caldera", config=cfg)
    shapes = W.shapes_of("llama-2-7b")[0]
    want = sum(n * d * 2 + 64 * 4 * (n + d) for n, d in shapes) / sum(n * d for n, d in shapes)
    assert W.variant_bits(v, "llama-2-7b") == pytest.approx(want, rel=1e-9)
    assert 2.05 < want < 2.15
    assert W.variant_bits(SimpleNamespace(method="dense", config=None), "llama-2-7b") is None

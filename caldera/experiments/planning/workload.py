"""What a run computes, independent of the machine: the shapes of a model, the tokens an evaluation runs forward
(perplexity windows and streams, zero-shot requests), the bytes of a dense model and the bits of a compressed
variant. The time model (:mod:`caldera.experiments.planning.cost`, :mod:`caldera.experiments.planning.job_costs`)
and the memory model (:mod:`caldera.experiments.planning.memory`) price these."""

from __future__ import annotations

from typing import Any

#: zero-shot tasks: (documents of the scored split, choices per document, mean tokens per request); estimates from
#: the tasks' validation/test sizes, LLaMa tokenizer. ``eval.zeroshot.limit`` caps the documents.
ZEROSHOT_DOCS = {
    "caldera_winogrande": (1267, 2, 30),
    "caldera_rte": (277, 2, 80),
    "caldera_piqa": (1838, 2, 50),
    "caldera_arc_easy": (2376, 4, 40),
    "caldera_arc_challenge": (1172, 4, 45),
}


def zeroshot_tokens(task: str, limit: float | int | None) -> int:
    """Tokens one evaluation runs forward for ``task`` (:data:`ZEROSHOT_DOCS`) with lm-eval's ``limit`` (a
    document count, or a fraction of the split below 1; None: every document); 0 for an unknown task."""
    docs, choices, per = ZEROSHOT_DOCS.get(task if task.startswith("caldera_") else f"caldera_{task}", (0, 0, 0))
    if limit is not None:
        docs = min(docs, int(limit * docs) if 0 < limit < 1 else int(limit))
    return docs * choices * per


#: tokens of the WikiText-2 test stream (LLaMa tokenizer)
STREAM_TOKENS = {"wikitext2": 341_469}



def shapes_of(model_key: str) -> tuple[list[tuple[int, int]], tuple[int, int, int, int, int], int]:
    """A model's linear shapes of one decoder layer, its (hidden, intermediate, heads, kv heads, head dim) and its
    decoder layers (:mod:`caldera.bits`)."""
    from caldera.bits import CONFIG_NUM_HIDDEN_LAYERS, CONFIG_SHAPES, MODEL_CONFIGS, TINY_CONFIGS

    cfg = MODEL_CONFIGS[model_key] if model_key in MODEL_CONFIGS else TINY_CONFIGS[model_key][:5]
    return CONFIG_SHAPES[model_key], cfg, CONFIG_NUM_HIDDEN_LAYERS[model_key]


def vocab_size(model_key: str) -> int:
    return {"llama-3-8b": 128_256, "mistral-7b": 32_000}.get(model_key, 32_000)


def dense_eval_bytes(model_key: str, bytes_per: int = 2) -> float:
    """Bytes of the dense model's weights that evaluation loads: every decoder layer's linears, the embeddings
    and the LM head, ``bytes_per`` each (norms: negligible)."""
    shapes, (h, _f, _heads, _kv, _hd), n_layers = shapes_of(model_key)
    return (sum(n * d for n, d in shapes) * n_layers + 2 * h * vocab_size(model_key)) * bytes_per


def eval_pass_tokens(config: dict[str, Any], zeroshot: bool = True, corpora: list[str] | None = None) -> list[int]:
    """Tokens of each forward pass of one evaluate job: each perplexity corpus (the WikiText-2 stream or
    n_windows × seq_len; only those of ``corpora`` when given), then, with ``zeroshot``, the zero-shot tasks
    together (:func:`zeroshot_tokens` at ``eval.zeroshot.limit``; lm-eval scores every task's requests in one
    call), if any. A layer-streamed evaluation reads every layer once per pass."""
    passes = []
    for name, spec in config["eval"]["ppl"].items():
        if corpora is not None and name not in corpora:
            continue
        if spec["protocol"] == "stream":
            passes.append(min(STREAM_TOKENS.get(spec["source"], 341_469),
                              (spec.get("n_windows") or 10**9) * spec["seq_len"]))
        else:
            passes.append(spec["n_windows"] * spec["seq_len"])
    zs = config["eval"].get("zeroshot") or {}
    if zeroshot and zs.get("tasks"):
        passes.append(sum(zeroshot_tokens(t, zs.get("limit")) for t in zs["tasks"]))
    return passes


def eval_tokens(config: dict[str, Any], zeroshot: bool = True, corpora: list[str] | None = None) -> int:
    """Tokens one evaluate job runs forward (every pass of :func:`eval_pass_tokens`)."""
    return sum(eval_pass_tokens(config, zeroshot, corpora))


def variant_bits(v: Any, model_key: str) -> float | None:
    """Average bits per linear weight of a compressed variant as evaluation holds it (:func:`caldera.bits.
    average_bits` of its backbone bits, rank and factor bits), or None for the dense model and for a method
    whose bits it cannot read (counted dense: an upper bound)."""
    from caldera.bits import average_bits

    cfg = v.config
    b_q = getattr(cfg, "q_bits", None) or getattr(cfg, "bits", None)
    if v.method == "dense" or not isinstance(b_q, (int, float)):
        return None
    rank = int(getattr(cfg, "rank", 0) or getattr(cfg, "lr_rank", 0) or 0)
    b_lr = max(getattr(cfg, "l_bits", None) or 16, getattr(cfg, "r_bits", None) or 16) if rank else None
    return average_bits(shapes_of(model_key)[0], b_q, b_lr, rank)

"""Bit accounting for ``W ≈ Q + L R`` decompositions.

Two notions of "bits" are provided and they must not be confused:

* :func:`average_bits` is the paper's *budget* formula (appendix "Computation of Average Bit Budget
  Per-Parameter"). For a transformer block with linear layers of shapes ``(n_i, d_i)``, a backbone
  ``Q`` at ``B_Q`` bits, rank-``k`` factors ``L`` (n×k) and ``R`` (k×d) at ``B_LR`` bits, of which
  the top ``r`` components are fine-tuned and held at ``B_FT`` (= 16, BF16) bits::

      Σ_i (B_Q n_i d_i + (k − r) B_LR (n_i + d_i) + B_FT r (n_i + d_i))  /  Σ_i n_i d_i

  With ``r = 0`` this is the zero-shot formula. Overheads (Hadamard sign vectors, scales, codebooks,
  the shared K×K Hadamard matrices, embeddings, norms, the LM head) are *not* counted; this is the
  number the paper prints in its "Avg Bits" columns. Every block of the models considered has the same
  shapes, so the per-block average is the whole-model average over the compressed linear layers.

* :func:`storage_bits` counts the bits actually needed to store one compressed matrix, including the
  per-matrix overheads (see its docstring for the exact list).

:func:`rank_for_bits` inverts :func:`average_bits` over ranks that are multiples of ``multiple``; it
is used to map the paper's ranks on 7B–70B models to equal-bits ranks on a small stand-in model.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from numbers import Integral, Real

__all__ = [
    "MAX_BITS",
    "CONFIG_NUM_HIDDEN_LAYERS",
    "CONFIG_SHAPES",
    "MODEL_CONFIGS",
    "MODEL_SHAPES",
    "NUM_HIDDEN_LAYERS",
    "TINY_CONFIGS",
    "average_bits",
    "block_shapes",
    "linear_param_count",
    "rank_for_bits",
    "storage_bits",
]

#: Largest bit width accepted anywhere in this module (fp32).
MAX_BITS = 32


def block_shapes(
    hidden: int, intermediate: int, num_heads: int, num_kv_heads: int, head_dim: int
) -> list[tuple[int, int]]:
    """Shapes ``(n, d) = (out_features, in_features)`` of the 7 linear layers of a LLaMa-style block.

    Order: ``q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj``. Grouped-query attention
    shrinks ``k_proj``/``v_proj`` to ``num_kv_heads * head_dim`` outputs.
    """
    for name, v in [("hidden", hidden), ("intermediate", intermediate), ("num_heads", num_heads),
                    ("num_kv_heads", num_kv_heads), ("head_dim", head_dim)]:
        if isinstance(v, bool) or not isinstance(v, Integral) or v <= 0:
            raise ValueError(f"{name} must be a positive integer, got {v!r}")
    q = num_heads * head_dim
    kv = num_kv_heads * head_dim
    return [
        (q, hidden),  # q_proj
        (kv, hidden),  # k_proj
        (kv, hidden),  # v_proj
        (hidden, q),  # o_proj
        (intermediate, hidden),  # gate_proj
        (intermediate, hidden),  # up_proj
        (hidden, intermediate),  # down_proj
    ]


#: Public (Hugging Face ``config.json``) values used to build :data:`MODEL_SHAPES`:
#: ``(hidden_size, intermediate_size, num_attention_heads, num_key_value_heads, head_dim)``;
#: ``head_dim = hidden_size / num_attention_heads`` for all of them except Gemma-3 (256 > 640 / 4).
MODEL_CONFIGS: dict[str, tuple[int, int, int, int, int]] = {
    # meta-llama/Llama-2-7b-hf: hidden 4096, intermediate 11008, 32 heads, 32 KV heads (MHA), head_dim 128.
    "llama-2-7b": (4096, 11008, 32, 32, 128),
    # meta-llama/Llama-2-13b-hf: hidden 5120, intermediate 13824, 40 heads, 40 KV heads (MHA), head_dim 128.
    "llama-2-13b": (5120, 13824, 40, 40, 128),
    # meta-llama/Llama-2-70b-hf: hidden 8192, intermediate 28672, 64 heads, 8 KV heads, head_dim 128
    # -> k_proj/v_proj are 1024 x 8192.
    "llama-2-70b": (8192, 28672, 64, 8, 128),
    # meta-llama/Meta-Llama-3-8B: hidden 4096, intermediate 14336, 32 heads, 8 KV heads, head_dim 128
    # -> k_proj/v_proj are 1024 x 4096. (The paper's appendix writes (4096, 1024) for them, i.e.
    # (in, out); the formula is symmetric in n and d, so the order does not matter for the bits.)
    "llama-3-8b": (4096, 14336, 32, 8, 128),
    # mistralai/Mistral-7B-v0.1: hidden 4096, intermediate 14336, 32 heads, 8 KV heads, head_dim 128
    # (same linear shapes as LLaMa-3 8B).
    "mistral-7b": (4096, 14336, 32, 8, 128),
    # HuggingFaceTB/SmolLM2-135M: hidden 576, intermediate 1536, 9 heads, 3 KV heads, head_dim 64
    # -> k_proj/v_proj are 192 x 576.
    "smollm2-135m": (576, 1536, 9, 3, 64),
    # google/gemma-3-270m (the offline second family): hidden 640, intermediate 2048, 4 heads, 1 KV head,
    # head_dim 256 -> q_proj 1024 x 640, k_proj/v_proj 256 x 640, o_proj 640 x 1024.
    "gemma3-270m": (640, 2048, 4, 1, 256),
}

#: ``num_hidden_layers`` from the same configs (every block has identical shapes).
NUM_HIDDEN_LAYERS: dict[str, int] = {
    "llama-2-7b": 32,
    "llama-2-13b": 40,
    "llama-2-70b": 80,
    "llama-3-8b": 32,
    "mistral-7b": 32,
    "smollm2-135m": 30,
    "gemma3-270m": 18,
}

#: Per-block linear shapes ``(n, d) = (out_features, in_features)`` in the order
#: q, k, v, o, gate, up, down.
MODEL_SHAPES: dict[str, list[tuple[int, int]]] = {
    name: block_shapes(*cfg) for name, cfg in MODEL_CONFIGS.items()
}


#: Tiny random-init stand-ins of the paper's three families (``config/paper-local.yaml``, written by
#: :mod:`caldera.experiments.jobs.paper_local`): ``MODEL_CONFIGS``' fields plus ``num_hidden_layers`` last. Kept out of
#: :data:`MODEL_SHAPES` (the public models); a config's ``models.<m>.shapes`` may name either (:data:`CONFIG_SHAPES`).
TINY_CONFIGS: dict[str, tuple[int, int, int, int, int, int]] = {
    "tiny-llama-2": (64, 128, 4, 4, 16, 2),    # LLaMa-2: multi-head attention
    "tiny-llama-3": (64, 256, 4, 2, 16, 2),    # LLaMa-3: grouped-query attention (k/v 32 x 64)
    "tiny-mistral": (64, 256, 4, 2, 16, 2),    # Mistral: grouped-query attention, sliding window
}

#: Every shapes key a workflow config may name (``models.<m>.shapes``): the public models and the tiny stand-ins.
CONFIG_SHAPES: dict[str, list[tuple[int, int]]] = {
    **MODEL_SHAPES, **{name: block_shapes(*cfg[:5]) for name, cfg in TINY_CONFIGS.items()}
}
#: ``num_hidden_layers`` of every :data:`CONFIG_SHAPES` key.
CONFIG_NUM_HIDDEN_LAYERS: dict[str, int] = {
    **NUM_HIDDEN_LAYERS, **{name: cfg[5] for name, cfg in TINY_CONFIGS.items()}
}


def linear_param_count(model: str) -> int:
    """Number of parameters in all compressed linear layers of ``model`` (blocks × per-block sum)."""
    if model not in MODEL_SHAPES:
        raise ValueError(f"model must be one of {sorted(MODEL_SHAPES)}, got {model!r}")
    return NUM_HIDDEN_LAYERS[model] * sum(n * d for n, d in MODEL_SHAPES[model])


# ----------------------------------------------------------------------------------------- validation


def _check_shapes(shapes: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
    if isinstance(shapes, (str, bytes)) or not isinstance(shapes, Sequence) or len(shapes) == 0:
        raise ValueError(f"shapes must be a non-empty sequence of (n, d) pairs, got {shapes!r}")
    out = []
    for i, s in enumerate(shapes):
        try:
            n, d = s
        except (TypeError, ValueError):
            raise ValueError(f"shapes[{i}] must be an (n, d) pair, got {s!r}") from None
        for v in (n, d):
            if isinstance(v, bool) or not isinstance(v, Integral) or v <= 0:
                raise ValueError(f"shapes[{i}] must hold positive integers, got {s!r}")
        out.append((int(n), int(d)))
    return out


def _check_bits(name: str, value, *, integer: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, Real) or not math.isfinite(float(value)):
        raise ValueError(f"{name} must be a finite real number of bits, got {value!r}")
    if not 0 < value <= MAX_BITS:
        raise ValueError(f"{name} must be in (0, {MAX_BITS}] bits, got {value!r}")
    if integer and float(value) != int(value):
        raise ValueError(f"{name} must be a whole number of bits for storage, got {value!r}")
    return float(value)


def _check_rank(name: str, value, shapes: list[tuple[int, int]]) -> int:
    if isinstance(value, bool) or not isinstance(value, Integral):
        raise ValueError(f"{name} must be an integer, got {value!r}")
    if value < 0:
        raise ValueError(f"{name} must be non-negative, got {value}")
    limit = min(min(n, d) for n, d in shapes)
    if value > limit:
        raise ValueError(f"{name}={value} exceeds min(n, d)={limit} of the given shapes")
    return int(value)


# --------------------------------------------------------------------------------------- the formulas


def average_bits(
    shapes: Sequence[tuple[int, int]],
    b_q: float,
    b_lr: float | None,
    rank: int,
    ft_rank: int = 0,
    b_ft: float = 16,
) -> float:
    """The paper's average bits per parameter over linear layers of shapes ``(n_i, d_i)``.

    ``Σ(B_Q n d + (k − r) B_LR (n + d) + B_FT r (n + d)) / Σ n d`` with ``k = rank``,
    ``r = ft_rank`` (the top components fine-tuned and kept at ``b_ft`` bits). ``b_lr`` may be ``None``
    only when no component is held at ``b_lr`` bits (``rank == ft_rank``, e.g. rank 0).

    Raises ``ValueError`` (naming the argument) for empty/invalid shapes, a negative rank, a rank above
    ``min(n, d)`` of any shape, ``ft_rank > rank``, or bit widths outside ``(0, 32]``.
    """
    shapes = _check_shapes(shapes)
    b_q = _check_bits("b_q", b_q)
    rank = _check_rank("rank", rank, shapes)
    ft_rank = _check_rank("ft_rank", ft_rank, shapes)
    if ft_rank > rank:
        raise ValueError(f"ft_rank={ft_rank} must not exceed rank={rank}")
    b_ft = _check_bits("b_ft", b_ft)
    if b_lr is None:
        if rank - ft_rank != 0:
            raise ValueError("b_lr is required when rank > ft_rank")
        b_lr = 0.0
    else:
        b_lr = _check_bits("b_lr", b_lr)
    total = sum(n * d for n, d in shapes)
    edges = sum(n + d for n, d in shapes)
    bits = b_q * total + ((rank - ft_rank) * b_lr + ft_rank * b_ft) * edges
    return bits / total


def storage_bits(
    n: int,
    d: int,
    rank: int,
    b_q: int,
    b_lr: int | None,
    *,
    sign_bits: int = 1,
    scale_bits: int = 32,
    num_scales: int | None = None,
) -> int:
    """Bits needed to store one compressed ``n × d`` matrix ``W ≈ Q + L R`` (``n`` = out_features).

    Counted, exactly:

    * ``b_q * n * d`` for the backbone codes ``Q`` (``b_q = 16``/``32`` for an unquantized backbone);
    * ``b_lr * rank * (n + d)`` for ``L`` (n×rank) and ``R`` (rank×d). Pass ``b_lr=32`` for factors kept
      in fp32 (the authors' code stores its "16-bit" factors in fp32);
    * ``sign_bits * (d + n)`` for the randomized-Hadamard sign vectors ``S_U`` (length ``d``, input side)
      and ``S_V`` (length ``n``, output side): ``sign_bits=1`` for packed ±1, ``16``/``32`` when stored
      as half/float tensors, ``0`` when no RHT is used;
    * ``scale_bits * num_scales`` for scalar scales. By default ``num_scales`` is one for a quantized
      backbone (``b_q < 16``) plus one each for ``L`` and ``R`` when they are quantized
      (``rank > 0`` and ``b_lr < 16``).

    Not counted: anything shared across matrices (E8P codebook, the K×K Hadamard matrices used for
    non-power-of-two sizes), tensor metadata/shape headers, and padding of ``n``/``d`` to the
    quantizer's block size.
    """
    for name, v in [("n", n), ("d", d)]:
        if isinstance(v, bool) or not isinstance(v, Integral) or v <= 0:
            raise ValueError(f"{name} must be a positive integer, got {v!r}")
    shapes = [(int(n), int(d))]
    rank = _check_rank("rank", rank, shapes)
    b_q = int(_check_bits("b_q", b_q, integer=True))
    if b_lr is None:
        if rank != 0:
            raise ValueError("b_lr is required when rank > 0")
        b_lr_i = 0
    else:
        b_lr_i = int(_check_bits("b_lr", b_lr, integer=True))
    for name, v in [("sign_bits", sign_bits), ("scale_bits", scale_bits)]:
        if isinstance(v, bool) or not isinstance(v, Integral) or not 0 <= v <= MAX_BITS:
            raise ValueError(f"{name} must be an integer in [0, {MAX_BITS}], got {v!r}")
    if num_scales is None:
        num_scales = int(b_q < 16) + (2 if rank > 0 and b_lr_i < 16 else 0)
    elif isinstance(num_scales, bool) or not isinstance(num_scales, Integral) or num_scales < 0:
        raise ValueError(f"num_scales must be a non-negative integer, got {num_scales!r}")
    return (
        b_q * n * d
        + b_lr_i * rank * (n + d)
        + sign_bits * (n + d)
        + scale_bits * int(num_scales)
    )


def rank_for_bits(
    shapes: Sequence[tuple[int, int]],
    b_q: float,
    b_lr: float,
    target_bits: float,
    multiple: int = 8,
) -> int:
    """Rank (a multiple of ``multiple``, ``0 ≤ rank ≤ min(n, d)``) whose :func:`average_bits` is
    closest to ``target_bits``; ties go to the smaller rank.

    Example: the paper's LLaMa-2 7B rank 256 with 4-bit factors is ≈2.395 bits; on SmolLM2-135M the
    same budget is reached with a much smaller rank.
    """
    shapes = _check_shapes(shapes)
    _check_bits("b_q", b_q)
    _check_bits("b_lr", b_lr)
    if isinstance(target_bits, bool) or not isinstance(target_bits, Real) or not math.isfinite(target_bits):
        raise ValueError(f"target_bits must be a finite real number, got {target_bits!r}")
    if target_bits <= 0:
        raise ValueError(f"target_bits must be positive, got {target_bits!r}")
    if isinstance(multiple, bool) or not isinstance(multiple, Integral) or multiple <= 0:
        raise ValueError(f"multiple must be a positive integer, got {multiple!r}")
    limit = min(min(n, d) for n, d in shapes)
    best_rank, best_err = 0, math.inf
    for rank in range(0, limit + 1, int(multiple)):
        err = abs(average_bits(shapes, b_q, b_lr, rank) - target_bits)
        if err < best_err:
            best_rank, best_err = rank, err
    return best_rank

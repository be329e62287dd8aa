"""How the CPU engine computes its float32 products (``CalderaConfig.fp32_matmul``): IEEE float32, or oneDNN's
bfloat16 arithmetic on CPUs with bfloat16 dot-product instructions.

Why. About two thirds of a CALDERA outer iteration are float32 matrix products (``(W − Q) M``, BlockLDLQ's feedback,
LPLR's ``R M``, ``Y Pᵀ``, ``Aᵀ L``, the subspace iteration). Since PyTorch 2.9, ``torch.backends.mkldnn.matmul.
fp32_precision = "bf16"`` lets oneDNN compute float32 products with bfloat16 instructions (AVX512-BF16, AMX), with
float32 inputs, float32 accumulation and float32 outputs. Where oneDNN splits each float32 operand into bfloat16
parts, the product keeps close to float32 accuracy (unlike a plain bfloat16 product, 8 mantissa bits) at about
half the time; on some CPUs the mode is a plain bfloat16 product, which :func:`bf16_accurate` detects.
``tests/algorithm/test_matmul_precision.py`` checks both properties; the speeds and errors measured on the CPUs of this
project are in ``benchmarks/results/SETTINGS.md``.

Modes:

* ``"ieee"`` — IEEE float32 products (torch's default).
* ``"bf16"`` — oneDNN's bfloat16 arithmetic for the float32 products on CPU tensors (an error on a torch without
  the setting, < 2.9). On a CPU without bfloat16 instructions oneDNN emulates them: slower than ``"ieee"``.
* ``"auto"`` (the default) — ``"bf16"`` where it is fast, float32-accurate and the job did not ask for
  CPU-independent numerics: CPU tensors, a torch with the setting and oneDNN, a CPU with AVX512-BF16 or AMX on
  which the mode passes :func:`bf16_accurate` (a probe product against float64), and none of the variables that
  the workflow's ``numerics: avx2`` / ``portable`` pins set (``MKL_CBWR``, ``ATEN_CPU_CAPABILITY``,
  ``NUMBA_CPU_NAME``: :data:`PIN_VARS`) in the environment (pinned results are meant to be the same on every CPU,
  and the bfloat16 path exists only on some); else ``"ieee"``.

CUDA tensors always get IEEE float32 products: this setting governs oneDNN (CPU) only, and TF32 (CUDA's reduced
float32 mode, 10 mantissa bits) is a different trade that the engine does not make.

The setting is torch's process-wide flag; :func:`scoped` sets it for the duration of one decomposition and restores
the caller's value afterwards (other Python threads running float32 products at the same time would see it).
"""

from __future__ import annotations

import contextlib
import functools
import os
from collections.abc import Iterator

import torch

from caldera import numerics

MODES = ("auto", "ieee", "bf16")
#: environment variables that pin the CPU code paths: those caldera.numerics' avx2 / portable modes set
PIN_VARS = tuple(sorted({var for env in numerics.MODE_ENV.values() for var in env}))


def _flag():
    """torch's oneDNN float32 matmul precision setting (``torch.backends.mkldnn.matmul``), or None before 2.9."""
    m = getattr(torch.backends.mkldnn, "matmul", None)
    return m if m is not None and hasattr(m, "fp32_precision") else None


def bf16_native() -> bool:
    """Whether this CPU has bfloat16 dot-product instructions that oneDNN uses (AVX512-BF16 or AMX)."""
    cpu = torch.cpu
    for probe in ("_is_avx512_bf16_supported", "_is_amx_tile_supported"):
        f = getattr(cpu, probe, None)
        if f is not None and f():
            return True
    return False


@functools.lru_cache(maxsize=1)
def bf16_accurate() -> bool:
    """Does oneDNN's bf16 mode keep float32 accuracy on this CPU? One probe per process: a seeded 256×512 · 512×256
    product whose relative Frobenius error against float64 must be at most 4× the IEEE product's and below 2e-6
    (a plain bfloat16 product's is ≈ 1e-3)."""
    flag = _flag()
    if flag is None or not torch.backends.mkldnn.is_available():
        return False
    g = torch.Generator().manual_seed(0)
    A, B = torch.randn(256, 512, generator=g), torch.randn(512, 256, generator=g)
    ref = A.double() @ B.double()
    before, err = flag.fp32_precision, {}
    try:
        for mode in ("ieee", "bf16"):
            flag.fp32_precision = mode
            err[mode] = float(((A @ B).double() - ref).norm() / ref.norm())
    finally:
        flag.fp32_precision = before
    return err["bf16"] <= 4 * err["ieee"] and err["bf16"] < 2e-6


def resolve(mode: str, device: torch.device | str) -> str:
    """The float32 product arithmetic (``"ieee"`` or ``"bf16"``) that ``mode`` gives tensors on ``device``."""
    if mode not in MODES:
        raise ValueError(f"fp32_matmul={mode!r} is invalid; accepted: {' | '.join(MODES)}")
    if torch.device(device).type != "cpu" or mode == "ieee":
        return "ieee"
    available = _flag() is not None and torch.backends.mkldnn.is_available()
    if mode == "bf16":
        if not available:
            raise ValueError(
                f"fp32_matmul='bf16' needs torch >= 2.9 with oneDNN (torch.backends.mkldnn.matmul.fp32_precision); "
                f"this is torch {torch.__version__}: use fp32_matmul='ieee' or 'auto'"
            )
        return "bf16"
    pinned = any(os.environ.get(v) for v in PIN_VARS)
    return "bf16" if available and bf16_native() and not pinned and bf16_accurate() else "ieee"


@contextlib.contextmanager
def scoped(mode: str, device: torch.device | str) -> Iterator[str]:
    """Run the block with ``resolve(mode, device)``'s float32 products; yields that arithmetic. The caller's
    setting is restored on exit (also on an exception)."""
    eff = resolve(mode, device)
    flag = _flag()
    if flag is None:  # torch < 2.9: IEEE products only (resolve() refused "bf16")
        yield eff
        return
    before = flag.fp32_precision
    flag.fp32_precision = eff
    try:
        yield eff
    finally:
        flag.fp32_precision = before

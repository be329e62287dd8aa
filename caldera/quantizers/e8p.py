"""E8P ("E8P12"): the 2-bit, 8-dimensional lattice codebook of QuIP# (Tseng et al., 2024) as a quantizer
(:class:`E8P`), with the input and code checks the quantizers share and the choice of search backend.

The codebook and its 16-bit code are :mod:`caldera.quantizers.e8p_codebook`; the exact nearest-codeword search
in torch is :mod:`caldera.quantizers.e8p_search`, the compiled one :mod:`caldera.quantizers.e8p_kernel` (Numba,
CPU tensors), the Triton one :mod:`caldera.quantizers.e8p_triton` (CUDA). Large CPU inputs are split into blocks
on ``torch.get_num_threads()`` Python threads (:func:`_encode_all`).

Shapes and dtypes: ``quantize`` takes ``(..., n)`` floating tensors with ``n % 8 == 0`` and returns
``(..., n // 8)`` int32 codes in ``[0, 65535]``; ``dequantize`` returns float32 ``(..., n)``.
``pack_codes`` / ``unpack_codes`` convert to/from exactly 2 bytes (uint8) per code.
"""

from __future__ import annotations

import functools
import math
from concurrent.futures import ThreadPoolExecutor

import torch
from torch import Tensor

from caldera.validation import check_values

from .base import Quantizer
from .e8p_codebook import NORM12_PATTERNS_2X, NUM_CODES, E8PLookup, cpu_lookup, lookup_on
from .e8p_search import CHUNK_ROWS, SORT8_NETWORK, encode_dense, encode_rows, search_on_device

#: this module's public names: the quantizer, its checks and backends, and the codebook's and the search's names
#: it gives on (:mod:`caldera.quantizers.e8p_codebook`, :mod:`caldera.quantizers.e8p_search`)
__all__ = ["BACKENDS", "E8P", "MAX_ABS_INPUT", "NORM12_PATTERNS_2X", "SORT8_NETWORK", "check_codes", "check_finite",
           "encode_dense", "encode_residual_e8p", "lookup_on", "numba_rvq_kernel", "search_on_device"]

# Inputs are searched in float32; beyond this magnitude sums of |x| in the scores could overflow.
MAX_ABS_INPUT = 1e36
_BLOCK_ROWS = 1 << 18  # 8-vectors per block: bounds the (2, block) objective/code buffers to 6 MiB


def check_finite(x: Tensor, arg: str, bound: float | None = None) -> None:
    """Raise ``ValueError`` naming ``arg`` unless ``x`` is a floating tensor of finite values (and, if
    ``bound`` is given, ``max|x| ≤ bound``). One pass over ``x`` (``amax`` propagates NaN). Tensors on the
    ``meta`` device carry no values: only their dtype is checked."""
    if not isinstance(x, Tensor):
        raise ValueError(f"{arg}: expected a torch.Tensor, got {type(x).__name__}")
    if not x.is_floating_point():
        raise ValueError(f"{arg}: expected a floating-point tensor, got dtype {x.dtype}")
    if x.numel() and x.device.type != "meta":
        m = float(x.detach().abs().amax())
        if not math.isfinite(m):
            raise ValueError(f"{arg}: contains NaN or Inf entries; only finite values can be quantized")
        if bound is not None and m > bound:
            raise ValueError(f"{arg}: max |{arg}| = {m:g} exceeds {bound:g}; scale the input first")


_WIDE_UNSIGNED = (torch.uint16, torch.uint32, torch.uint64)


def check_codes(codes: Tensor, arg: str, upper: int) -> None:
    """Raise ``ValueError`` unless ``codes`` is an integer tensor (any signed or unsigned width) with values
    in ``[0, upper)`` (values are not checked on the ``meta`` device, which holds none)."""
    if not isinstance(codes, Tensor):
        raise ValueError(f"{arg}: expected a torch.Tensor, got {type(codes).__name__}")
    if codes.is_floating_point() or codes.is_complex() or codes.dtype == torch.bool:
        raise ValueError(f"{arg}: expected an integer tensor of codes, got dtype {codes.dtype}")
    if codes.ndim == 0:
        raise ValueError(f"{arg}: expected at least one dimension, got a scalar")
    if codes.numel() and codes.device.type != "meta":
        # torch implements no min/max for uint16/uint32/uint64 (the dtypes checkpoints store codes in); the
        # values are widened first (uint64 above 2**63 wraps negative and is reported out of range)
        c = codes.to(torch.int64) if codes.dtype in _WIDE_UNSIGNED else codes
        lo, hi = int(c.min()), int(c.max())
        if lo < 0 or hi >= upper:
            raise ValueError(f"{arg}: code values must lie in [0, {upper - 1}], got range [{lo}, {hi}]")


@functools.lru_cache(maxsize=4)
def _pool(workers: int) -> ThreadPoolExecutor:
    return ThreadPoolExecutor(max_workers=workers, thread_name_prefix="caldera-e8p")


#: Search backends: "numba" (compiled loop, :mod:`caldera.quantizers.e8p_kernel`, CPU tensors only) and
#: "torch" (the vectorised search above, any device). "auto" picks numba when it imports; tensors on any
#: other device than the CPU always use "torch" (on their own device: no host round trip, :func:`search_on_device`).
#: the Numba kernel splits inputs of at least this many 8-vectors over the job's threads (it releases the
#: GIL; a BlockLDLQ step quantizes n 8-vectors, n = 4096 or 11008 at LLaMa-2 7B shapes)
_NUMBA_SPLIT_ROWS = 2048
BACKENDS = ("auto", "numba", "torch")


def _with_codebook(name: str):
    """``(kernel, codebook, key_to_index, sum_odd, n12_abs)`` for the compiled kernel ``name`` of
    :mod:`caldera.quantizers.e8p_kernel` that also reads the codebook, or ``None`` without Numba."""
    if _numba_kernel() is None:
        return None
    from . import e8p_kernel

    _, key_to_index, sum_odd, n12_abs = _numba_kernel()
    return getattr(e8p_kernel, name), cpu_lookup().codebook.numpy(), key_to_index, sum_odd, n12_abs


@functools.lru_cache(maxsize=1)
def _numba_ldlq_kernel():
    """The fused BlockLDLQ chunk (``_ldlq_chunk``) with its codebook and lookup arrays (:func:`_with_codebook`),
    or ``None``."""
    return _with_codebook("_ldlq_chunk")


@functools.lru_cache(maxsize=1)
def _numba_kernel():
    """``(kernel, key_to_index, sum_odd, n12_abs)`` for the compiled search, or ``None`` without Numba."""
    try:
        from .e8p_kernel import _encode_rows
    except ImportError:
        return None
    t = cpu_lookup()
    return (
        _encode_rows,
        t.key_to_index.to(torch.int64).numpy(),
        t.sum_odd.to(torch.int64).numpy(),
        t.n12_abs.to(torch.float64).numpy(),
    )


@functools.lru_cache(maxsize=1)
def numba_rvq_kernel():
    """The compiled two-stage search (``_encode_rvq_rows``) with its codebook and lookup arrays
    (:func:`_with_codebook`), or ``None``."""
    return _with_codebook("_encode_rvq_rows")


def encode_residual_e8p(x: Tensor, resid_scale: float, stage2_bits: int) -> Tensor:
    """Codes ``(c1 << stage2_bits) | c2`` of two-stage residual E8P (``c1`` = E8P(x), ``c2`` = E8P(resid_scale ·
    (x − codeword(c1))), the residual in float32) for a flat float32 CPU ``x`` ``(n, 8)``, already validated, by the
    compiled kernel (:func:`caldera.quantizers.e8p_kernel._encode_rvq_rows`): both searches in one pass, split over
    ``torch.get_num_threads()`` threads from ``_NUMBA_SPLIT_ROWS`` rows (every row independent: the split does not
    change the result). Returns int64 ``(n,)``. Needs Numba (:func:`numba_rvq_kernel` is not None)."""
    import numpy as np  # with Numba, which needs it

    kernel, cb, key_to_index, sum_odd, n12_abs = numba_rvq_kernel()
    n = x.shape[0]
    out = torch.empty(n, dtype=torch.int64, device=x.device)  # x's device (the CPU), whatever torch's default
    xs, os_ = x.numpy(), out.numpy()
    rs = np.float32(resid_scale)
    workers = torch.get_num_threads()
    if workers <= 1 or n < _NUMBA_SPLIT_ROWS:
        kernel(xs, rs, stage2_bits, cb, key_to_index, sum_odd, n12_abs, os_)
        return out
    step = -(-n // workers)
    jobs = [
        _pool(workers).submit(kernel, xs[a : a + step], rs, stage2_bits, cb, key_to_index, sum_odd, n12_abs,
                              os_[a : a + step])
        for a in range(0, n, step)
    ]
    for job in jobs:
        job.result()
    return out


def _resolve_backend(backend: str) -> str:
    if backend not in BACKENDS:
        raise ValueError(f"E8P backend={backend!r}; accepted: {', '.join(BACKENDS)}")
    if backend == "torch":
        return "torch"
    if _numba_kernel() is None:
        if backend == "numba":
            raise ImportError("E8P backend='numba' needs the numba package: pip install numba")
        return "torch"
    return "numba"


def _encode_numba(x: Tensor, t: E8PLookup, out: Tensor) -> None:
    """:func:`encode_rows` with the compiled kernel (same contract; ``t`` is unused, the kernel's lookup arrays
    are derived from it once)."""
    kernel, key_to_index, sum_odd, n12_abs = _numba_kernel()
    kernel(x.numpy(), key_to_index, sum_odd, n12_abs, out.numpy())


def _encode_all(x: Tensor, t: E8PLookup, out: Tensor, backend: str = "torch") -> None:
    """:func:`encode_rows` over ``x`` (``(n, 8)`` float32) in blocks, writing int32 codes into ``out`` ``(n,)``.

    On the CPU the search itself is single-threaded (see ``COLS``; the Numba kernel releases the GIL);
    large inputs are split into blocks that run on ``torch.get_num_threads()`` Python threads (torch
    releases the GIL inside its kernels, so the blocks overlap); the Numba kernel is split from
    ``_NUMBA_SPLIT_ROWS`` 8-vectors on (the size of one BlockLDLQ step). Every 8-vector is searched
    independently, so the result does not depend on the split. Other devices search on ``x``'s device without
    host synchronisation (:func:`search_on_device`; ``backend`` must be "torch" there).
    """
    n = x.shape[0]
    if x.device.type != "cpu":
        if backend != "torch":
            raise ValueError(f"E8P backend={backend!r} runs on CPU tensors only; got a tensor on {x.device}")
        out.copy_(search_on_device(x, t))
        return
    encode = _encode_numba if backend == "numba" else encode_rows
    workers = torch.get_num_threads()
    if backend == "numba" and workers > 1 and _NUMBA_SPLIT_ROWS <= n < 2 * CHUNK_ROWS:
        step = -(-n // workers)
        jobs = [
            _pool(workers).submit(encode, x[start : start + step], t, out[start : start + step])
            for start in range(0, n, step)
        ]
        for job in jobs:
            job.result()
        return
    if workers <= 1 or n < 2 * CHUNK_ROWS:
        for start in range(0, n, _BLOCK_ROWS):
            encode(x[start : start + _BLOCK_ROWS], t, out[start : start + _BLOCK_ROWS])
        return
    step = min(_BLOCK_ROWS, max(CHUNK_ROWS, -(-n // (4 * workers))))  # ≥ 4 blocks per worker if possible
    jobs = [
        _pool(workers).submit(encode, x[start : start + step], t, out[start : start + step])
        for start in range(0, n, step)
    ]
    for job in jobs:
        job.result()


class E8P(Quantizer):
    """QuIP#'s E8P12 codebook: 65,536 codewords in ``E8 + ¼𝟙``, 16-bit code per 8 weights (2 bits/weight).

    ``quantize(x)``: ``x`` ``(..., n)`` floating (any float dtype, searched in float32), ``n % 8 == 0``,
    finite with ``max|x| ≤ 1e36`` -> int32 codes ``(..., n // 8)`` in ``[0, 65535]`` of the nearest codewords
    (exact search, see the module docstring). ``dequantize(codes)``: integer codes ``(..., m)`` -> float32
    ``(..., 8 m)``. ``round(x)`` = ``dequantize(quantize(x))``. Codes are stored as int32 but carry exactly
    16 bits; :meth:`pack_codes` gives the 2-bytes-per-code form. Instances are stateless and share the
    codebook and its lookup arrays, which are built once per process (~20 ms).

    ``backend``: ``"auto"`` (default: the compiled Numba search when Numba imports, else torch), ``"numba"``
    or ``"torch"`` (the vectorised reference). Both are exact; they can differ only on float ties. The
    backend applies to CPU tensors; tensors on another device (CUDA, ...) are searched by the torch path on
    that device, and codes on a device are dequantized with the codebook copied there once (cached).
    """

    name = "e8p"
    block_size = 8
    bits_per_weight = 2.0
    opt_scale = 1.03  # QuIP# E8P12 opt_scale (quip-sharp.md section 1)
    code_dtype = torch.int32
    num_codes = NUM_CODES

    def __init__(self, backend: str = "auto") -> None:
        self._t = cpu_lookup()
        self.backend = _resolve_backend(backend)

    @property
    def codebook(self) -> Tensor:
        """``(65536, 8)`` float32; row ``i`` is the codeword of code ``i`` (a copy, safe to modify)."""
        return self._t.codebook.clone()

    @property
    def abs_patterns(self) -> Tensor:
        """``(256, 8)`` float32: the abs patterns S (row ``k`` is the high byte ``k``); a copy."""
        return self._t.abs_f.clone()

    def _flat(self, x: Tensor, arg: str) -> Tensor:
        check_values(x, arg)
        check_finite(x, arg, MAX_ABS_INPUT)
        self.check_shape(x, arg)
        return x.detach().to(torch.float32).reshape(-1, 8).contiguous()

    def quantize(self, x: Tensor) -> Tensor:
        """Nearest-codeword codes: float ``(..., n)`` -> int32 ``(..., n // 8)``."""
        xf = self._flat(x, "x")
        codes = torch.empty(xf.shape[0], dtype=torch.int32, device=xf.device)
        cpu = xf.device.type == "cpu"
        _encode_all(xf, lookup_on(xf.device), codes, self.backend if cpu else "torch")
        return codes.reshape(*x.shape[:-1], x.shape[-1] // 8)

    def quantize_validated(self, x: Tensor) -> Tensor:
        """:meth:`quantize` of a float32 ``x`` ``(..., n)`` (``n % 8 == 0``) that the caller has already checked
        (finite: BlockLDLQ checks its matrix once, not each block): no checks, hence no host synchronisation on a
        device. CPU tensors with the Numba backend take the same search as :meth:`quantize`; every other tensor
        takes :func:`search_on_device` (on the CPU the torch search of :func:`encode_dense`). Returns int32
        ``(..., n // 8)``."""
        xf = x.detach().to(torch.float32).reshape(-1, 8).contiguous()
        if xf.device.type == "cpu" and self.backend == "numba":
            codes = torch.empty(xf.shape[0], dtype=torch.int32, device=xf.device)
            _encode_all(xf, self._t, codes, "numba")
        else:
            codes = search_on_device(xf, lookup_on(xf.device))
        return codes.reshape(*x.shape[:-1], x.shape[-1] // 8)

    def dequantize_validated(self, codes: Tensor) -> Tensor:
        """:meth:`dequantize` of int32 or int64 codes known to lie in ``[0, 65535]`` (those of
        :meth:`quantize_validated`): no range check, hence no host synchronisation. Returns float32
        ``(..., 8 m)``."""
        flat = lookup_on(codes.device).codebook.index_select(0, codes.reshape(-1))
        return flat.reshape(*codes.shape[:-1], codes.shape[-1] * 8)

    def fused_ldlq_available(self, x: Tensor) -> bool:
        """Whether :meth:`fused_ldlq_chunk` runs for tensors like ``x``: CPU tensors with the Numba backend (the
        compiled chunk), CUDA tensors where the Triton kernels are enabled (the chunk kernel of
        :func:`caldera.quantizers.e8p_triton.ldlq_chunk`; :func:`caldera.quantizers.e8p_triton.enabled_on_cuda`)."""
        if x.device.type == "cuda":
            from caldera.quantizers import e8p_triton

            return e8p_triton.enabled_on_cuda()
        return self.backend == "numba" and x.device.type == "cpu" and _numba_ldlq_kernel() is not None

    def fused_ldlq_chunk(
        self, F: Tensor | None, Lc: Tensor, W: Tensor, W_hat: Tensor, delta: Tensor, codes: Tensor
    ) -> None:
        """BlockLDLQ inside one chunk of columns, compiled (:func:`caldera.quantizers.e8p_kernel._ldlq_chunk`;
        the shapes and the recurrence are documented there). CPU tensors: float32 ``W``, ``W_hat``, ``delta``
        ``(n, c)``, ``F`` ``(n, c)`` (the later chunks' feedback) or None (none yet), ``Lc`` ``(c, c)``, int32
        ``codes`` ``(n, c // 8)``; each may be a strided view with unit stride along its rows (a column slice of
        the whole matrix), written in place. Rows are independent: they are split over
        ``torch.get_num_threads()`` threads (the kernel releases the GIL), which does not change the result.
        Tensors off the CPU, or with the torch backend, take the Triton chunk kernel
        (:func:`caldera.quantizers.e8p_triton.ldlq_chunk`: one program per tile of rows, the in-chunk feedback
        summed in float32; same contract).
        """
        if W.device.type != "cpu" or self.backend != "numba":
            from caldera.quantizers import e8p_triton

            e8p_triton.ldlq_chunk(F, Lc, W, W_hat, delta, codes, lookup_on(W.device))
            return
        kernel, cb, key_to_index, sum_odd, n12_abs = _numba_ldlq_kernel()
        n = W.shape[0]
        has_F = F is not None
        arrays = [t.numpy() for t in (F if has_F else W, Lc, W, W_hat, delta, codes)]
        workers = torch.get_num_threads()
        if workers <= 1 or n < _NUMBA_SPLIT_ROWS:
            kernel(arrays[0], has_F, arrays[1], arrays[2], cb, key_to_index, sum_odd, n12_abs, *arrays[3:])
            return
        step = -(-n // workers)
        jobs = [
            _pool(workers).submit(
                kernel, arrays[0][a : a + step], has_F, arrays[1], arrays[2][a : a + step], cb, key_to_index,
                sum_odd, n12_abs, arrays[3][a : a + step], arrays[4][a : a + step], arrays[5][a : a + step],
            )
            for a in range(0, n, step)
        ]
        for job in jobs:
            job.result()

    def dequantize(self, codes: Tensor) -> Tensor:
        """Codewords for integer codes ``(..., m)`` in ``[0, 65535]`` (any integer dtype, e.g. the uint16 a
        checkpoint stores) -> float32 ``(..., 8 m)``."""
        check_codes(codes, "codes", NUM_CODES)
        idx = codes.reshape(-1)
        if idx.dtype not in (torch.int32, torch.int64):
            idx = idx.to(torch.int64)
        flat = lookup_on(idx.device).codebook.index_select(0, idx)
        return flat.reshape(*codes.shape[:-1], codes.shape[-1] * 8)

    def round(self, x: Tensor) -> Tensor:
        """Nearest codewords, float32 with ``x``'s shape (``dequantize(quantize(x))``)."""
        return self.dequantize(self.quantize(x)).reshape(x.shape)

    @staticmethod
    def pack_codes(codes: Tensor) -> Tensor:
        """``(..., m)`` integer codes in ``[0, 65535]`` -> ``(..., 2 m)`` uint8, little-endian (low byte first)."""
        check_codes(codes, "codes", NUM_CODES)
        c = codes.to(torch.int32)
        packed = torch.stack(((c & 0xFF), (c >> 8)), dim=-1).to(torch.uint8)
        return packed.reshape(*codes.shape[:-1], codes.shape[-1] * 2)

    @staticmethod
    def unpack_codes(packed: Tensor) -> Tensor:
        """Inverse of :meth:`pack_codes`: ``(..., 2 m)`` uint8 -> ``(..., m)`` int32 codes."""
        if not isinstance(packed, Tensor) or packed.dtype != torch.uint8:
            raise ValueError(f"packed: expected a uint8 tensor, got {getattr(packed, 'dtype', type(packed))}")
        if packed.ndim == 0 or packed.shape[-1] % 2:
            raise ValueError(f"packed: last dimension must be even (2 bytes per code), got {tuple(packed.shape)}")
        p = packed.reshape(*packed.shape[:-1], packed.shape[-1] // 2, 2).to(torch.int32)
        return p[..., 0] | (p[..., 1] << 8)

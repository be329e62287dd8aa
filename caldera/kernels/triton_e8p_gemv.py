"""Triton batch-1..4 product with a matrix stored as E8P codes: ``y = x (s ⊙ Q)ᵀ`` on CUDA cores, no ``tl.dot``.

* :func:`repack` / :func:`unpack` — the codes of Q (n, m) (16-bit values in an integer tensor), rearranged once
  (offline, when a layer is loaded) into int16 tiles of ``(BLOCK_N, BLOCK_M)`` codes stored contiguously in the
  order the programs read them, so that each program streams whole tiles with wide loads; ``unpack`` is the exact
  inverse (the tests' round trip).
* :func:`decode_lut` / :func:`decode_codes` — the lookup tables the kernel decodes with, and a kernel that decodes
  codes with them (the tests check every one of the 65,536 codes against the codebook).
* :func:`e8p_gemv` — ``y = x (s ⊙ Q)ᵀ`` (B, n) float32 for ``x`` (B, 8m) float32 or float16 with ``B ≤ 4``.
* :func:`half_matmul_t` — ``x Rᵀ`` for a float16 ``R`` read as stored (no per-call float32 copy), ``B ≤ 4``.

Decode. With the E8P code ``c = (k << 8) | s`` (:mod:`caldera.quantizers.e8p`), codeword coordinate ``i`` is
``A[k, i] · S[s, i] + h[s]``: ``A`` (256, 8) the abs pattern of row ``k`` with the last coordinate negated when its
sum is odd, ``S`` (256, 8) the signs ``±1`` of the parity-corrected flip pattern of the low byte, ``h`` (256,) the
shift ``±¼`` (``+¼`` for an even number of set bits). Per code: two integer operations for ``k`` and ``s``, two
shifts for the row offsets of the two tables, two 16-byte table reads (8 float16 each, rows of 4 KiB tables that
stay in L1) and one 2-byte read of ``h``; per weight one fused multiply-add. Every table value is exact in float16.

Product. A program owns ``BLOCK_N`` rows and one of ``SPLIT`` slices of the code tiles; per tile it decodes
``(BLOCK_N, BLOCK_M, 8)`` weights in float32 and, for each of the ``B ≤ 4`` rows of ``x``, multiplies and sums over
the tile on CUDA cores (GemLite's manner for batch 1: no tensor-core padding of the batch to 16, and a float32
``x`` is used as it is, with no float16 split). Slices are summed with atomics when ``SPLIT > 1``. Larger batches
belong to the ``tl.dot`` kernel of :mod:`caldera.kernels.triton_e8p`.

Reference: :func:`caldera.kernels.e8p_decode.codes_matmul_reference`; tested under ``TRITON_INTERPRET=1`` on CPU
(``tests/kernels/test_triton_e8p_gemv.py``). GPU speed: not measured (``caldera/kernels/README.md``).

Requires ``triton``; importing this module without it raises ImportError.
"""

from __future__ import annotations

import functools

import torch
import triton
import triton.language as tl
from torch import Tensor

#: the largest batch this kernel takes (above it, tensor cores pay: :mod:`caldera.kernels.triton_e8p`)
MAX_BATCH = 4
BLOCK_N = 32
BLOCK_M = 32


@functools.lru_cache(maxsize=None)
def decode_lut(device: torch.device) -> tuple[Tensor, Tensor, Tensor]:
    """``(A, S, h)`` on ``device``: float16 ``(256, 8)`` signed abs patterns, float16 ``(256, 8)`` signs ``±1`` and
    float16 ``(256,)`` shifts ``±¼``, so that codeword ``i`` of code ``(k << 8) | s`` is ``A[k, i] S[s, i] + h[s]``
    (derived from the codebook of :func:`caldera.quantizers.e8p.lookup_on`)."""
    from caldera.quantizers.e8p import lookup_on

    t = lookup_on(torch.device("cpu"))
    A = t.abs_f.clone()
    A[:, 7] *= 1 - 2 * t.sum_odd.to(torch.float32)
    s = torch.arange(256, device="cpu")
    bits = (s[:, None] >> torch.arange(8, device="cpu")) & 1
    p = bits.sum(1) % 2
    flips = bits.clone()
    flips[:, 0] ^= p
    S = (1 - 2 * flips).to(torch.float32)
    h = 0.25 - 0.5 * p.to(torch.float32)
    return A.half().to(device), S.half().to(device), h.half().to(device)


def _tiles(n: int, m: int, block_n: int, block_m: int) -> tuple[int, int]:
    return triton.cdiv(n, block_n), triton.cdiv(m, block_m)


def repack(codes: Tensor, block_n: int = BLOCK_N, block_m: int = BLOCK_M) -> Tensor:
    """E8P codes (n, m), any integer dtype, values in [0, 65535] -> int16 ``(tn, tm, block_n, block_m)`` tiles
    (``tn = ⌈n / block_n⌉``, ``tm = ⌈m / block_m⌉``; the tails padded with code 0, which the kernel masks), each tile
    contiguous: the 16-bit code stored as its two's-complement int16."""
    n, m = codes.shape
    tn, tm = _tiles(n, m, block_n, block_m)
    c = torch.zeros(tn * block_n, tm * block_m, dtype=torch.int32, device=codes.device)
    c[:n, :m] = codes.to(torch.int32)
    c = torch.where(c >= 32768, c - 65536, c).to(torch.int16)
    return c.reshape(tn, block_n, tm, block_m).permute(0, 2, 1, 3).contiguous()


def unpack(packed: Tensor, n: int, m: int) -> Tensor:
    """Inverse of :func:`repack`: int16 tiles -> int32 codes ``(n, m)`` in [0, 65535]."""
    tn, tm, bn, bm = packed.shape
    c = packed.permute(0, 2, 1, 3).reshape(tn * bn, tm * bm).to(torch.int32) & 0xFFFF
    return c[:n, :m].contiguous()


@triton.jit
def _decode(c, A_ptr, S_ptr, h_ptr):
    """int32 16-bit codes (any 2-D tile shape ``(R, C)``) -> float32 codewords ``(R, C, 8)``."""
    col = tl.arange(0, 8)
    k = c >> 8
    s = c & 255
    a = tl.load(A_ptr + (k << 3)[:, :, None] + col[None, None, :]).to(tl.float32)
    sg = tl.load(S_ptr + (s << 3)[:, :, None] + col[None, None, :]).to(tl.float32)
    h = tl.load(h_ptr + s).to(tl.float32)
    return a * sg + h[:, :, None]


@triton.jit
def _decode_kernel(c_ptr, out_ptr, n, A_ptr, S_ptr, h_ptr, BLOCK: tl.constexpr):
    r = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    c = tl.load(c_ptr + r, mask=r < n, other=0)
    w = _decode(c[:, None], A_ptr, S_ptr, h_ptr)  # (BLOCK, 1, 8)
    col = tl.arange(0, 8)
    tl.store(out_ptr + r[:, None, None] * 8 + col[None, None, :], w, mask=(r < n)[:, None, None])


def decode_codes(codes: Tensor, block: int = 256) -> Tensor:
    """int32 codes (N,) -> float32 codewords (N, 8) by the kernel's table decode."""
    codes = codes.to(torch.int32).contiguous()
    out = torch.empty(codes.shape[0], 8, device=codes.device)
    A, S, h = decode_lut(codes.device)
    if codes.numel():
        _decode_kernel[(triton.cdiv(codes.shape[0], block),)](codes, out, codes.shape[0], A, S, h, BLOCK=block)
    return out


@triton.jit
def _emit(ptr, v, mask, SPLIT: tl.constexpr):
    """Write one output row slice: a store, or an atomic add when ``SPLIT > 1`` programs share it."""
    if SPLIT > 1:
        tl.atomic_add(ptr, v, mask=mask)
    if SPLIT == 1:
        tl.store(ptr, v, mask=mask)


@triton.jit
def _gemv_kernel(
    x_ptr, sxb, p_ptr, s_ptr, s_row, y_ptr, syb, n, m, tm, tiles_per_split, A_ptr, S_ptr, h_ptr,
    B: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_M: tl.constexpr, SPLIT: tl.constexpr,
):
    pn = tl.program_id(0)
    ps = tl.program_id(1)
    rn = tl.arange(0, BLOCK_N)
    rm = tl.arange(0, BLOCK_M)
    col = tl.arange(0, 8)
    acc0 = tl.zeros((BLOCK_N,), dtype=tl.float32)
    acc1 = tl.zeros((BLOCK_N,), dtype=tl.float32)
    acc2 = tl.zeros((BLOCK_N,), dtype=tl.float32)
    acc3 = tl.zeros((BLOCK_N,), dtype=tl.float32)
    t0 = ps * tiles_per_split
    for tt in range(0, tiles_per_split):
        t = t0 + tt  # past the last tile (the last slice's remainder): masked, x reads 0
        tile = p_ptr + (pn * tm + t) * (BLOCK_N * BLOCK_M)
        live = tl.full((BLOCK_N, BLOCK_M), t, tl.int32) < tm
        c = tl.load(tile + rn[:, None] * BLOCK_M + rm[None, :], mask=live, other=0).to(tl.int32) & 0xFFFF
        w = _decode(c, A_ptr, S_ptr, h_ptr)  # (BLOCK_N, BLOCK_M, 8) float32
        j = t * BLOCK_M + rm  # code columns; x columns 8j + i
        xmask = (j < m)[:, None]
        xo = (8 * j)[:, None] + col[None, :]
        x0 = tl.load(x_ptr + xo, mask=xmask, other=0.0).to(tl.float32)
        acc0 += tl.sum(tl.sum(w * x0[None, :, :], axis=2), axis=1)
        if B > 1:
            x1 = tl.load(x_ptr + sxb + xo, mask=xmask, other=0.0).to(tl.float32)
            acc1 += tl.sum(tl.sum(w * x1[None, :, :], axis=2), axis=1)
        if B > 2:
            x2 = tl.load(x_ptr + 2 * sxb + xo, mask=xmask, other=0.0).to(tl.float32)
            acc2 += tl.sum(tl.sum(w * x2[None, :, :], axis=2), axis=1)
        if B > 3:
            x3 = tl.load(x_ptr + 3 * sxb + xo, mask=xmask, other=0.0).to(tl.float32)
            acc3 += tl.sum(tl.sum(w * x3[None, :, :], axis=2), axis=1)
    rows = pn * BLOCK_N + rn
    rmask = rows < n
    sc = tl.load(s_ptr + rows * s_row, mask=rmask, other=0.0)
    _emit(y_ptr + rows, acc0 * sc, rmask, SPLIT)
    if B > 1:
        _emit(y_ptr + syb + rows, acc1 * sc, rmask, SPLIT)
    if B > 2:
        _emit(y_ptr + 2 * syb + rows, acc2 * sc, rmask, SPLIT)
    if B > 3:
        _emit(y_ptr + 3 * syb + rows, acc3 * sc, rmask, SPLIT)


@triton.jit
def _half_t_kernel(x_ptr, sxb, R_ptr, sr, y_ptr, syb, B, k, d, BP: tl.constexpr, BLOCK_K: tl.constexpr,
                   BLOCK_D: tl.constexpr):
    rk = tl.program_id(0) * BLOCK_K + tl.arange(0, BLOCK_K)
    rb = tl.arange(0, BP)
    acc = tl.zeros((BP, BLOCK_K), dtype=tl.float32)
    for d0 in range(0, d, BLOCK_D):
        rd = d0 + tl.arange(0, BLOCK_D)
        x = tl.load(x_ptr + rb[:, None] * sxb + rd[None, :], mask=(rb[:, None] < B) & (rd[None, :] < d), other=0.0)
        r = tl.load(R_ptr + rk[:, None] * sr + rd[None, :], mask=(rk[:, None] < k) & (rd[None, :] < d), other=0.0)
        acc += tl.sum(x.to(tl.float32)[:, None, :] * r.to(tl.float32)[None, :, :], axis=2)
    tl.store(y_ptr + rb[:, None] * syb + rk[None, :], acc, mask=(rb[:, None] < B) & (rk[None, :] < k))


def half_matmul_t(x: Tensor, R: Tensor, block_k: int = 16, block_d: int = 128) -> Tensor:
    """``x Rᵀ`` (B, k) float32 for ``x`` (B, d) float32 or float16 (``B ≤ 4``) and a float16 ``R`` (k, d), read as it
    is stored: each program multiplies ``BLOCK_K`` rows of R with x on CUDA cores in float32, so no float32 copy
    of R is made per call (the low-rank factor's ``t = h Rᵀ`` of the layer)."""
    B, d = x.shape
    if not 1 <= B <= MAX_BATCH or R.ndim != 2 or R.shape[1] != d:
        raise ValueError(f"half_matmul_t: x {tuple(x.shape)} (B ≤ {MAX_BATCH}) and R {tuple(R.shape)} do not match")
    x, R = x.contiguous(), R.contiguous()
    k = R.shape[0]
    y = torch.empty(B, k, device=x.device)
    _half_t_kernel[(triton.cdiv(k, block_k),)](x, x.stride(0), R, R.stride(0), y, y.stride(0), B, k, d,
                                               BP=MAX_BATCH, BLOCK_K=block_k, BLOCK_D=block_d)
    return y


def e8p_gemv(x: Tensor, packed: Tensor, n: int, m: int, scale: Tensor | float, split: int = 1) -> Tensor:
    """``y = x (s ⊙ Q)ᵀ`` (B, n) float32: ``x`` (B, 8m) float32 or float16, ``B ≤ 4``; ``packed`` the
    :func:`repack` tiles of Q's codes (n, m); ``scale`` a scalar or (n, 1) per-row scale; ``split`` slices of the
    tiles along the code columns (programs summed with atomics)."""
    B = x.shape[0]
    if x.ndim != 2 or x.shape[1] != 8 * m or not 1 <= B <= MAX_BATCH:
        raise ValueError(f"x: expected (B ≤ {MAX_BATCH}, {8 * m}), got {tuple(x.shape)}")
    tn, tm, bn, bm = packed.shape
    x = x.contiguous()
    s = torch.as_tensor(scale, dtype=torch.float32, device=x.device).reshape(-1)
    s_row = 1 if s.numel() == n else 0
    split = max(1, min(split, tm))
    per = triton.cdiv(tm, split)
    y = (torch.zeros if split > 1 else torch.empty)(B, n, device=x.device)
    A, S, h = decode_lut(x.device)
    _gemv_kernel[(tn, split)](
        x, x.stride(0), packed, s, s_row, y, y.stride(0), n, m, tm, per, A, S, h,
        B=B, BLOCK_N=bn, BLOCK_M=bm, SPLIT=split,
    )
    return y

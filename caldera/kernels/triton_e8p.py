"""Triton kernels: products with matrices stored as E8P or E8P-RVQ4 codes, decoded in registers, on tensor cores.

* :func:`e8p_matmul` — ``y = x (s ⊙ Q)ᵀ (+ t Lᵀ)`` (B, n) for codes of Q (n, d/8) and, optionally, a 16-bit
  ``L`` (n, k) with ``t = x Rᵀ`` (B, k) computed by the caller.
* :func:`e8p_matmul_t` — ``out (+)= t (s · M)`` (B, 8m) for codes of M (k, m): the low-rank factor ``L`` stored as
  the codes of ``Lᵀ``, as ``CompressedLinear`` holds it.

Decode (the scheme of QuIP#'s fast kernel, ``quip-sharp.md`` §7, written fresh for this code format): a code's
high byte indexes a 1 KiB lookup of packed abs patterns (:func:`caldera.kernels.e8p_decode.abs_nibbles`: one int32
per pattern, coordinate ``t`` in nibble ``t`` as ``u = A_t + 3.5`` ∈ 0..7); its low byte gives the sign flips,
spread by shifts and masks to ``7`` in each flipped nibble and applied to all 8 coordinates with one XOR (a
negated coordinate is ``u ^ 7``); coordinate ``t`` is then nibble ``t`` shifted into the top mantissa bits of the
float16 ``8.0`` (``0x4800 | u << 7`` is the float16 ``8 + u``: no integer-to-float conversion) minus the code's
float16 offset ``11.5 − h`` (``h = ±¼``). One 4-byte lookup read and ~15 integer operations per code, then a shift,
an AND, an OR and a float16 subtraction per weight; every value is exact in float16. No 8-entry gathers, no
dense Q.

Products (``tl.dot``: tensor-core mma, fp16 in, fp32 accumulate): a program of :func:`e8p_matmul` owns
``BLOCK_N`` output rows (and one of ``SPLIT`` slices of the code columns, accumulated with atomics); per step it
loads a (BLOCK_N, BLOCK_M) tile of codes (the only large read: 2 bytes per 8 weights, 4 for E8P-RVQ4) and, for
each coordinate ``t``, decodes the (BLOCK_N, BLOCK_M) weights ``Q[:, 8j + t]`` and multiplies them with ``x[:, 8j
+ t]`` transposed, (BLOCK_M, BP) — 8 dots per step, no reshapes. The batch is padded to ``BP ≥ 16`` columns (the
mma's minimum; at batch 1 the padding costs tensor-core cycles only). float32 inputs are split as ``x = 2^e (hi +
lo)`` with ``hi``, ``lo`` float16 (:func:`split_half`), each its own dot, so the product keeps float32 accuracy; a
float16 ``x`` is used as it is (one dot). E8P-RVQ4 codes ``(c1 << 16) | c2`` accumulate their two stages apart,
``acc1 + acc2 / 3.45`` at the end (each stage exact in fp16).

Reference: :func:`caldera.kernels.e8p_decode.codes_matmul_reference`; tested under ``TRITON_INTERPRET=1`` on CPU
(``tests/kernels/test_triton_e8p.py``) and on CUDA by its ``gpu``-marked tests. GPU speed: see
``caldera/kernels/README.md`` (what has and has not been measured).

Requires ``triton`` (``pip install caldera[cuda]``); importing this module without it raises ImportError.
"""

from __future__ import annotations

import functools

import torch
import triton
import triton.language as tl
from torch import Tensor

from caldera.kernels.e8p_decode import abs_nibbles, check_quantizer

#: tl.dot's smallest block dimension
MIN_DOT = 16


@triton.jit
def _e8p_nibbles(c, abs_ptr):
    """16-bit codes ``c`` (int32 tile) -> (packed int32: nibble t = u_t with the signs applied, the fp16 offset
    ``11.5 − h``); weight t = ``fp16(8 + u_t) − offset`` (:func:`_weight`)."""
    s = c & 255
    p = s ^ (s >> 4)
    p = p ^ (p >> 2)
    p = (p ^ (p >> 1)) & 1
    m = s ^ p
    m = (m | (m << 12)) & 0x000F000F
    m = (m | (m << 6)) & 0x03030303
    m = (m | (m << 3)) & 0x11111111
    packed = tl.load(abs_ptr + ((c >> 8) & 255)) ^ (m * 7)
    off = (11.25 + 0.5 * p.to(tl.float32)).to(tl.float16)
    return packed, off


@triton.jit
def _weight(u7, off):
    """float16 ``8 + u − off`` from ``u7 = u << 7`` (int32, u in 0..7): ``0x4800 | u << 7`` is the float16 ``8 + u``
    (exponent of 8, u in the mantissa's top bits), so no integer-to-float conversion runs; exact."""
    return (u7 | 0x4800).to(tl.int16).to(tl.float16, bitcast=True) - off


@triton.jit
def _coord(packed, off, T: tl.constexpr):
    """Weight ``T`` (0..7) of each code: nibble T of ``packed`` moved to bits 7..9 by one shift."""
    if 4 * T >= 7:
        u7 = (packed >> (4 * T - 7)) & 0x380
    else:
        u7 = (packed << (7 - 4 * T)) & 0x380
    return _weight(u7, off)


@triton.jit
def _rows_kernel(
    x_ptr, codes_ptr, abs_ptr, scale_ptr, xs_ptr, l_ptr, t_ptr, ts_ptr, y_ptr,
    N, M, K, B, stride_x, stride_c, stride_y, stride_l, stride_t,
    BP: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_K: tl.constexpr,
    SPLIT: tl.constexpr, PER_ROW: tl.constexpr, HAS_LR: tl.constexpr, LO: tl.constexpr, STAGES: tl.constexpr,
    INV_RS: tl.constexpr,
):  # fmt: skip
    """``y[b, rows] (+)= s · xs · Σ_j Q[rows, j] x[b, j] (+ ts · Σ_k L[rows, k] t[b, k])``; x (and t) as float16
    rows, ``B`` hi rows then (``LO``) ``B`` lo rows."""
    pid_n = tl.program_id(0)
    pid_s = tl.program_id(1)
    rows = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rmask = rows < N
    bb = tl.arange(0, BP)
    bmask = bb < B
    jj = tl.arange(0, BLOCK_M)
    acc1 = tl.zeros((BLOCK_N, BP), dtype=tl.float32)
    acc1l = tl.zeros((BLOCK_N, BP), dtype=tl.float32)
    acc2 = tl.zeros((BLOCK_N, BP), dtype=tl.float32)
    acc2l = tl.zeros((BLOCK_N, BP), dtype=tl.float32)
    per_split = tl.cdiv(tl.cdiv(M, BLOCK_M), SPLIT) * BLOCK_M
    m_lo = pid_s * per_split
    for m0 in range(m_lo, m_lo + per_split, BLOCK_M):
        cols = m0 + jj
        cmask = cols < M
        c = tl.load(codes_ptr + rows[:, None] * stride_c + cols[None, :], mask=rmask[:, None] & cmask[None, :],
                    other=0).to(tl.int32)  # fmt: skip
        if STAGES == 2:
            pk1, of1 = _e8p_nibbles((c >> 16) & 0xFFFF, abs_ptr)
            pk2, of2 = _e8p_nibbles(c & 0xFFFF, abs_ptr)
        else:
            pk1, of1 = _e8p_nibbles(c & 0xFFFF, abs_ptr)
        xmask = cmask[:, None] & bmask[None, :]
        for t in tl.static_range(8):
            xp = x_ptr + bb[None, :] * stride_x + (cols * 8 + t)[:, None]
            xh = tl.load(xp, mask=xmask, other=0.0)  # (BLOCK_M, BP) float16: x[b, 8j + t]
            w1 = _coord(pk1, of1, t)  # (BLOCK_N, BLOCK_M) float16: Q[rows, 8j + t]
            acc1 = tl.dot(w1, xh, acc1)
            if LO:
                xl = tl.load(xp + B * stride_x, mask=xmask, other=0.0)
                acc1l = tl.dot(w1, xl, acc1l)
            if STAGES == 2:
                w2 = _coord(pk2, of2, t)
                acc2 = tl.dot(w2, xh, acc2)
                if LO:
                    acc2l = tl.dot(w2, xl, acc2l)
    acc = acc1 + acc1l
    if STAGES == 2:
        acc += (acc2 + acc2l) * INV_RS
    if PER_ROW:
        acc = acc * tl.load(scale_ptr + rows, mask=rmask, other=0.0)[:, None]
    else:
        acc = acc * tl.load(scale_ptr)
    acc = acc * tl.load(xs_ptr)
    if HAS_LR:
        if pid_s == 0:
            lr = tl.zeros((BLOCK_N, BP), dtype=tl.float32)
            lrl = tl.zeros((BLOCK_N, BP), dtype=tl.float32)
            for k0 in range(0, K, BLOCK_K):
                ks = k0 + tl.arange(0, BLOCK_K)
                kmask = ks < K
                lt = tl.load(l_ptr + rows[:, None] * stride_l + ks[None, :], mask=rmask[:, None] & kmask[None, :],
                             other=0.0)  # fmt: skip
                tp = t_ptr + bb[None, :] * stride_t + ks[:, None]
                tmask = kmask[:, None] & bmask[None, :]
                lr = tl.dot(lt, tl.load(tp, mask=tmask, other=0.0), lr)
                if LO:
                    lrl = tl.dot(lt, tl.load(tp + B * stride_t, mask=tmask, other=0.0), lrl)
            acc += (lr + lrl) * tl.load(ts_ptr)
    yp = y_ptr + bb[None, :] * stride_y + rows[:, None]
    ymask = rmask[:, None] & bmask[None, :]
    if SPLIT == 1:
        tl.store(yp, acc, mask=ymask)
    else:
        tl.atomic_add(yp, acc, mask=ymask)


@triton.jit
def _cols_kernel(
    t_ptr, codes_ptr, abs_ptr, scale_ptr, ts_ptr, out_ptr,
    K, M, B, stride_t, stride_c, stride_o,
    BP: tl.constexpr, BLOCK_K: tl.constexpr, BLOCK_M: tl.constexpr, LO: tl.constexpr, STAGES: tl.constexpr,
    INV_RS: tl.constexpr,
):  # fmt: skip
    """``out[b, 8j + u] += s · ts · Σ_k t[b, k] M[k, 8j + u]`` for the program's BLOCK_M code columns ``j``."""
    pid = tl.program_id(0)
    cols = pid * BLOCK_M + tl.arange(0, BLOCK_M)
    cmask = cols < M
    bb = tl.arange(0, BP)
    bmask = bb < B
    t8 = tl.arange(0, 8)
    acc1 = tl.zeros((BP, BLOCK_M * 8), dtype=tl.float32)
    acc2 = tl.zeros((BP, BLOCK_M * 8), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        ks = k0 + tl.arange(0, BLOCK_K)
        kmask = ks < K
        c = tl.load(codes_ptr + ks[:, None] * stride_c + cols[None, :], mask=kmask[:, None] & cmask[None, :],
                    other=0).to(tl.int32)  # fmt: skip
        tp = t_ptr + bb[:, None] * stride_t + ks[None, :]
        tmask = bmask[:, None] & kmask[None, :]
        th = tl.load(tp, mask=tmask, other=0.0)  # (BP, BLOCK_K) float16
        if STAGES == 2:
            pk, of = _e8p_nibbles((c >> 16) & 0xFFFF, abs_ptr)
        else:
            pk, of = _e8p_nibbles(c & 0xFFFF, abs_ptr)
        w = _weight(((pk[:, :, None] >> (4 * t8)[None, None, :]) & 7) << 7, of[:, :, None])
        w = tl.reshape(w, (BLOCK_K, BLOCK_M * 8))  # M[ks, 8 cols + u], row-major: column 8j + u
        acc1 = tl.dot(th, w, acc1)
        if LO:
            tl_ = tl.load(tp + B * stride_t, mask=tmask, other=0.0)
            acc1 = tl.dot(tl_, w, acc1)
        if STAGES == 2:
            pk2, of2 = _e8p_nibbles(c & 0xFFFF, abs_ptr)
            w2 = _weight(((pk2[:, :, None] >> (4 * t8)[None, None, :]) & 7) << 7, of2[:, :, None])
            w2 = tl.reshape(w2, (BLOCK_K, BLOCK_M * 8))
            acc2 = tl.dot(th, w2, acc2)
            if LO:
                acc2 = tl.dot(tl_, w2, acc2)
    acc = acc1
    if STAGES == 2:
        acc += acc2 * INV_RS
    acc = acc * (tl.load(scale_ptr) * tl.load(ts_ptr))
    oc = pid * BLOCK_M * 8 + tl.arange(0, BLOCK_M * 8)
    op = out_ptr + bb[:, None] * stride_o + oc[None, :]
    omask = bmask[:, None] & (oc < M * 8)[None, :]
    tl.store(op, tl.load(op, mask=omask, other=0.0) + acc, mask=omask)


@functools.lru_cache(maxsize=None)
def _abs_nibbles_on(device: str) -> Tensor:
    return abs_nibbles().to(device)


@functools.lru_cache(maxsize=None)
def _one(device: str) -> Tensor:
    return torch.ones(1, dtype=torch.float32, device=device)


def split_half(x: Tensor) -> tuple[Tensor, Tensor, bool]:
    """``x`` (B, d) -> (``xh`` float16, ``xs`` (1,) float32, ``lo``): ``x = xs · (xh[:B] + xh[B:])`` with ``xh``
    (2B, d) when ``lo`` (a float32/bfloat16 ``x``: ``xs = 2^e`` brings ``max|x|`` below 256, ``hi`` is its float16
    rounding, ``lo`` the float16 rounding of the rest: float32 accuracy, no host sync), or ``x`` itself, (B, d),
    with ``xs = 1`` for a float16 ``x``."""
    if x.dtype == torch.float16:
        return x.contiguous(), _one(str(x.device)), False
    xf = x.float()
    e = torch.frexp(xf.abs().amax())[1]  # max|x| < 2^e
    xs = torch.ldexp(torch.ones((), device=x.device), (e - 8).float())
    xn = xf / xs
    hi = xn.half()
    return torch.cat([hi, (xn - hi.float()).half()]).contiguous(), xs.reshape(1), True


def _codes_view(codes: Tensor, quantizer: str) -> Tensor:
    stages, _ = check_quantizer(quantizer)
    if codes.dtype == torch.uint16:
        codes = codes.view(torch.int16)
    elif codes.dtype == torch.uint32:
        codes = codes.view(torch.int32)
    elif codes.dtype not in (torch.int16, torch.int32, torch.int64):
        raise ValueError(f"codes: an integer tensor of 16-bit (E8P) or 32-bit (E8P-RVQ4) codes, got {codes.dtype}")
    if stages == 2 and codes.element_size() < 4:
        raise ValueError(f"{quantizer} codes are 32 bits; got {codes.dtype}")
    return codes.contiguous()


def _scale(scale: Tensor | float, n: int, device: torch.device) -> tuple[Tensor, bool]:
    s = torch.as_tensor(scale, dtype=torch.float32, device=device).reshape(-1).contiguous()
    if s.numel() not in (1, n):
        raise ValueError(f"scale: expected a scalar or ({n}, 1), got {s.numel()} values")
    return s, s.numel() > 1


def _check_launch(kernel: str, B: int, **blocks: int) -> None:
    if not 1 <= B <= 16:
        raise ValueError(f"{kernel} is a small-batch kernel (1 ≤ B ≤ 16), got B={B}; dequantize and use a GEMM")
    for name, v in blocks.items():
        if v < MIN_DOT or v & (v - 1):
            raise ValueError(f"{name}={v}: a power of two ≥ {MIN_DOT}")


def _bp(B: int) -> int:
    return max(MIN_DOT, triton.next_power_of_2(B))


def e8p_matmul(
    x: Tensor,
    codes: Tensor,
    scale: Tensor | float,
    L: Tensor | None = None,
    t: Tensor | None = None,
    *,
    quantizer: str = "e8p",
    block_n: int = 32,
    block_m: int = 32,
    split: int = 2,
    num_warps: int = 4,
) -> Tensor:
    """``y = x (s ⊙ Q)ᵀ (+ t Lᵀ)`` (B, n) float32.

    ``x`` (B, 8m) float32/bfloat16 (split into two float16 parts: float32 accuracy) or float16 (used as is);
    ``codes`` (n, m) integer holding the codes of Q (``quantizer`` ``"e8p"``: 16-bit, ``"e8p-rvq4"``: 32-bit);
    ``scale`` scalar or (n, 1); ``L`` (n, k) float16 and ``t`` (B, k) (any float dtype, split like ``x``) or both
    None. B ≤ 16; ``block_n``, ``block_m`` powers of two ≥ 16 (the mma's minimum). All tensors on one device
    (CUDA, or CPU under ``TRITON_INTERPRET=1``)."""
    if x.ndim != 2 or codes.ndim != 2 or x.shape[1] != 8 * codes.shape[1]:
        raise ValueError(f"x {tuple(x.shape)} and codes {tuple(codes.shape)}: expected (B, 8m) and (n, m)")
    n, m = codes.shape
    B = x.shape[0]
    _check_launch("e8p_matmul", B, block_n=block_n, block_m=block_m)
    if split < 1:
        raise ValueError(f"split={split}: ≥ 1")
    stages, rs = check_quantizer(quantizer)
    codes = _codes_view(codes, quantizer)
    dev = x.device
    xh, xs, lo = split_half(x)
    s, per_row = _scale(scale, n, dev)
    has_lr = L is not None or t is not None
    if has_lr:
        if L is None or t is None or L.ndim != 2 or L.shape[0] != n or t.shape != (B, L.shape[1]):
            raise ValueError("L (n, k) and t (B, k) must be given together with matching shapes")
        if L.dtype != torch.float16:
            raise ValueError(f"L: float16 (the mma's input), got {L.dtype}")
        th, ts, _ = split_half(t.float() if lo else t.half())  # t in x's layout: one LO flag for both
        L = L.contiguous()
        K = L.shape[1]
    else:
        L = th = xh  # unused pointers
        ts = xs
        K = 0
    y = (torch.zeros if split > 1 else torch.empty)((B, n), dtype=torch.float32, device=dev)
    BK = max(MIN_DOT, min(64, triton.next_power_of_2(max(K, 1))))
    grid = (triton.cdiv(n, block_n), split)
    _rows_kernel[grid](
        xh, codes, _abs_nibbles_on(str(dev)), s, xs, L, th, ts, y,
        n, m, K, B, xh.stride(0), codes.stride(0), y.stride(0), L.stride(0), th.stride(0),
        BP=_bp(B), BLOCK_N=block_n, BLOCK_M=block_m, BLOCK_K=BK, SPLIT=split, PER_ROW=per_row, HAS_LR=has_lr,
        LO=lo, STAGES=stages, INV_RS=1.0 / rs, num_warps=num_warps,
    )  # fmt: skip
    return y


def e8p_matmul_t(
    t: Tensor,
    codes: Tensor,
    scale: Tensor | float,
    quantizer: str = "e8p",
    *,
    out: Tensor | None = None,
    block_k: int = 16,
    block_m: int = 16,
    num_warps: int = 4,
) -> Tensor:
    """``out (+)= t (s · M)`` (B, 8m) float32 for ``t`` (B, k) (split like :func:`e8p_matmul`'s ``x``) and
    ``codes`` (k, m) of ``M`` (k, 8m) (``quantizer`` ``"e8p"`` or ``"e8p-rvq4"``), ``scale`` a scalar; ``out``
    (B, 8m) float32 contiguous, accumulated into, or None (a new zero tensor). B ≤ 16."""
    if t.ndim != 2 or codes.ndim != 2 or t.shape[1] != codes.shape[0]:
        raise ValueError(f"t {tuple(t.shape)} and codes {tuple(codes.shape)}: expected (B, k) and (k, m)")
    k, m = codes.shape
    B = t.shape[0]
    _check_launch("e8p_matmul_t", B, block_k=block_k, block_m=block_m)
    stages, rs = check_quantizer(quantizer)
    codes = _codes_view(codes, quantizer)
    dev = t.device
    s, _ = _scale(scale, 1, dev)
    if out is None:
        out = torch.zeros(B, 8 * m, dtype=torch.float32, device=dev)
    elif out.shape != (B, 8 * m) or out.dtype != torch.float32 or not out.is_contiguous():
        raise ValueError(f"out: a contiguous float32 ({B}, {8 * m}) tensor, got {out.dtype} {tuple(out.shape)}")
    th, ts, lo = split_half(t)
    _cols_kernel[(triton.cdiv(m, block_m),)](
        th, codes, _abs_nibbles_on(str(dev)), s, ts, out,
        k, m, B, th.stride(0), codes.stride(0), out.stride(0),
        BP=_bp(B), BLOCK_K=block_k, BLOCK_M=block_m, LO=lo, STAGES=stages, INV_RS=1.0 / rs, num_warps=num_warps,
    )  # fmt: skip
    return out

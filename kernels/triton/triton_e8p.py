"""Triton kernel: ``y = x (s ⊙ Q)ᵀ + (L t)ᵀ`` with Q read as E8P codes and decoded in registers.

``x`` (B, d) float32/16, ``codes`` (n, d/8) int16 view of the uint16 E8P codes, ``s`` scalar or per row, optional
``L`` (n, k) float16/32 and ``t = x Rᵀ`` (B, k) float32 (computed by the caller: it is a k×d product, tiny beside
n×d). Each program owns ``BLOCK_N`` output rows (and, with ``SPLIT > 1``, one of ``SPLIT`` slices of the code
columns, accumulated with atomics); per step it loads a (BLOCK_N, BLOCK_M) tile of codes (2 bytes per 8 weights, the
only large read), with ``decode=0`` gathers each code's 8 weights from the float16 codebook (65,536 × 8 × 2 B = 1
MiB, which stays in L2) as one 16-byte row, and multiplies with the matching slice of x for all B rows at once. No
dense Q is formed. ``decode=1`` (default) instead takes each code's signed abs pattern from an 8 KiB fp32 table and
applies the 8 sign bits by XOR on the float bits.

Measured on one H100 (``benchmarks/gpu_kernels.py``, CUDA-graph kernel times, weights cycled past L2): the defaults
(``block_n=16, block_m=64, split=2, num_warps=4, decode=1``, best in two sweeps: 108 configs of decode 0/1, and the
72 of ``kernels/measured/``, which include the dropped variant below) take 52 µs for 4096×11008 at batch 1, i.e. 219
GB/s on the bytes read = 7 % of the measured 3.0 TB/s HBM copy bandwidth (dense fp16 36 µs, 84 %): the decode is
ALU-bound, far from the issue's 60 % target. A variant with fp16 weights and ``tl.dot`` was 10× slower (layout
conversions) and was dropped. ``decode=0`` took 57 µs.

Reference: :func:`caldera.kernels.tables.codes_matmul_reference`; tested under ``TRITON_INTERPRET=1`` on CPU
(``tests/kernels/test_kernels.py``).

Requires ``triton`` (``pip install caldera[cuda]``); importing this module without it raises ImportError.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from torch import Tensor

from caldera.kernels.tables import decode_tables


@triton.jit
def _e8p_mv_kernel(
    x_ptr, codes_ptr, cb_ptr, scale_ptr, l_ptr, t_ptr, y_ptr,
    N, M, K, stride_x, stride_y, stride_l, stride_t,
    BP: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_K: tl.constexpr,
    SPLIT: tl.constexpr, PER_ROW: tl.constexpr, HAS_LR: tl.constexpr, B: tl.constexpr, DECODE: tl.constexpr,
):  # fmt: skip
    pid_n = tl.program_id(0)
    pid_s = tl.program_id(1)
    rows = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rmask = rows < N
    bb = tl.arange(0, BP)
    bmask = bb < B
    jj = tl.arange(0, BLOCK_M)
    t8 = tl.arange(0, 8)
    kk = tl.arange(0, BLOCK_M * 8)
    acc = tl.zeros((BLOCK_N, BP), dtype=tl.float32)
    per_split = tl.cdiv(tl.cdiv(M, BLOCK_M), SPLIT) * BLOCK_M
    m_lo = pid_s * per_split
    for m0 in range(m_lo, m_lo + per_split, BLOCK_M):
        cols = m0 + jj
        cmask = cols < M
        c = tl.load(codes_ptr + rows[:, None] * M + cols[None, :], mask=rmask[:, None] & cmask[None, :], other=0)
        c = c.to(tl.int32) & 0xFFFF
        if DECODE == 0:  # one 16-byte row of the fp16 codebook per code (1 MiB table, L2)
            w = tl.load(cb_ptr + c[:, :, None] * 8 + t8[None, None, :]).to(tl.float32)  # (BLOCK_N, BLOCK_M, 8)
        else:  # signed abs pattern from the 8 KiB table (L1) and sign bits applied by XOR on the float bits
            hi = c >> 8
            s = c & 255
            p = s ^ (s >> 4)
            p = p ^ (p >> 2)
            p = (p ^ (p >> 1)) & 1
            flips = s ^ p
            a = tl.load(cb_ptr + hi[:, :, None] * 8 + t8[None, None, :])  # fp32 signed abs, (BLOCK_N, BLOCK_M, 8)
            sg = ((flips[:, :, None] >> t8[None, None, :]) & 1) << 31
            w = (a.to(tl.int32, bitcast=True) ^ sg).to(tl.float32, bitcast=True)
            w = w + (0.25 - 0.5 * p.to(tl.float32))[:, :, None]
        w = tl.reshape(w, (BLOCK_N, BLOCK_M * 8))
        xk = m0 * 8 + kk
        xt = tl.load(
            x_ptr + bb[:, None] * stride_x + xk[None, :], mask=bmask[:, None] & (xk < M * 8)[None, :], other=0.0
        ).to(tl.float32)  # (BP, BLOCK_M*8)
        acc += tl.sum(w[:, None, :] * xt[None, :, :], axis=2)
    if PER_ROW:
        acc = acc * tl.load(scale_ptr + rows, mask=rmask, other=0.0)[:, None]
    else:
        acc = acc * tl.load(scale_ptr)
    if HAS_LR:
        if pid_s == 0:
            for k0 in range(0, K, BLOCK_K):
                ks = k0 + tl.arange(0, BLOCK_K)
                kmask = ks < K
                lt = tl.load(l_ptr + rows[:, None] * stride_l + ks[None, :], mask=rmask[:, None] & kmask[None, :],
                             other=0.0).to(tl.float32)  # fmt: skip
                tt = tl.load(t_ptr + bb[:, None] * stride_t + ks[None, :], mask=bmask[:, None] & kmask[None, :],
                             other=0.0).to(tl.float32)  # fmt: skip
                acc += tl.sum(lt[:, None, :] * tt[None, :, :], axis=2)
    yp = y_ptr + bb[None, :] * stride_y + rows[:, None]
    ymask = rmask[:, None] & bmask[None, :]
    if SPLIT == 1:
        tl.store(yp, acc, mask=ymask)
    else:
        tl.atomic_add(yp, acc, mask=ymask)


_CB: dict = {}


def _table(device: torch.device, decode: int) -> Tensor:
    key = (str(device), decode)
    if key not in _CB:
        t = decode_tables()
        tab = t.codebook_f16 if decode == 0 else t.A
        _CB[key] = tab.to(device).contiguous()
    return _CB[key]


def e8p_matmul(
    x: Tensor,
    codes: Tensor,
    scale: Tensor | float,
    L: Tensor | None = None,
    t: Tensor | None = None,
    *,
    block_n: int = 16,
    block_m: int = 64,
    split: int = 2,
    num_warps: int = 4,
    decode: int = 1,
) -> Tensor:
    """``y = x (s ⊙ Q)ᵀ (+ t Lᵀ)`` (B, n) float32. ``x`` (B, 8m), ``codes`` (n, m) integer (uint16/int16/
    int32 holding 16-bit E8P codes), ``scale`` scalar or (n, 1) tensor, ``L`` (n, k) and ``t`` (B, k) or None.
    All tensors on one device (CUDA, or CPU under ``TRITON_INTERPRET=1``)."""
    if x.ndim != 2 or codes.ndim != 2 or x.shape[1] != 8 * codes.shape[1]:
        raise ValueError(f"x {tuple(x.shape)} and codes {tuple(codes.shape)}: expected (B, 8m) and (n, m)")
    n, m = codes.shape
    B = x.shape[0]
    if B > 16:
        raise ValueError(f"e8p_matmul is a small-batch kernel (B ≤ 16), got B={B}; dequantize and use a GEMM")
    dev = x.device
    if codes.dtype == torch.uint16:
        codes = codes.view(torch.int16)
    elif codes.dtype not in (torch.int16, torch.int32):
        codes = codes.to(torch.int32)
    codes = codes.contiguous()
    if decode not in (0, 1):
        raise ValueError(f"decode={decode}; accepted: 0 (fp16 codebook rows), 1 (abs table + sign bits)")
    x = x.contiguous()
    s = torch.as_tensor(scale, dtype=torch.float32, device=dev).reshape(-1).contiguous()
    per_row = s.numel() > 1
    if per_row and s.numel() != n:
        raise ValueError(f"scale: expected a scalar or ({n}, 1), got {s.numel()} values")
    has_lr = L is not None
    if has_lr:
        if t is None or L.shape[0] != n or t.shape != (B, L.shape[1]):
            raise ValueError("L (n, k) and t (B, k) must be given together with matching shapes")
        L, t = L.contiguous(), t.float().contiguous()
        K = L.shape[1]
    else:
        L = t = s  # unused pointers
        K = 0
    y = (torch.zeros if split > 1 else torch.empty)((B, n), dtype=torch.float32, device=dev)
    BP = max(1, triton.next_power_of_2(B))
    BK = max(16, min(64, triton.next_power_of_2(max(K, 1))))
    grid = (triton.cdiv(n, block_n), split)
    _e8p_mv_kernel[grid](
        x, codes, _table(dev, decode), s, L, t, y,
        n, m, K, x.stride(0), y.stride(0), L.stride(0) if has_lr else 0, t.stride(0) if has_lr else 0,
        BP=BP, BLOCK_N=block_n, BLOCK_M=block_m, BLOCK_K=BK, SPLIT=split, PER_ROW=per_row, HAS_LR=has_lr, B=B,
        DECODE=decode,
        num_warps=num_warps,
    )  # fmt: skip
    return y

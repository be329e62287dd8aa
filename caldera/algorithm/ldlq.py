"""BlockLDLQ (QuIP / QuIP#), the Q update of Algorithm 1 (line 3, eq. 3 of the paper).

With ``H = L D Lᵀ`` from :func:`caldera.algorithm.ldl.block_ldl` (L unit block-lower-triangular, blocks of g = 8
columns), blocks are quantized from the last to the first (QuIP#'s order)::

    Ŵ_k = Q(W_k + (W_{>k} − Ŵ_{>k}) L_{>k,k})

so that ``W − Ŵ = ε L⁻¹`` and ``tr((W − Ŵ) H (W − Ŵ)ᵀ) = Σ_k tr(ε_k D_k ε_kᵀ)`` (quip-sharp.md §2).
The paper's column-wise form (eq. 3: ``Q = Q(W + (W − Q)M)``, ``mH = (M + I) D (M + I)ᵀ``, first column
first) is the same recurrence on the block-reversed problem (``order="forward"``).

Feedback from finished column chunks is applied lazily, one matmul per 128-column chunk (as GPTQ's
buffered update), so the sequential Python work is one small matmul and one quantizer call per block.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from caldera.algorithm.ldl import block_ldl
from caldera.quantizers.base import Quantizer, rms
from caldera.validation import check_finite, check_values

LDL_BLOCK = 8


@dataclass(frozen=True)
class QuantizedBackbone:
    """Q = scale · quantizer.dequantize(codes). Q: (n, d) float32; codes: (n, d // block_size)."""

    Q: Tensor
    codes: Tensor
    scale: Tensor


def _check_block(quantizer: Quantizer, d: int) -> None:
    if LDL_BLOCK % quantizer.block_size != 0:
        raise ValueError(f"quantizer block size {quantizer.block_size} must divide the LDL block {LDL_BLOCK}")
    if d % LDL_BLOCK != 0:
        raise ValueError(f"W has {d} columns; BlockLDLQ needs a multiple of {LDL_BLOCK} (pad the layer)")


def _block_coders(
    quantizer: Quantizer,
) -> tuple[Callable[[Tensor], Tensor], Callable[[Tensor], Tensor], bool]:
    """``(quantize, dequantize, unchecked)`` for the blocks of one matrix: the quantizer's unchecked pair where it
    has one (``quantize_validated`` / ``dequantize_validated``, E8P: no per-block checks, so no host
    synchronisation on a device; the caller checks the matrix once instead), else its checked ``quantize`` /
    ``dequantize``; ``unchecked`` says which."""
    enc = getattr(quantizer, "quantize_validated", None)
    dec = getattr(quantizer, "dequantize_validated", None)
    if enc is None or dec is None:
        return quantizer.quantize, quantizer.dequantize, False
    return enc, dec, True


def block_ldlq(
    W: Tensor, L: Tensor, quantizer: Quantizer, buffer: int = 128, fused: bool = True, checked: bool = False
) -> tuple[Tensor, Tensor]:
    """BlockLDLQ in reverse block order, in codebook units.

    Args:
        W: (n, d) float32 in codebook units (already divided by the scale).
        L: (d, d) unit block-lower-triangular factor of H (``block_ldl``).
        quantizer: any :class:`Quantizer` whose block size divides 8.
        buffer: columns per lazily-updated chunk (a multiple of 8).
        fused: run the blocks of each chunk in one compiled call where the quantizer has one (E8P with
            the Numba backend, CPU tensors; other quantizers and devices take the loop): the same recurrence,
            with the in-chunk feedback summed per row in float64 instead of by float32 matmuls, so a code can
            differ from the loop's only at a float tie. The compiled chunk reads and writes column slices of
            ``W``, ``Ŵ``, δ and the codes in place (no copies). ``False`` forces the loop.
        checked: ``W`` and ``L`` are known finite (the caller checked them). Otherwise the loop checks both
            once, one host synchronisation per matrix, before it quantizes blocks with the quantizer's unchecked
            pair (:func:`_block_coders`); with ``checked=True`` the loop (E8P on any device but the Numba CPU
            path) reads no value back to the host: no ``item``, ``nonzero``, ``bool`` or ``float`` of a tensor.
    Returns:
        W_hat: (n, d) float32 codewords; codes: (n, d // quantizer.block_size).
    """
    n, d = W.shape
    _check_block(quantizer, d)
    g = LDL_BLOCK
    buffer = max(g, buffer - buffer % g)
    W = W.float().contiguous()
    L = L.to(torch.float32)
    delta = torch.empty_like(W)  # W − Ŵ for finished blocks (each block written before it is read)
    W_hat = torch.empty_like(W)
    fused = fused and quantizer.fused_ldlq_available(W)
    if fused:  # the block loop below, compiled (E8P on the CPU), writing into column slices in place
        all_codes = torch.empty(n, d // quantizer.block_size, dtype=torch.int32, device=W.device)
        F = torch.empty(n, buffer, device=W.device)
        for cs in reversed(range(0, d, buffer)):
            ce = min(cs + buffer, d)
            Fc = None
            if ce < d:
                Fc = torch.matmul(delta[:, ce:], L[ce:, cs:ce], out=F[:, : ce - cs])
            quantizer.fused_ldlq_chunk(
                Fc, L[cs:ce, cs:ce], W[:, cs:ce], W_hat[:, cs:ce], delta[:, cs:ce],
                all_codes[:, cs // quantizer.block_size : ce // quantizer.block_size],
            )
        return W_hat, all_codes
    quantize, dequantize, unchecked = _block_coders(quantizer)
    if unchecked and not checked:
        check_finite(W, "W")
        check_finite(L, "L")
    codes: list[Tensor | None] = [None] * (d // g)
    for cs in reversed(range(0, d, buffer)):
        ce = min(cs + buffer, d)
        Wc = W[:, cs:ce].clone()
        if ce < d:
            Wc += delta[:, ce:] @ L[ce:, cs:ce]
        for bs in reversed(range(cs, ce, g)):
            be = bs + g
            x = Wc[:, bs - cs : be - cs]
            if be < ce:
                x = x + delta[:, be:ce] @ L[be:ce, bs:be]
            c = quantize(x)
            q = dequantize(c)
            W_hat[:, bs:be] = q
            delta[:, bs:be] = W[:, bs:be] - q
            codes[bs // g] = c
    return W_hat, torch.cat(codes, dim=1)  # type: ignore[arg-type]


def greedy_refine(
    W: Tensor, W_hat: Tensor, codes: Tensor, H: Tensor, quantizer: Quantizer, passes: int, checked: bool = False
) -> tuple[Tensor, Tensor]:
    """QuIP#'s greedy block-coordinate-descent passes (``quip_tune_iters``), reverse block order.

    Each block moves to ``Q(Ŵ_k + ((W − Ŵ) H)_{:,k} H_kk⁻¹)``, the quantized minimizer of the proxy loss in
    that block with the others fixed. Shapes: W, W_hat (n, d); codes (n, d // block_size); H (d, d).

    Off the Numba CPU path, E8P quantizes with its unchecked pair (:func:`_block_coders`; W and H checked once
    here unless ``checked``) and every block's update is applied whether or not it moved (a zero update leaves G,
    Ŵ and the codes as they are), so that nothing is read back to the host; elsewhere a block that did not move
    is skipped.
    """
    if passes == 0:
        return W_hat, codes
    quantize, dequantize, unchecked = _block_coders(quantizer)
    unchecked = unchecked and not quantizer.fused_ldlq_available(W)
    if not unchecked:
        quantize, dequantize = quantizer.quantize, quantizer.dequantize
    elif not checked:
        check_finite(W, "W")
        check_finite(H, "H")
    g = LDL_BLOCK
    d = W.shape[1]
    per = g // quantizer.block_size
    H = H.to(torch.float32)
    W_hat = W_hat.clone()
    codes = codes.clone()
    G = (W - W_hat) @ H  # gradient-like residual (W − Ŵ) H, kept up to date
    nb = d // g
    Hkk_inv = torch.linalg.inv(H.reshape(nb, g, nb, g).diagonal(dim1=0, dim2=2).permute(2, 0, 1))
    for _ in range(passes):
        for k in reversed(range(nb)):
            s = slice(k * g, (k + 1) * g)
            c = quantize(W_hat[:, s] + G[:, s] @ Hkk_inv[k])
            q = dequantize(c)
            dq = q - W_hat[:, s]
            if unchecked or bool(dq.any()):
                G -= dq @ H[s, :]
                W_hat[:, s] = q
                codes[:, k * per : (k + 1) * per] = c
    return W_hat, codes


def _reverse_blocks(d: int, device: torch.device) -> Tensor:
    return torch.arange(d, device=device).reshape(d // LDL_BLOCK, LDL_BLOCK).flip(0).reshape(-1)


def ldlq_quantize(
    A: Tensor,
    H: Tensor,
    quantizer: Quantizer,
    *,
    order: str = "reverse",
    refine_passes: int = 0,
    ldl: tuple[Tensor, Tensor] | None = None,
) -> QuantizedBackbone:
    """Quantize A (n, d) against the proxy loss of H (d, d, positive definite) with BlockLDLQ.

    The scale is ``rms(A) / quantizer.opt_scale`` (codebook RMS 1.03 for E8P). ``ldl`` may pass a
    precomputed ``block_ldl(H)`` (only valid for ``order="reverse"``) so that matrices sharing a Hessian,
    and outer iterations with an unchanged H, factor it once.
    """
    n, d = A.shape
    _check_block(quantizer, d)
    check_values(A, "A")
    check_values(H, "H")
    A, H = A.detach(), H.detach()  # codes are not differentiable: inputs that require grad are read as data
    scale = rms(A) / quantizer.opt_scale
    X = A.float() / scale
    if order == "forward":
        perm = _reverse_blocks(d, A.device)  # block reversal is an involution: it is its own inverse
        Hp = H[perm][:, perm]
        L, _ = block_ldl(Hp, LDL_BLOCK)
        W_hat, codes = block_ldlq(X[:, perm], L, quantizer)
        W_hat, codes = greedy_refine(X[:, perm], W_hat, codes, Hp, quantizer, refine_passes)
        W_hat = W_hat[:, perm]
        codes = codes.reshape(n, d // LDL_BLOCK, -1).flip(1).reshape(n, -1)
    elif order == "reverse":
        L, _ = ldl if ldl is not None else block_ldl(H, LDL_BLOCK)
        W_hat, codes = block_ldlq(X, L, quantizer)
        W_hat, codes = greedy_refine(X, W_hat, codes, H, quantizer, refine_passes)
    else:
        raise ValueError(f"order={order!r}; accepted: 'reverse' (QuIP#) or 'forward' (paper eq. 3)")
    return QuantizedBackbone(W_hat * scale, codes, scale)


def nearest_quantize(A: Tensor, quantizer: Quantizer) -> QuantizedBackbone:
    """Direct nearest-codeword rounding of A / scale (the "No LDLQ" ablation of App. G.1)."""
    quantizer.check_shape(A, "A")
    check_values(A, "A")
    scale = rms(A) / quantizer.opt_scale
    codes = quantizer.quantize(A.float() / scale)
    return QuantizedBackbone(quantizer.dequantize(codes) * scale, codes, scale)

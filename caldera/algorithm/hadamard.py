"""Randomized Hadamard transform (RHT), the incoherence pre-processing of CALDERA (paper §5 "Baselines").

Facts used (``quip-sharp.md`` §3, QuIP#):

* For a size ``n = K·2^p`` the orthonormal Hadamard transform is ``U_n = (H_K ⊗ H_{2^p}) / √n``, where
  ``H_{2^p}`` is the Sylvester matrix (``H_1 = [1]``, ``H_{2m} = [[H_m, H_m], [H_m, −H_m]]``) and ``H_K`` is a
  stored Hadamard matrix of order ``K ∈ {12, 20, 28, 36, 52, 60, 108, 116, 124, 140, 156, 172}`` from
  N. J. A. Sloane's library of Hadamard matrices (shipped as package data ``caldera/data/hadamard/hadK.txt``,
  ``H_K H_Kᵀ = K·I``). ``H_K`` is not symmetric, so ``U_n ≠ U_nᵀ`` in general; ``U_n U_nᵀ = I``.
* ``K`` is the first of ``[172, 156, 140, 124, 116, 108, 60, 52, 36, 28, 20, 12]`` with ``n % K == 0`` and
  ``n/K`` a power of two (this module falls through instead of asserting), else ``K = 1`` for ``n = 2^p``.
* With random signs ``S_U`` (d,), ``S_V`` (n,): ``Wr = U_nᵀ S_V W S_U U_d``, ``Hr = U_dᵀ S_U H S_U U_d``,
  ``tr(Wr Hr Wrᵀ) = tr(W H Wᵀ)``; inverse ``W = S_V U_n Wr U_dᵀ S_U``; inference
  ``y = S_V ⊙ [((x ⊙ S_U) U_d) Wrᵀ U_nᵀ]``.

Convention of :func:`hadamard_transform`: along ``dim`` every vector ``v`` is mapped to ``U_n v``; for
``dim=-1`` on a matrix that is ``x @ U_nᵀ``. ``transpose=True`` maps ``v`` to ``U_nᵀ v`` (``x @ U_n``), which
is also the inverse.

Speed (CPU): ``H_{2^p}`` is factored into Sylvester Kronecker factors of size ≤ 64
(``H_{2^p} = H_{2^a} ⊗ H_{2^b} ⊗ …``), so ``U_n = (H_K/√K) ⊗ (H_{2^a}/√2^a) ⊗ …``; each factor is a small
matmul over a reshaped view (2·f flops per element for a factor of size f). The CPU kernel works on
cache-sized blocks of the input (all factors applied while the block is in cache), which makes the transform
about one memory pass. A fresh output's page faults and an oversubscribed machine's OpenMP regions are the
other costs (``benchmarks/results/SETTINGS.md``).
"""

from __future__ import annotations

import functools
import math
import operator
from dataclasses import dataclass, field
from importlib import resources

import torch
from torch import Tensor

try:  # CUDA-only package (quip-sharp.md §3); optional.
    from fast_hadamard_transform import hadamard_transform as _fht
except ImportError:  # pragma: no cover - depends on the environment
    _fht = None

__all__ = [
    "SUPPORTED_K",
    "RHT",
    "hadamard_factor",
    "hadamard_transform",
    "inverse_hadamard_transform",
    "kronecker_factors",
    "load_hadamard",
    "random_signs",
]

#: Orders of the stored Hadamard matrices, in the order :func:`hadamard_factor` tries them.
SUPPORTED_K: tuple[int, ...] = (172, 156, 140, 124, 116, 108, 60, 52, 36, 28, 20, 12)
#: A Sylvester part 2^p with p ≤ this is applied as one factor; larger ones are split into factors ≤ 2^5.
_WHOLE_FACTOR_LOG2 = 6
_SPLIT_FACTOR_LOG2 = 5
#: Elements per block of the CPU kernel: row blocks (contiguous) and column blocks (strided, staged).
_ROW_BLOCK_ELEMS = 1 << 20
_COL_BLOCK_ELEMS = 1 << 18


# ----------------------------------------------------------------------------------------------------------
# Matrices and factorization
# ----------------------------------------------------------------------------------------------------------


@functools.lru_cache(maxsize=None)
def _load_hadamard_cached(K: int) -> Tensor:
    if K == 1:
        return torch.ones(1, 1, device="cpu")
    text = resources.files("caldera").joinpath("data", "hadamard", f"had{K}.txt").read_text()
    rows = [line.strip() for line in text.splitlines() if line.strip()]
    if len(rows) != K or any(len(r) != K or set(r) - {"+", "-"} for r in rows):
        raise ValueError(f"package data had{K}.txt is not a {K}×{K} matrix of '+'/'-'; reinstall caldera")
    return torch.tensor([[1.0 if c == "+" else -1.0 for c in r] for r in rows], dtype=torch.float32, device="cpu")


def load_hadamard(K: int) -> Tensor:
    """Stored Hadamard matrix ``H_K``: (K, K) float32 with ±1 entries and ``H_K H_Kᵀ = K·I``.

    ``K`` is 1 (``[[1]]``) or one of :data:`SUPPORTED_K` (Sloane's library, quip-sharp.md §3). The parsed
    matrix is cached; a fresh copy is returned so callers may modify it.
    """
    if not isinstance(K, int) or isinstance(K, bool) or (K != 1 and K not in SUPPORTED_K):
        accepted = sorted(SUPPORTED_K)
        raise ValueError(f"K={K!r} has no stored Hadamard matrix; accepted: 1 or one of {accepted}")
    return _load_hadamard_cached(K).clone()


def _check_size(n: object, name: str = "n") -> int:
    if isinstance(n, bool):
        raise ValueError(f"{name} must be a positive integer, got {n!r}")
    try:
        n = operator.index(n)
    except TypeError:
        raise ValueError(f"{name} must be a positive integer, got {n!r}") from None
    if n < 1:
        raise ValueError(f"{name} must be a positive integer, got {n}")
    return n


def _is_pow2(m: int) -> bool:
    return m >= 1 and m & (m - 1) == 0


def hadamard_factor(n: int) -> tuple[int, int]:
    """Return ``(K, p)`` with ``n = K·2^p`` for the transform size ``n`` (quip-sharp.md §3).

    Tries ``K`` in :data:`SUPPORTED_K` order, requiring ``n % K == 0`` and ``n/K`` a power of two (falls
    through otherwise), then ``K = 1`` when ``n`` is a power of two. Examples: 4096 → (1, 12),
    11008 → (172, 6), 5120 → (20, 8), 576 → (36, 4).

    Raises:
        ValueError: ``n < 1``, not an integer, or not of a supported form.
    """
    n = _check_size(n)
    for K in SUPPORTED_K:
        if n % K == 0 and _is_pow2(n // K):
            return K, (n // K).bit_length() - 1
    if _is_pow2(n):
        return 1, n.bit_length() - 1
    forms = ", ".join(str(k) for k in (1, *sorted(SUPPORTED_K)))
    raise ValueError(
        f"no Hadamard transform of size {n}: supported sizes are n = K·2^p with K in {{{forms}}} "
        "(pad the dimension or choose another size)"
    )


def kronecker_factors(n: int) -> tuple[int, ...]:
    """Sizes of the Kronecker factors the transform of size ``n`` applies: ``(K, 2^a, 2^b, …)``.

    ``K`` is left out when it is 1. The Sylvester part ``2^p`` is one factor when ``2^p ≤ 64`` and
    otherwise the fewest factors of size ≤ 32 with balanced exponents (measured fastest on CPU: small
    factors cost fewer flops, each extra factor one more in-cache pass). Examples: 4096 → (16, 16, 16),
    11008 → (172, 64), 1536 → (12, 16, 8), 28672 → (28, 32, 32), 1 → (). A factor of size f costs 2·f flops
    per element.
    """
    K, p = hadamard_factor(n)
    m = 0 if p == 0 else 1 if p <= _WHOLE_FACTOR_LOG2 else -(-p // _SPLIT_FACTOR_LOG2)
    exps = [p // m + (1 if i < p % m else 0) for i in range(m)] if m else []
    return ((K,) if K > 1 else ()) + tuple(1 << e for e in exps)


@functools.lru_cache(maxsize=256)
def factor_matrix(f: int, is_k: bool, transpose: bool, dtype: torch.dtype, device: torch.device) -> Tensor:
    """Orthonormal Kronecker factor ``H_f/√f`` (or its transpose) of size ``f``, contiguous, cached per (size,
    dtype, device): the stored ``K × K`` Hadamard matrix when ``is_k`` (a factor ``K`` of
    :func:`hadamard_factor`), else the Sylvester matrix of size ``f = 2^p`` (symmetric)."""
    if is_k:
        H = _load_hadamard_cached(f).to(torch.float64)
        H = H.T if transpose else H
    else:  # Sylvester, symmetric
        H = torch.ones(1, 1, dtype=torch.float64, device="cpu")
        while H.shape[0] < f:
            H = torch.cat([torch.cat([H, H], 1), torch.cat([H, -H], 1)], 0)
    return (H / math.sqrt(f)).to(dtype=dtype, device=device).contiguous()


def _factor_matrices(n: int, transpose: bool, dtype: torch.dtype, device: torch.device) -> list[Tensor]:
    K, _ = hadamard_factor(n)
    fs = kronecker_factors(n)
    return [factor_matrix(f, i == 0 and K > 1, transpose, dtype, device) for i, f in enumerate(fs)]


# ----------------------------------------------------------------------------------------------------------
# Kernel (no autograd)
# ----------------------------------------------------------------------------------------------------------


def _kron_apply(
    x: Tensor,
    dim: int,
    transpose: bool,
    pre: Tensor | None = None,
    post: Tensor | None = None,
    out: Tensor | None = None,
) -> Tensor:
    """``out = post ⊙ U(pre ⊙ x)`` along ``dim`` (U = U_n or U_nᵀ), blocked; ``pre``/``post`` are (n,).

    ``x`` is viewed as (A, n, C) and cut into blocks (R, n, Cb): whole rows when ``n·C`` is small (read and
    written in place when no scale is needed), else column strips staged through a contiguous scratch
    (pre-scaled on the way in, post-scaled on the way out). Factor t (size f, P = product of the factors
    before it, Q = after) is one matmul over the (R·P, f, Q·Cb) view. On non-CPU devices the whole tensor is
    one block. ``out`` may be ``x`` itself: blocks are disjoint and each is read before it is written.
    """
    n = x.shape[dim]
    A, C = math.prod(x.shape[:dim]), math.prod(x.shape[dim + 1 :])
    if out is None:
        out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    if x.numel() == 0:
        return out
    fs = kronecker_factors(n)
    mats = _factor_matrices(n, transpose, x.dtype, x.device)
    x3, out3 = x.reshape(A, n, C), out.view(A, n, C)
    pre3 = None if pre is None else pre.to(x.dtype).view(1, n, 1)
    post3 = None if post is None else post.to(x.dtype).view(1, n, 1)

    whole = x.device.type != "cpu"
    if n * C <= _ROW_BLOCK_ELEMS or whole:  # row blocks (R, n, C): contiguous slices of x3 and out3
        R, Cb = (A, C) if whole else (max(1, _ROW_BLOCK_ELEMS // (n * C)), C)
    else:  # column blocks (1, n, Cb): strided, always staged through the scratch
        R, Cb = 1, max(1, _COL_BLOCK_ELEMS // n)
    rows = Cb == C
    direct_in = rows and pre3 is None and len(fs) > 0 and x3.is_contiguous()
    direct_out = rows and post3 is None and len(fs) > 0 and (len(fs) > 1 or not direct_in)
    s = torch.empty(2, R * n * Cb, dtype=x.dtype, device=x.device)

    for a0 in range(0, A, R):
        for c0 in range(0, C, Cb):
            src, dst = x3[a0 : a0 + R, :, c0 : c0 + Cb], out3[a0 : a0 + R, :, c0 : c0 + Cb]
            r, cb = src.shape[0], src.shape[2]
            m = r * n * cb
            if direct_in:
                cur, k = src, 0
            else:
                cur, k = s[0, :m].view(src.shape), 1
                if pre3 is None:
                    cur.copy_(src)
                else:
                    torch.mul(src, pre3, out=cur)
            P = 1
            for t, (f, M) in enumerate(zip(fs, mats)):
                Q = n // (P * f)
                nxt = dst if direct_out and t == len(fs) - 1 else s[k, :m]
                if Q * cb == 1:
                    torch.mm(cur.reshape(r * P, f), M.T, out=nxt.view(r * P, f))
                else:
                    torch.matmul(M, cur.reshape(r * P, f, Q * cb), out=nxt.view(r * P, f, Q * cb))
                cur, k, P = nxt.view(src.shape), k ^ 1, P * f
            if direct_out:
                continue
            if post3 is None:
                dst.copy_(cur)
            else:
                torch.mul(cur, post3, out=dst)
    return out


def _fht_apply(x: Tensor, dim: int, transpose: bool) -> Tensor:
    """CUDA path: ``fast_hadamard_transform`` for the 2^p part, then the K×K factor as a matmul."""
    n = x.shape[dim]
    K, p = hadamard_factor(n)
    y = x.movedim(dim, -1).reshape(-1, K, 1 << p)
    y = _fht(y.contiguous(), 1.0 / math.sqrt(1 << p))
    if K > 1:
        y = torch.matmul(factor_matrix(K, True, transpose, x.dtype, x.device), y)
    return y.reshape(x.movedim(dim, -1).shape).movedim(-1, dim).contiguous()


def _forward(x: Tensor, dim: int, transpose: bool) -> Tensor:
    n = x.shape[dim]
    use_fht = _fht is not None and x.is_cuda and x.dtype != torch.float64 and n >= 8
    if use_fht and hadamard_factor(n)[1] >= 3:
        return _fht_apply(x, dim, transpose)
    return _kron_apply(x, dim, transpose)


class _HadamardFn(torch.autograd.Function):
    """y = U x along ``dim``; linear, so the backward is the transposed transform (twice differentiable)."""

    @staticmethod
    def forward(ctx, x: Tensor, dim: int, transpose: bool) -> Tensor:  # type: ignore[override]
        ctx.dim, ctx.transpose = dim, transpose
        return _forward(x, dim, transpose)

    @staticmethod
    def backward(ctx, grad: Tensor):  # type: ignore[override]
        return _HadamardFn.apply(grad, ctx.dim, not ctx.transpose), None, None


# ----------------------------------------------------------------------------------------------------------
# Public transform
# ----------------------------------------------------------------------------------------------------------


def _check_tensor(x: object, name: str) -> Tensor:
    if not isinstance(x, Tensor):
        raise ValueError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if not x.is_floating_point():
        raise ValueError(f"{name} must be a floating-point tensor (float32/float64), got {x.dtype}")
    return x


def _check_finite(x: Tensor, name: str) -> None:
    """NaN/Inf check; a sum (one cheap pass) first, the exact elementwise test only if it is not finite."""
    if not bool(torch.isfinite(x.detach().sum())) and not bool(torch.isfinite(x).all()):
        bad = int((~torch.isfinite(x)).sum())
        raise ValueError(f"{name} contains {bad} NaN/Inf entries; accepted: finite values only")


def _normalize_dim(x: Tensor, dim: int, name: str) -> int:
    if x.ndim == 0:
        raise ValueError(f"{name} must have at least one dimension, got a scalar")
    if isinstance(dim, bool) or not isinstance(dim, int) or not -x.ndim <= dim < x.ndim:
        raise ValueError(f"dim={dim!r} is out of range for {name} of shape {tuple(x.shape)}")
    return dim % x.ndim


def hadamard_transform(x: Tensor, dim: int = -1, transpose: bool = False) -> Tensor:
    """Apply the orthonormal Hadamard transform ``U_n = (H_K ⊗ H_{2^p}) / √n`` along ``dim``.

    Args:
        x: floating tensor (any shape, float32/float64/…); ``n = x.shape[dim]`` must factor as
            :func:`hadamard_factor` requires.
        dim: the axis transformed.
        transpose: False maps each vector ``v`` along ``dim`` to ``U_n v`` (for ``dim=-1``: ``x @ U_nᵀ``);
            True maps it to ``U_nᵀ v`` (``x @ U_n``), which is the inverse (``U_n`` is orthogonal but not
            symmetric when K > 1).

    Returns:
        Tensor of ``x``'s shape and dtype (contiguous). Autograd-safe (the gradient is the transposed
        transform). NaN/Inf propagate; no finiteness check is done on this hot path.
    """
    x = _check_tensor(x, "x")
    dim = _normalize_dim(x, dim, "x")
    hadamard_factor(x.shape[dim])
    return _HadamardFn.apply(x, dim, bool(transpose))


def inverse_hadamard_transform(x: Tensor, dim: int = -1) -> Tensor:
    """Inverse of :func:`hadamard_transform`: ``v ↦ U_nᵀ v`` along ``dim`` (same as ``transpose=True``)."""
    return hadamard_transform(x, dim=dim, transpose=True)


def random_signs(n: int, generator: torch.Generator) -> Tensor:
    """(n,) float32 tensor of i.i.d. uniform ±1 drawn from ``generator`` (on the generator's device)."""
    n = _check_size(n)
    if not isinstance(generator, torch.Generator):
        raise ValueError(
            f"generator must be a torch.Generator (e.g. torch.Generator().manual_seed(0)), got {generator!r}"
        )
    bits = torch.randint(0, 2, (n,), generator=generator, device=generator.device)
    return (2 * bits - 1).to(torch.float32)


# ----------------------------------------------------------------------------------------------------------
# RHT
# ----------------------------------------------------------------------------------------------------------


def _needs_grad(*ts: Tensor) -> bool:
    return torch.is_grad_enabled() and any(t.requires_grad for t in ts)


@dataclass(frozen=True, eq=False)
class RHT:
    """Randomized Hadamard transform of a linear layer ``y = x Wᵀ`` with W (n, d) = (out, in).

    In the paper's notation (caldera.tex §5 "Baselines") the decomposition runs on
    ``W̃ = H_Lᵀ W H_R`` with ``H̃ = H_Rᵀ H H_R``, where here ``H_L = diag(S_V) U_n`` and
    ``H_R = diag(S_U) U_d`` (QuIP#'s convention, quip-sharp.md §3: the signs act before the Hadamard on the
    input side; the paper's words "Hadamard right-multiplied by a diagonal" describe the same family of
    orthogonal matrices). ``U_m = (H_K ⊗ H_{2^p})/√m`` as in :func:`hadamard_transform`. So

    * ``rotate_W``:  ``Wr = U_nᵀ diag(S_V) W diag(S_U) U_d``,
    * ``unrotate_W``: ``W = diag(S_V) U_n Wr U_dᵀ diag(S_U)`` (exact inverse for ±1 signs),
    * ``rotate_H``:  ``Hr = U_dᵀ diag(S_U) H diag(S_U) U_d``; for any Ŵr, with Ŵ = unrotate_W(Ŵr),
      ``tr((Wr−Ŵr) Hr (Wr−Ŵr)ᵀ) = tr((W−Ŵ) H (W−Ŵ)ᵀ)``,
    * ``rotate_input``: ``x̃ = (x ⊙ S_U) U_d`` (rows of x, shape (..., d)),
    * ``unrotate_output``: ``y = (ỹ U_nᵀ) ⊙ S_V`` (rows of ỹ, shape (..., n)), so that
      ``unrotate_output(rotate_input(x) @ Wrᵀ) == x @ unrotate_W(Wr)ᵀ`` (true for any real S_U, S_V, which
      is what fine-tuning the signs relies on).

    Fields: ``S_U`` (d,) and ``S_V`` (n,) float tensors, ±1 (float32) when drawn by :meth:`random`.
    All methods keep the input's dtype (float32/float64) and put the signs on the input's device. Offline
    methods (``rotate_W``, ``unrotate_W``, ``rotate_H``) reject NaN/Inf; the inference methods
    (``rotate_input``, ``unrotate_output``) check only shapes, to avoid a device sync per call.
    """

    S_U: Tensor = field(repr=False)
    S_V: Tensor = field(repr=False)

    def __post_init__(self) -> None:
        for name in ("S_U", "S_V"):
            s = getattr(self, name)
            if not isinstance(s, Tensor) or s.ndim != 1 or not s.is_floating_point():
                got = f"{s.dtype} {tuple(s.shape)}" if isinstance(s, Tensor) else type(s).__name__
                raise ValueError(f"{name} must be a 1-D floating tensor of signs, got {got}")
            try:
                hadamard_factor(s.shape[0])
            except ValueError as e:
                raise ValueError(f"{name} has unsupported length {s.shape[0]}: {e}") from None
            _check_finite(s, name)

    def __repr__(self) -> str:
        return f"RHT(n={self.n}, d={self.d})"

    @property
    def n(self) -> int:
        """Output features (length of S_V)."""
        return self.S_V.shape[0]

    @property
    def d(self) -> int:
        """Input features (length of S_U)."""
        return self.S_U.shape[0]

    @classmethod
    def random(cls, n: int, d: int, seed: int) -> RHT:
        """Draw signs from ``torch.Generator().manual_seed(seed)``: first ``S_V`` (n,), then ``S_U`` (d,)."""
        n, d = _check_size(n, "n"), _check_size(d, "d")
        hadamard_factor(n), hadamard_factor(d)
        if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**64:
            raise ValueError(f"seed must be an int in [0, 2**64), got {seed!r}")
        g = torch.Generator().manual_seed(seed)
        S_V = random_signs(n, g)
        S_U = random_signs(d, g)
        return cls(S_U=S_U, S_V=S_V)

    def to(self, device: torch.device | str) -> RHT:
        """Copy with the signs on ``device``."""
        return RHT(S_U=self.S_U.to(device), S_V=self.S_V.to(device))

    # -- helpers ---------------------------------------------------------------------------------------
    def _signs(self, x: Tensor) -> tuple[Tensor, Tensor]:
        return self.S_U.to(device=x.device, dtype=x.dtype), self.S_V.to(device=x.device, dtype=x.dtype)

    def _check_matrix(self, x: object, name: str, shape: tuple[int, int]) -> Tensor:
        x = _check_tensor(x, name)
        if tuple(x.shape) != shape:
            raise ValueError(f"{name} must have shape {shape}, got {tuple(x.shape)}")
        _check_finite(x, name)
        return x

    def _check_rows(self, x: object, name: str, m: int, what: str) -> Tensor:
        x = _check_tensor(x, name)
        if x.ndim == 0 or x.shape[-1] != m:
            raise ValueError(f"{name} must have shape (..., {m}) ({what}), got {tuple(x.shape)}")
        return x

    # -- weights and Hessian ---------------------------------------------------------------------------
    def rotate_W(self, W: Tensor) -> Tensor:
        """``Wr = U_nᵀ diag(S_V) W diag(S_U) U_d``; W (n, d) → Wr (n, d), same dtype."""
        W = self._check_matrix(W, "W", (self.n, self.d))
        S_U, S_V = self._signs(W)
        if _needs_grad(W, S_U, S_V) or W.device.type != "cpu":
            T = hadamard_transform(W * S_U, dim=1, transpose=True)
            return hadamard_transform(S_V[:, None] * T, dim=0, transpose=True)
        T = _kron_apply(W, 1, True, pre=S_U)
        return _kron_apply(T, 0, True, pre=S_V, out=T)

    def unrotate_W(self, Wr: Tensor) -> Tensor:
        """``W = diag(S_V) U_n Wr U_dᵀ diag(S_U)``, the inverse of :meth:`rotate_W`; (n, d) → (n, d)."""
        Wr = self._check_matrix(Wr, "Wr", (self.n, self.d))
        S_U, S_V = self._signs(Wr)
        if _needs_grad(Wr, S_U, S_V) or Wr.device.type != "cpu":
            T = hadamard_transform(Wr, dim=1) * S_U
            return S_V[:, None] * hadamard_transform(T, dim=0)
        T = _kron_apply(Wr, 1, False, post=S_U)
        return _kron_apply(T, 0, False, post=S_V, out=T)

    def rotate_H(self, H: Tensor) -> Tensor:
        """``Hr = U_dᵀ diag(S_U) H diag(S_U) U_d``; H (d, d) → Hr (d, d), same dtype (float64 stays)."""
        H = self._check_matrix(H, "H", (self.d, self.d))
        S_U, _ = self._signs(H)
        if _needs_grad(H, S_U) or H.device.type != "cpu":
            T = hadamard_transform(H * S_U, dim=1, transpose=True)
            return hadamard_transform(S_U[:, None] * T, dim=0, transpose=True)
        T = _kron_apply(H, 1, True, pre=S_U)
        return _kron_apply(T, 0, True, pre=S_U, out=T)

    # -- inference -------------------------------------------------------------------------------------
    def rotate_input(self, x: Tensor) -> Tensor:
        """``x̃ = (x ⊙ S_U) U_d`` for activations x (..., d); then ``x̃ @ Wrᵀ`` is the rotated output."""
        x = self._check_rows(x, "x", self.d, "in_features d")
        S_U, _ = self._signs(x)
        if _needs_grad(x, S_U) or x.device.type != "cpu":
            return hadamard_transform(x * S_U, dim=-1, transpose=True)
        return _kron_apply(x, x.ndim - 1, True, pre=S_U)

    def unrotate_output(self, y: Tensor) -> Tensor:
        """``y = (ỹ U_nᵀ) ⊙ S_V`` for rotated outputs ỹ (..., n) = ``rotate_input(x) @ Wrᵀ``."""
        y = self._check_rows(y, "y", self.n, "out_features n")
        _, S_V = self._signs(y)
        if _needs_grad(y, S_V) or y.device.type != "cpu":
            return hadamard_transform(y, dim=-1) * S_V
        return _kron_apply(y, y.ndim - 1, False, post=S_V)

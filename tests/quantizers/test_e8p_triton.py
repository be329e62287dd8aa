"""The one-kernel E8P search and the BlockLDLQ chunk kernel (caldera.quantizers.e8p_triton) against slow oracles:
brute force over all 65,536 codewords, and BlockLDLQ's per-block loop.

On a CPU the kernels run in Triton's interpreter (``TRITON_INTERPRET=1``, set by ``tests/conftest.py``); they skip
without ``triton``.
"""

from __future__ import annotations

import pytest
import torch

from caldera.algorithm.ldl import block_ldl, regularize_hessian
from caldera.algorithm.ldlq import block_ldlq
from caldera.metrics import data_aware_sq_error
from caldera.quantizers.e8p import E8P, lookup_on
from tests.helpers import llm_like
from tests.quantizers.test_e8p import brute_force_dist, special_points

DEV = "cuda" if torch.cuda.is_available() else "cpu"


@pytest.fixture(scope="module")
def kt():
    pytest.importorskip("triton")
    from caldera.quantizers import e8p_triton

    return e8p_triton


@pytest.fixture(scope="module")
def cb64() -> torch.Tensor:
    return E8P().codebook.double()


def _adversarial(g: torch.Generator) -> torch.Tensor:
    """Exact ties and degenerate inputs: midpoints of nearest-neighbour codeword pairs (two codewords at exactly
    the same distance), midpoints of random pairs, inputs with many equal |y_i| (quarter-integer grid: equal
    coordinates and shift ties), zeros of either sign, norm-12 points and outliers."""
    cb = E8P().codebook
    near = torch.cdist(cb[:300], cb).topk(2, largest=False).indices[:, 1]
    i, j = torch.randint(0, 65536, (2, 300), generator=g)
    special = special_points()
    return torch.cat(
        (
            (cb[:300] + cb[near]) / 2,
            (cb[i] + cb[j]) / 2,
            special,
            torch.randint(-6, 7, (400, 8), generator=g).float() / 4,
            torch.randn(200, 8, generator=g) * 4 + torch.randn(200, 1, generator=g) * 3,
        )
    )


@pytest.mark.parametrize("block", [32, 128])
def test_search_attains_the_brute_force_minimum(kt, cb64, block):
    """Every code of the kernel is a nearest codeword (distance equal to the brute-force minimum over all 65,536
    up to float32 rounding) on Gaussian data at the design RMS and away from it, and on exact ties; a row count
    that is not a multiple of the block checks the masked tail."""
    g = torch.Generator().manual_seed(block)
    x = torch.cat([torch.randn(700, 8, generator=g) * s for s in (0.5, 1.03, 2.0, 4.0)] + [_adversarial(g)])
    x = x[: x.shape[0] - x.shape[0] % block + 5] if x.shape[0] % block == 0 else x
    codes = kt.search(x.to(DEV), lookup_on(DEV), block=block).cpu()
    assert codes.dtype == torch.int32 and codes.shape == (x.shape[0],)
    assert int(codes.min()) >= 0 and int(codes.max()) < 65536
    d = ((x.double() - cb64[codes.long()]) ** 2).sum(1)
    bf = brute_force_dist(x, cb64)
    bad = (d - bf).abs() > 1e-5 * (1 + (x.double() ** 2).sum(1))
    assert not bad.any(), (x[bad][:3], d[bad][:3], bf[bad][:3])
    # and the same codes as the Numba / torch search wherever the nearest codeword is unique
    ref = E8P().quantize(x).reshape(-1)
    differ = codes != ref
    assert ((d[differ] - bf[differ]).abs() <= 1e-5 * (1 + (x[differ].double() ** 2).sum(1))).all()
    assert differ.float().mean() < 0.05


def test_search_maps_every_codeword_to_its_own_code(kt):
    """All 65,536 codewords are their own nearest: the kernel's code layout (sign bits, the parity bit, the
    last-coordinate negation of odd patterns, the 227 + 29 abs-pattern rows) matches the codebook bit for bit."""
    cb = E8P().codebook
    codes = kt.search(cb.to(DEV), lookup_on(DEV), block=1024).cpu()
    assert torch.equal(codes, torch.arange(65536, dtype=torch.int32))


def test_search_of_nonfinite_rows_still_gives_valid_codes(kt):
    """An unchecked NaN or Inf row gives some code in [0, 65535] (garbage in, a valid index out), never an index
    outside the codebook, so that decoding it cannot read out of bounds on a device."""
    x = torch.tensor([[float("nan")] * 8, [float("inf")] + [0.0] * 7, [-float("inf")] * 8])
    codes = kt.search(x.to(DEV), lookup_on(DEV), block=32).cpu()
    assert int(codes.min()) >= 0 and int(codes.max()) < 65536


@pytest.mark.parametrize(("n", "d", "buffer", "rms", "seed"), [(40, 64, 32, 1.03, 41), (37, 48, 48, 2.0, 42)])
def test_ldlq_chunk_kernel_matches_the_block_loop(kt, monkeypatch, n, d, buffer, rms, seed):
    """BlockLDLQ with each chunk as one kernel per tile of rows (``fused=True`` on the Triton chunk) against the
    per-block loop (``fused=False``): codes equal except at float ties (then a row's later blocks see other
    feedback: at most a few rows differ) and the proxy loss tr(ΔHΔᵀ) equal to 1e-6. Several chunks check the
    later chunks' feedback F; a row count off the tile checks the masked tail."""
    q = E8P(backend="torch")
    monkeypatch.setattr(q, "fused_ldlq_available", lambda x: True)  # the Triton chunk, here in the interpreter
    W, H = llm_like(n, d, seed=seed)
    Hr = regularize_hessian(H)
    L, _ = block_ldl(Hr)
    X = W / W.pow(2).mean().sqrt() * rms
    Wh_k, codes_k = block_ldlq(X.to(DEV), L.to(DEV), q, buffer=buffer, fused=True)
    Wh_k, codes_k = Wh_k.cpu(), codes_k.cpu()
    Wh_l, codes_l = block_ldlq(X, L, q, buffer=buffer, fused=False)
    assert torch.equal(q.dequantize(codes_k), Wh_k)
    assert (codes_k != codes_l).any(1).float().mean() <= 0.05
    loss = lambda Wh: float(data_aware_sq_error((X - Wh).double(), Hr.double()))  # noqa: E731
    assert loss(Wh_k) == pytest.approx(loss(Wh_l), rel=1e-6)
    # the recurrence itself: each code is the nearest codeword of W_k + Σ_{j>k} δ_j L_{j,k} from its own output
    below = (torch.arange(d)[:, None] // 8) > (torch.arange(d)[None, :] // 8)
    x = (X.double() + (X - Wh_k).double() @ (L.double() * below)).float()
    assert (E8P().quantize(x) == codes_k).float().mean() > 0.99


def test_cuda_takes_the_kernels_only_when_enabled(kt, monkeypatch):
    """Never compiled on a GPU yet: CUDA tensors take the Triton search and chunk only with CALDERA_E8P_TRITON=1
    (the acceptance run sets it), else the device search and the block loop."""
    monkeypatch.delenv(kt.ENABLE_ON_CUDA, raising=False)
    assert not kt.enabled_on_cuda()
    monkeypatch.setenv(kt.ENABLE_ON_CUDA, "1")
    assert kt.enabled_on_cuda()
    monkeypatch.setenv(kt.ENABLE_ON_CUDA, "0")
    assert not kt.enabled_on_cuda()

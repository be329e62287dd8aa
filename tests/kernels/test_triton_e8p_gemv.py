"""The batch-1..4 CUDA-core E8P product (caldera.kernels.triton_e8p_gemv) against slow oracles: the repack round
trip, the table decode of every code against the codebook, and the product against the dequantizing reference.

Without CUDA the kernels run in Triton's interpreter (``TRITON_INTERPRET=1``, from ``tests/conftest.py``), and
every test skips where ``triton`` does not import.
"""

from __future__ import annotations

import pytest
import torch

from caldera.kernels.e8p_decode import codes_matmul_reference
from caldera.quantizers.e8p import E8P
from tests.helpers import kernel_close
from tests.helpers import random_codes as _codes

DEV = "cuda" if torch.cuda.is_available() else "cpu"


@pytest.fixture(scope="module")
def kg():
    return pytest.importorskip("caldera.kernels.triton_e8p_gemv", reason="needs triton")


@pytest.mark.parametrize(("n", "m", "bn", "bm"), [(13, 5, 8, 4), (64, 64, 32, 32), (33, 70, 16, 32)])
def test_repack_round_trip(kg, n, m, bn, bm):
    """Every code, the high ones (stored as negative int16) included, comes back from the tiles at its place; the
    tiles are contiguous in the programs' order (tile (i, j) holds rows i·bn.., code columns j·bm..)."""
    codes = _codes(n, m, "e8p", seed=n).to(torch.int64)
    codes[0, 0], codes[-1, -1] = 65535, 32768
    packed = kg.repack(codes, bn, bm)
    assert packed.dtype == torch.int16 and packed.is_contiguous()
    assert packed.shape == (-(-n // bn), -(-m // bm), bn, bm)
    assert torch.equal(kg.unpack(packed, n, m), codes.to(torch.int32))
    assert torch.equal(packed[0, 0, :2, :2].to(torch.int32) & 0xFFFF, codes[:2, :2].to(torch.int32))


def test_table_decode_of_every_code_equals_the_codebook(kg):
    """The kernel's decode (two float16 table rows and a shift per code) gives every one of the 65,536 codewords
    exactly: the tables' sign convention, the parity bit and the odd-sum negation of the last coordinate."""
    codes = torch.arange(65536, dtype=torch.int32)
    out = kg.decode_codes(codes.to(DEV), block=1024).cpu()
    assert torch.equal(out, E8P().codebook)


@pytest.mark.parametrize(
    ("n", "m", "B", "split", "per_row", "xdtype"),
    [
        (13, 5, 1, 1, False, torch.float32),  # one partial tile of rows and code columns
        (40, 37, 4, 3, True, torch.float32),  # B = 4 (the largest), slices summed with atomics, a short last slice
        (21, 70, 2, 1, True, torch.float16),  # float16 x
        (33, 64, 3, 2, False, torch.float32),
    ],
)
def test_gemv_matches_the_reference(kg, n, m, B, split, per_row, xdtype):
    """``x (s ⊙ Q)ᵀ`` from the repacked codes equals the dequantizing reference for every batch ≤ 4, float32 and
    float16 x (|x| ≫ 1: no float16 rounding of x is hidden in the tolerance), a per-matrix or per-row scale."""
    g = torch.Generator().manual_seed(n + m)
    codes = _codes(n, m, "e8p", seed=n)
    x = (torch.randn(B, 8 * m, generator=g) * 300).to(xdtype)
    s = torch.rand(n, 1, generator=g) + 0.5 if per_row else torch.tensor(0.8)
    ref = codes_matmul_reference(x.float(), codes.to(torch.int64), s, "e8p")
    packed = kg.repack(codes.to(DEV), 16, 8)
    y = kg.e8p_gemv(x.to(DEV), packed, n, m, s.to(DEV), split=split)
    assert y.dtype == torch.float32 and y.shape == (B, n)
    kernel_close(y.cpu(), ref)


def test_gemv_refuses_a_batch_above_four(kg):
    packed = kg.repack(_codes(4, 2, "e8p", seed=0), 8, 8)
    with pytest.raises(ValueError, match="B ≤ 4"):
        kg.e8p_gemv(torch.randn(5, 16).to(DEV), packed.to(DEV), 4, 2, 1.0)


@pytest.mark.parametrize(("B", "k", "d", "xdtype"), [(1, 5, 37, torch.float32), (4, 33, 300, torch.float32),
                                                      (3, 16, 128, torch.float16)])
def test_half_matmul_t_matches_the_float64_product(kg, B, k, d, xdtype):
    """``x Rᵀ`` with the float16 R read as stored equals the float64 product of the same values (masked tails of
    the batch, the rows of R and its columns)."""
    g = torch.Generator().manual_seed(k)
    x = (torch.randn(B, d, generator=g) * 30).to(xdtype)
    R = torch.randn(k, d, generator=g).half()
    y = kg.half_matmul_t(x.to(DEV), R.to(DEV)).cpu()
    assert y.dtype == torch.float32 and y.shape == (B, k)
    kernel_close(y, (x.double() @ R.double().T).float())

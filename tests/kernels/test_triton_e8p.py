"""The Triton E8P kernels (caldera.kernels.triton_e8p) against their dequantizing references.

On a CPU they run in Triton's interpreter (``TRITON_INTERPRET=1``, set by ``tests/conftest.py`` before Triton
loads), and skip without ``triton``; the ``gpu``-marked tests run them compiled on a CUDA device at the LLaMa-2 7B
shapes.
"""

from __future__ import annotations

import pytest
import torch

from caldera.kernels.e8p_decode import codes_matmul_reference, dequantize_codes
from caldera.kernels.fused import Factors, codes_linear
from caldera.nn.compressed_linear import CompressedLinear
from caldera.synthetic import random_compressed_layer
from tests.helpers import kernel_close as _close
from tests.helpers import random_codes as _codes

CUDA = torch.cuda.is_available()
DEV = "cuda" if CUDA else "cpu"


@pytest.fixture(scope="module")
def tk():
    pytest.importorskip("triton")
    from caldera.kernels import triton_e8p

    return triton_e8p


def _to(*ts):
    return [t.to(DEV) if t is not None else None for t in ts]


@pytest.mark.parametrize("quantizer", ["e8p", "e8p-rvq4"])
@pytest.mark.parametrize(
    ("n", "m", "B", "k", "split", "per_row", "xdtype"),
    [
        (13, 5, 1, 0, 1, False, torch.float32),  # one partial row block, m below one column block
        (37, 11, 3, 5, 2, True, torch.float32),  # two slices of the columns (atomics), the float16 L part
        (40, 37, 16, 17, 3, False, torch.float32),  # B = 16 (the largest), k over one BLOCK_K
        (21, 6, 2, 3, 1, True, torch.float16),  # float16 x: one part, no split
    ],
)
def test_e8p_matmul_matches_reference(tk, quantizer, n, m, B, k, split, per_row, xdtype):
    g = torch.Generator().manual_seed(n)
    codes = _codes(n, m, quantizer, seed=n)
    x = (torch.randn(B, 8 * m, generator=g) * 300).to(xdtype)  # |x| ≫ 1: the float16 split must scale it
    s = torch.rand(n, 1, generator=g) + 0.5 if per_row else torch.tensor(0.8)
    L = torch.randn(n, k, generator=g).half() if k else None
    t = torch.randn(B, k, generator=g).to(xdtype) if k else None
    ref = codes_matmul_reference(x.float(), codes.to(torch.int64), s, quantizer)
    if k:
        ref = ref + t.float() @ L.float().T
    y = tk.e8p_matmul(*_to(x, codes, s, L, t), quantizer=quantizer, block_n=16, block_m=16, split=split)
    assert y.dtype == torch.float32 and y.shape == (B, n)
    _close(y.cpu(), ref)


@pytest.mark.parametrize("quantizer", ["e8p", "e8p-rvq4"])
@pytest.mark.parametrize(("k", "m", "B"), [(19, 5, 3), (3, 17, 1)])
def test_e8p_matmul_t_matches_reference_and_accumulates(tk, quantizer, k, m, B):
    codes = _codes(k, m, quantizer, seed=k)
    t = torch.randn(B, k, generator=torch.Generator().manual_seed(2)) * 50
    ref = 0.7 * t @ dequantize_codes(codes.to(torch.int64), quantizer)
    _close(tk.e8p_matmul_t(*_to(t, codes), 0.7, quantizer).cpu(), ref)
    out = torch.ones(B, 8 * m, device=DEV)
    assert tk.e8p_matmul_t(*_to(t, codes), 0.7, quantizer, out=out) is out
    _close(out.cpu(), ref + 1)


def test_bad_inputs_are_named(tk):
    codes = _codes(4, 2, "e8p", seed=0)
    x = torch.randn(1, 16)
    with pytest.raises(ValueError, match="expected"):
        tk.e8p_matmul(torch.randn(1, 15), codes, 1.0)
    with pytest.raises(ValueError, match="B ≤ 16"):
        tk.e8p_matmul(torch.randn(17, 16), codes, 1.0)
    with pytest.raises(ValueError, match="block_m=8"):
        tk.e8p_matmul(x, codes, 1.0, block_m=8)
    with pytest.raises(ValueError, match="no compressed-matmul kernel"):
        tk.e8p_matmul(x, codes, 1.0, quantizer="e8p-rvq3")
    with pytest.raises(ValueError, match="32 bits"):
        tk.e8p_matmul(x, codes, 1.0, quantizer="e8p-rvq4")
    with pytest.raises(ValueError, match="scale"):
        tk.e8p_matmul(x, codes, torch.ones(3, 1))
    with pytest.raises(ValueError, match="float16"):
        tk.e8p_matmul(x, codes, 1.0, torch.randn(4, 2), torch.randn(1, 2))
    with pytest.raises(ValueError, match="together"):
        tk.e8p_matmul(x, codes, 1.0, torch.randn(4, 2).half())
    with pytest.raises(ValueError, match="out:"):
        tk.e8p_matmul_t(torch.randn(1, 4), codes, 1.0, out=torch.zeros(1, 15))


@pytest.mark.parametrize("factors", ["float16", "float32", "e8p-rvq4"])
def test_codes_linear_triton_backend_equals_reference(tk, factors):
    """The dispatcher's Triton branch for each factor format (float16 L fused into the Q product; float32 L
    added after it; E8P-RVQ4 factor codes through the row and the transposed kernel)."""
    g = torch.Generator().manual_seed(5)
    n, d, k = 24, 40, 3
    codes, s = _codes(n, d // 8, "e8p", seed=5), torch.rand(n, 1, generator=g)
    h = torch.randn(2, d, generator=g)
    ref = codes_matmul_reference(h, codes.to(torch.int64), s)
    if factors == "e8p-rvq4":
        Lc, Rc = _codes(k, n // 8, factors, seed=6), _codes(k, d // 8, factors, seed=7)
        Ls, Rs = torch.tensor(0.05), torch.tensor(0.07)
        f = Factors(L_codes=Lc.to(DEV), L_scale=Ls.to(DEV), R_codes=Rc.to(DEV), R_scale=Rs.to(DEV), quantizer=factors)
        L = Ls * dequantize_codes(Lc.to(torch.int64), factors).T
        R = Rs * dequantize_codes(Rc.to(torch.int64), factors)
    else:
        dt = torch.float16 if factors == "float16" else torch.float32
        L, R = torch.randn(n, k, generator=g).to(dt), torch.randn(k, d, generator=g).to(dt)
        f = Factors(L=L.to(DEV), R=R.to(DEV))
    ref = ref + (h @ R.float().T) @ L.float().T
    _close(codes_linear(*_to(h, codes, s), f, "triton").cpu(), ref)


# ------------------------------------------------------------------------------------ compiled, on a CUDA device

gpu = pytest.mark.gpu
needs_cuda = pytest.mark.skipif(not CUDA, reason="needs a CUDA device")


@gpu
@needs_cuda
@pytest.mark.parametrize("quantizer", ["e8p", "e8p-rvq4"])
@pytest.mark.parametrize(("n", "d"), [(4096, 4096), (11008, 4096), (4096, 11008)])
@pytest.mark.parametrize("B", [1, 4])
def test_cuda_kernel_at_llama2_7b_shapes(tk, quantizer, n, d, B):
    g = torch.Generator().manual_seed(B)
    codes = _codes(n, d // 8, quantizer, seed=n + d)
    x = torch.randn(B, d, generator=g)
    L, t = (torch.randn(n, 64, generator=g) / 8).half(), torch.randn(B, 64, generator=g)
    ref = codes_matmul_reference(x, codes.to(torch.int64), 0.5, quantizer) + t @ L.float().T
    y = tk.e8p_matmul(*_to(x, codes), 0.5, *_to(L, t), quantizer=quantizer)
    _close(y.cpu(), ref)


@gpu
@needs_cuda
@pytest.mark.parametrize(("lr_format", "rank"), [("float16", 64), ("quantized", 64), (None, 0)])
def test_cuda_compressed_linear_takes_triton_and_equals_reference(tk, lr_format, rank):
    meta, ts = random_compressed_layer(512, 1024, rank, lr_format)
    fast = CompressedLinear.from_tensors(meta, ts, kernel="kernel").to("cuda")
    ref = CompressedLinear.from_tensors(meta, ts, kernel="reference").to("cuda")
    x = torch.randn(3, 1024, generator=torch.Generator().manual_seed(1)).cuda()
    with torch.no_grad():
        assert fast.kernel_backend(x) == "triton" and ref.kernel_backend(x) is None
        torch.testing.assert_close(fast(x), ref(x), rtol=1e-4, atol=1e-4 * float(ref(x).abs().max()))

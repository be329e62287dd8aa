"""E8P codebook structure and exact nearest-codeword search (brute force over all 65,536 codewords)."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from caldera.quantizers import E8P, dequantize_scaled, e8p_search, get_quantizer, quantize_scaled
from caldera.quantizers import e8p as e8p_mod
from caldera.quantizers.e8p_codebook import cpu_lookup
from tests.helpers import at_thread_counts


class _DeviceSearchE8P(E8P):
    """E8P whose ``quantize`` checks its input, then searches by ``quantize_validated`` on the torch backend: the
    sync-free search a tensor on a device takes (:func:`caldera.quantizers.e8p.encode_dense`), run on the CPU."""

    def __init__(self) -> None:
        super().__init__(backend="torch")

    def quantize(self, x: torch.Tensor) -> torch.Tensor:
        xf = self._flat(x, "x")
        return self.quantize_validated(xf).reshape(*x.shape[:-1], x.shape[-1] // 8)


@pytest.fixture(scope="module", params=["numba", "torch", "device"])
def q(request: pytest.FixtureRequest) -> E8P:
    """Every search test runs on the three searches: the compiled kernel, the vectorised torch reference and the
    sync-free search of tensors on a device (every norm-12 pattern scored on every column)."""
    if request.param == "numba":
        pytest.importorskip("numba")
    if request.param == "device":
        return _DeviceSearchE8P()
    return E8P(backend=request.param)


@pytest.fixture(scope="module")
def cb64(q: E8P) -> torch.Tensor:
    return q.codebook.double()


_CB32: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}


def _cb32(cb64: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    if id(cb64) not in _CB32:
        cb32 = cb64.float()
        _CB32[id(cb64)] = (cb32, 0.5 * (cb32 * cb32).sum(1))
    return _CB32[id(cb64)]


def brute_force_dist(x: torch.Tensor, cb64: torch.Tensor) -> torch.Tensor:
    """Minimum squared distance (float64) from each row of x (N, 8) to the codebook.

    Every codeword is scored in float32 (2⟨x, c⟩ − ‖c‖²); the 16 best per row are re-scored exactly in
    float64, which is exact unless >16 codewords tie within float32 rounding (then any is as good).
    """
    cb32, half_norm = _cb32(cb64)
    out = []
    for c in x.double().split(256):
        cand = (c.float() @ cb32.T - half_norm).topk(16, dim=1).indices
        d = ((c[:, None, :] - cb64[cand]) ** 2).sum(-1)
        out.append(d.min(1).values)
    return torch.cat(out)


def assert_nearest(q: E8P, x: torch.Tensor, cb64: torch.Tensor) -> torch.Tensor:
    codes = q.quantize(x)
    xh = q.dequantize(codes).double()
    d = ((x.double() - xh) ** 2).sum(-1)
    bf = brute_force_dist(x, cb64)
    # float32 scores: equal up to rounding (relative 1e-6 of the scale of x)
    tol = 1e-5 * (1 + (x.double() ** 2).sum(-1))
    bad = (d - bf).abs() > tol
    assert not bad.any(), (x[bad][:3], d[bad][:3], bf[bad][:3])
    return codes


def test_attributes() -> None:
    # (the build time of the codebook and lookup arrays is measured in benchmarks/test_bench_quantizers.py, not
    # asserted here)
    q = get_quantizer("e8p")
    assert (q.name, q.block_size, q.bits_per_weight, q.opt_scale) == ("e8p", 8, 2.0, 1.03)
    assert q.code_dtype == torch.int32
    assert torch.equal(q.codebook, cpu_lookup().codebook) and torch.equal(q.abs_patterns, cpu_lookup().abs_f)


# ---------------------------------------------------------------- nearest search


@pytest.mark.parametrize("scale", [0.5, 0.9, 1.03, 2.0])
def test_nearest_equals_brute_force_gaussian(q: E8P, cb64: torch.Tensor, scale: float) -> None:
    g = torch.Generator().manual_seed(int(scale * 100))
    x = torch.randn(1500, 8, generator=g) * scale
    assert_nearest(q, x, cb64)


def test_nearest_across_chunk_and_block_boundaries(q: E8P, cb64: torch.Tensor, monkeypatch: pytest.MonkeyPatch) -> None:
    """Small chunks/blocks so the deferred norm-12 pass maps columns across many chunks."""
    monkeypatch.setattr(e8p_mod, "CHUNK_ROWS", 7)
    monkeypatch.setattr(e8p_mod, "_BLOCK_ROWS", 61)
    monkeypatch.setattr(e8p_search, "_N12_COLS", 5)
    monkeypatch.setattr(e8p_search, "_DENSE_CHUNK_ROWS", 7)
    g = torch.Generator().manual_seed(11)
    x = torch.randn(250, 8, generator=g) * 2.0
    codes_small = assert_nearest(q, x, cb64)
    monkeypatch.undo()
    d1 = ((q.dequantize(codes_small) - x) ** 2).sum(1)
    d2 = ((q.round(x) - x) ** 2).sum(1)
    torch.testing.assert_close(d1, d2, rtol=1e-5, atol=1e-6)


def test_threaded_blocks_match_serial(q: E8P) -> None:
    """Large inputs run in blocks on torch.get_num_threads() Python threads; results must not depend on it."""
    x = torch.randn(2 * e8p_mod.CHUNK_ROWS + 123, 8, generator=torch.Generator().manual_seed(9)) * 1.03
    serial, parallel = at_thread_counts(lambda: q.quantize(x))
    assert torch.equal(serial, parallel)


def test_codewords_round_trip(q: E8P) -> None:
    codes = torch.arange(65536, dtype=torch.int32)
    assert torch.equal(q.quantize(q.codebook).squeeze(1), codes)
    assert torch.equal(q.round(q.codebook), q.codebook)


def special_points() -> torch.Tensor:
    """Degenerate and boundary inputs: zeros of either sign, shift ties, norm-12 patterns, huge entries."""
    return torch.tensor(
        [
            [0.0] * 8,
            [-0.0] * 8,
            [0.25] * 8,
            [-0.25] * 8,
            [0.5] * 8,
            [0.75] * 8,
            [-0.75] * 8,
            [1.0] * 8,
            [1.5] * 5 + [0.5] * 3,
            [3.0, 3.0, 3.0, 3.0, 3.0, 0.0, 0.0, 0.0],
            [1e3, 0, 0, 0, 0, 0, 0, 0],
            [-1e3, 2, -3, 4, -5, 6, -7, 8],
            [50.0] * 8,
            [-50.0] * 8,
            [1e6, -1e6, 1e6, -1e6, 0.1, 0.2, 0.3, 0.4],
            [2.5, 1.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5],
            [2.6, 1.6, 1.4, 1.4, 1.4, 1.4, 0.1, -0.1],
            [1.7, 1.7, 1.7, 1.7, 1.7, 0.2, 0.2, -0.2],
            [1.25, -1.25, 1.25, -1.25, 1.25, -1.25, 1.25, -1.25],
        ]
    )


def test_adversarial_points(q: E8P, cb64: torch.Tensor) -> None:
    g = torch.Generator().manual_seed(5)
    cb = q.codebook
    i = torch.randint(0, 65536, (400,), generator=g)
    j = torch.randint(0, 65536, (400,), generator=g)
    mid = (cb[i] + cb[j]) / 2  # midpoints of random pairs
    # midpoints of nearest-neighbour pairs (exact ties)
    near = torch.cdist(cb[:200], cb).topk(2, largest=False).indices[:, 1]
    mid_nn = (cb[:200] + cb[near]) / 2
    special = special_points()
    outliers = torch.randn(200, 8, generator=g) * 4 + torch.randn(200, 1, generator=g) * 3
    ties = torch.randint(-6, 7, (300, 8), generator=g).float() / 4  # many equal |y| and exact ties
    x = torch.cat((mid, mid_nn, special, outliers, ties))
    assert_nearest(q, x, cb64)


@settings(max_examples=30, deadline=None, derandomize=True, database=None)
@given(st.lists(st.floats(-6, 6, allow_nan=False, width=32), min_size=8, max_size=8))
def test_nearest_property(q: E8P, cb64: torch.Tensor, v: list[float]) -> None:
    assert_nearest(q, torch.tensor([v]), cb64)


def test_mse_matches_published_value(q: E8P) -> None:
    """Per-coordinate MSE of N(0, 1) at opt_scale 1.03 is ≈ 0.0919 (quip-sharp.md section 1)."""
    g = torch.Generator().manual_seed(0)
    W = torch.randn(256, 1024, generator=g)
    sc = quantize_scaled(q, W)
    mse = float(((dequantize_scaled(q, sc) - W) ** 2).mean())
    assert 0.085 < mse < 0.100, mse


# ---------------------------------------------------------------- shapes, dtypes, packing, errors


def test_shapes_and_dtypes(q: E8P) -> None:
    g = torch.Generator().manual_seed(1)
    x = torch.randn(3, 5, 16, generator=g)
    c = q.quantize(x)
    assert c.shape == (3, 5, 2) and c.dtype == torch.int32
    assert int(c.min()) >= 0 and int(c.max()) < 65536
    xh = q.dequantize(c)
    assert xh.shape == x.shape and xh.dtype == torch.float32
    assert torch.equal(q.round(x), xh)
    for dt in (torch.float64, torch.float16, torch.bfloat16):
        xd = x.to(dt)
        assert torch.equal(q.quantize(xd), q.quantize(xd.float()))
    assert q.quantize(torch.empty(0, 8)).shape == (0, 1)


def test_pack_unpack(q: E8P) -> None:
    codes = torch.tensor([[0, 1, 255, 256], [65535, 4660, 43981, 32768]], dtype=torch.int32)
    packed = q.pack_codes(codes)
    assert packed.dtype == torch.uint8 and packed.shape == (2, 8)
    assert packed.numel() == 2 * codes.numel()  # exactly 16 bits per 8 weights
    assert packed[0, :2].tolist() == [0, 0] and packed[0, 4:6].tolist() == [255, 0]
    assert torch.equal(q.unpack_codes(packed), codes)
    allc = torch.arange(65536, dtype=torch.int32)
    assert torch.equal(q.unpack_codes(q.pack_codes(allc)), allc)
    with pytest.raises(ValueError, match="packed"):
        q.unpack_codes(torch.zeros(3, dtype=torch.uint8))
    with pytest.raises(ValueError, match="packed"):
        q.unpack_codes(torch.zeros(4, dtype=torch.int32))
    with pytest.raises(ValueError, match="codes"):
        q.pack_codes(torch.tensor([65536]))


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
def test_nonfinite_input_raises(q: E8P, bad: float) -> None:
    x = torch.zeros(2, 8)
    x[1, 3] = bad
    with pytest.raises(ValueError, match="x"):
        q.quantize(x)
    with pytest.raises(ValueError, match="x"):
        q.round(x)


def test_bad_shapes_and_codes_raise(q: E8P) -> None:
    with pytest.raises(ValueError, match="block size"):
        q.quantize(torch.zeros(4, 12))
    with pytest.raises(ValueError, match="x"):
        q.quantize(torch.tensor(1.0))
    with pytest.raises(ValueError, match="floating"):
        q.quantize(torch.zeros(8, dtype=torch.int32))
    with pytest.raises(ValueError, match="exceeds"):
        q.quantize(torch.full((1, 8), 1e37))
    with pytest.raises(ValueError, match="codes"):
        q.dequantize(torch.tensor([65536]))
    with pytest.raises(ValueError, match="codes"):
        q.dequantize(torch.tensor([-1]))
    with pytest.raises(ValueError, match="codes"):
        q.dequantize(torch.tensor([1.0]))


def test_backends_agree_and_validate() -> None:
    """The compiled and torch searches return the same codes (float ties aside: none occur on these
    draws), the default is the compiled one when Numba imports, and a bad backend name is refused."""
    pytest.importorskip("numba")
    assert E8P().backend == "numba"
    g = torch.Generator().manual_seed(5)
    for rms in (0.5, 1.03, 3.0):
        x = torch.randn(20000, 8, generator=g) * rms
        assert torch.equal(E8P(backend="numba").quantize(x), E8P(backend="torch").quantize(x))
    with pytest.raises(ValueError, match="backend"):
        E8P(backend="cuda")


@pytest.mark.parametrize("dtype", [torch.uint16, torch.uint32, torch.int64, torch.uint8, torch.int16])
def test_codes_of_any_integer_dtype_decode_alike(q: E8P, dtype: torch.dtype) -> None:
    """Checkpoints store E8P codes as uint16, for which torch has no min/max (NotImplementedError before)."""
    codes = torch.tensor([[0, 255, 32767, 65535], [1, 2, 3, 40000]], dtype=torch.int32)
    if int(codes.max()) > torch.iinfo(dtype).max:
        codes = codes.clamp_max(torch.iinfo(dtype).max)
    ref = q.dequantize(codes)
    assert torch.equal(q.dequantize(codes.to(dtype)), ref) and torch.equal(ref, q.codebook[codes].reshape(2, 32))
    assert torch.equal(E8P.pack_codes(codes.to(dtype)), E8P.pack_codes(codes))
    for name in ("e8p-rvq3", "e8p-rvq4"):
        rq = get_quantizer(name)
        c = rq.quantize(torch.randn(2, 16, generator=torch.Generator().manual_seed(0)))
        assert torch.equal(rq.dequantize(c.to(torch.uint32)), rq.dequantize(c))


def test_unsigned_codes_out_of_range_are_refused(q: E8P) -> None:
    with pytest.raises(ValueError, match=r"code values must lie in \[0, 65535\], got range \[5, 70000\]"):
        q.dequantize(torch.tensor([[5, 70000]], dtype=torch.uint32))

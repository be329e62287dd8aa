"""caldera.quantizers.e8p_search: the sorting network, the sign byte and packed sort keys the E8P and E81B searches
share, and the torch searches against brute force at any chunk size."""

from __future__ import annotations

import itertools

import pytest
import torch

from caldera.quantizers import e8p_search as S
from caldera.quantizers.e8p_codebook import cpu_lookup
from tests.quantizers.test_e8p import brute_force_dist, special_points


def test_sort_network_zero_one_principle() -> None:
    for bits in itertools.product((0, 1), repeat=8):
        v = list(bits)
        for i, j in S.SORT8_NETWORK:
            if v[i] < v[j]:
                v[i], v[j] = v[j], v[i]
        assert v == sorted(bits, reverse=True)


def test_the_sign_byte_packed_keys_and_sort8_of_eight_rows():
    """Bit i of the sign byte is y_i's sign bit, its parity the count's; the packed keys sort like |y| and carry
    the coordinate in their 3 low bits; sort8 sorts the 8 rows elementwise, largest first."""
    y = torch.randn(8, 500, generator=torch.Generator().manual_seed(4))
    y[3, :7] = -0.0
    rows = list(y.unbind(0))
    neg, q = S.sign_byte(rows)
    signs = torch.signbit(y).to(torch.int32)
    assert torch.equal(neg, (signs << torch.arange(8, dtype=torch.int32)[:, None]).sum(0, dtype=torch.int32))
    assert torch.equal(q, (signs.sum(0) % 2).to(torch.float32))
    keys = S.sort8(S.packed_keys([r.abs() for r in rows]))
    coords = torch.stack([k & 7 for k in keys])
    assert torch.equal(coords.sort(0).values, torch.arange(8)[:, None].expand(8, 500).to(torch.int32))
    got = torch.stack([y.abs()[c, torch.arange(500)] for c in coords.to(torch.int64)])
    assert torch.equal(got, y.abs().sort(0, descending=True).values)
    assert torch.equal(torch.stack(S.sort8(rows)), y.sort(0, descending=True).values)


def _distances(x: torch.Tensor, codes: torch.Tensor) -> torch.Tensor:
    return ((x.double() - cpu_lookup().codebook.double()[codes.to(torch.int64)]) ** 2).sum(1)


@pytest.mark.parametrize("chunk", [7, S.CHUNK_ROWS])
def test_the_torch_searches_are_nearest_at_any_chunk_size(chunk, monkeypatch):
    """encode_rows (its deferred norm-12 pass mapping columns across chunks) and encode_dense (every norm-12
    pattern on every column) attain the brute-force distance on Gaussian and adversarial rows."""
    monkeypatch.setattr(S, "_N12_COLS", 5)
    x = torch.cat((torch.randn(300, 8, generator=torch.Generator().manual_seed(12)) * 2.0, special_points()))
    t = cpu_lookup()
    want = brute_force_dist(x, cpu_lookup().codebook.double())
    out = torch.empty(x.shape[0], dtype=torch.int32)
    S.encode_rows(x, t, out, chunk)
    tol = 1e-5 * (1 + (x.double() ** 2).sum(-1))
    assert ((_distances(x, out) - want).abs() <= tol).all()
    dense = S.encode_dense(x, t, chunk)
    assert ((_distances(x, dense) - want).abs() <= tol).all()
    assert torch.equal(S.search_on_device(x, t), S.encode_dense(x, t))  # on the CPU: the dense search

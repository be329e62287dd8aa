"""caldera.quantizers.e8p_codebook: the E8P codebook and its abs patterns as quip-sharp.md defines them, built once
and rebuilt the same."""

from __future__ import annotations

import torch

from caldera.quantizers.e8p_codebook import cpu_lookup, lookup_on

NORM12_2X = (
    "31113333 13113333 11313333 11133333 33313311 33313131 33311331 33313113 33311313 33311133 "
    "33133311 33133131 33131331 33133113 33131313 33131133 31333311 31333131 31331331 31333113 "
    "31331313 13331133 13333311 13333131 13331331 13333113 13331313 11331333 33113331"
).split()


def test_codebook_shape_distinct_and_dtype() -> None:
    cb = cpu_lookup().codebook
    assert cb.shape == (65536, 8) and cb.dtype == torch.float32
    assert torch.unique(cb, dim=0).shape[0] == 65536


def test_codebook_in_E8_plus_quarter() -> None:
    v = cpu_lookup().codebook.double() - 0.25  # must be in E8 = D8 ∪ (D8 + ½)
    two = 2 * v
    assert torch.equal(two, two.round())
    frac_int = (v == v.round()).all(1)
    frac_half = ((v - 0.5) == (v - 0.5).round()).all(1)
    assert (frac_int | frac_half).all()
    assert (v.sum(1).remainder(2) == 0).all()  # even coordinate sum
    # and each codeword is b ± ¼ with b ∈ D̂8 (half-integer coordinates, even sum)
    for s in (0.25, -0.25):
        b = cpu_lookup().codebook.double() - s
        ok = ((b - 0.5) == (b - 0.5).round()).all(1) & (b.sum(1).remainder(2) == 0)
        assert ok.sum() == 32768


def test_abs_patterns_match_definition() -> None:
    S = cpu_lookup().abs_f
    assert S.shape == (256, 8) and torch.unique(S, dim=0).shape[0] == 256
    # Independent enumeration: all x in D̂8 with ‖x‖² ≤ 10 (coordinates ±1/2, ±3/2, ±5/2 suffice).
    vals = torch.tensor([-2.5, -1.5, -0.5, 0.5, 1.5, 2.5], dtype=torch.float64)
    grid = torch.cartesian_prod(*([vals] * 8))
    keep = ((grid**2).sum(1) <= 10) & (grid.sum(1).remainder(2) == 0)
    absx = torch.unique(grid[keep].abs(), dim=0)
    assert absx.shape[0] == 227
    short = S[:227].double()
    assert torch.equal(torch.unique(short, dim=0), absx)
    # documented order: by ‖x‖², then lexicographic on 2|x|
    key = [((r**2).sum().item(), tuple(r.tolist())) for r in short]
    assert key == sorted(key)
    assert torch.equal(S[0], torch.full((8,), 0.5))


def test_norm12_patterns() -> None:
    S12 = cpu_lookup().abs_f[227:]
    assert S12.shape == (29, 8)
    expected = torch.tensor([[int(c) / 2 for c in s] for s in NORM12_2X])
    assert torch.equal(S12, expected)  # upstream order
    assert torch.unique(S12, dim=0).shape[0] == 29
    assert torch.all((S12.double() ** 2).sum(1) == 12)
    assert torch.all((S12 == 1.5).sum(1) == 5) and torch.all((S12 == 0.5).sum(1) == 3)


def test_codeword_bit_layout() -> None:
    """Re-derive codewords from the quip-sharp.md rule for a sample of codes."""
    cb, S = cpu_lookup().codebook, cpu_lookup().abs_f
    g = torch.Generator().manual_seed(3)
    for code in torch.randint(0, 65536, (300,), generator=g).tolist() + [0, 255, 256, 65535]:
        k, low = code >> 8, code & 255
        bits = [(low >> i) & 1 for i in range(8)]
        p = sum(bits) % 2
        bits[0] ^= p
        a = S[k].clone()
        if int((a * 2).sum().item()) // 2 % 2 == 1:  # Σ|x| odd: negate the last coordinate first
            a[7] = -a[7]
        b = torch.tensor([-v if f else v for v, f in zip(a.tolist(), bits, strict=True)])
        assert int(b.sum().item()) % 2 == 0
        expect = b + (0.25 if p == 0 else -0.25)
        assert torch.equal(cb[code], expect), code


def test_the_codebook_is_built_once_and_rebuilt_the_same() -> None:
    before = cpu_lookup().codebook.clone()
    assert cpu_lookup() is cpu_lookup() and lookup_on(torch.device("cpu")) is cpu_lookup()
    cpu_lookup.cache_clear()
    assert torch.equal(cpu_lookup().codebook, before)  # a rebuild gives the same codebook
    meta = lookup_on(torch.device("meta"))
    assert meta.codebook.device.type == "meta" and meta is lookup_on(torch.device("meta"))

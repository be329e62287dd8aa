"""Tests of caldera.kernels.e8p_decode: the decode lookup arrays against the E8P codebook, the Triton decode's packed
nibbles, and the dequantizing reference product against an explicit per-row sum."""

from __future__ import annotations

import pytest
import torch

from caldera.kernels.e8p_decode import (
    SUPPORTED,
    abs_nibbles,
    check_quantizer,
    codes_matmul_reference,
    decode_lookup,
    dequantize_codes,
    nibble_decode,
    sign_nibble_mask,
)
from caldera.quantizers.e8p_codebook import cpu_lookup
from tests.helpers import random_codes as _codes


def test_decode_lookup_reproduces_every_codeword():
    t = decode_lookup()
    c = torch.arange(1 << 16)
    assert torch.equal(t.A[c >> 8] * t.G[c & 255] + t.h[c & 255][:, None], cpu_lookup().codebook)
    assert torch.equal(t.codebook_f16.float(), cpu_lookup().codebook)  # fp16 holds the codebook exactly
    assert torch.equal(nibble_decode(c), cpu_lookup().codebook)  # the Triton decode's packed nibbles + sign XOR


def test_abs_nibbles_are_packed_as_the_triton_kernel_reads_them():
    u = (abs_nibbles()[:, None].long() >> (4 * torch.arange(8))) & 15
    assert torch.equal(u.float(), decode_lookup().A + 3.5)  # 1 KiB: 256 int32, nibble t = A[k, t] + 3.5 ≤ 7
    low = torch.arange(256)
    want = ((1 - decode_lookup().G) / 2).long() * 7  # 7 in each flipped coordinate
    got = (sign_nibble_mask(low)[:, None] >> (4 * torch.arange(8))) & 15
    assert torch.equal(got, want)


def test_rvq4_codes_decode_as_the_first_codeword_plus_the_scaled_second():
    codes = _codes(5, 3, "e8p-rvq4", seed=3).to(torch.int64)
    cb = cpu_lookup().codebook
    want = (cb[codes >> 16] + cb[codes & 0xFFFF] / 3.45).reshape(5, 24)
    torch.testing.assert_close(dequantize_codes(codes, "e8p-rvq4"), want)
    e8p = _codes(5, 3, "e8p", seed=4).to(torch.int64)
    assert torch.equal(dequantize_codes(e8p, "e8p"), cb[e8p].reshape(5, 24))


@pytest.mark.parametrize("quantizer", sorted(SUPPORTED))
@pytest.mark.parametrize("per_row", [False, True])
def test_reference_product_is_the_sum_over_each_row(quantizer, per_row):
    n, m, B = 4, 3, 2
    codes = _codes(n, m, quantizer, seed=5).to(torch.int64)
    g = torch.Generator().manual_seed(6)
    x = torch.randn(B, 8 * m, generator=g)
    scale = torch.rand(n, 1, generator=g) + 0.5 if per_row else 0.7
    Q = dequantize_codes(codes, quantizer)
    want = torch.empty(B, n)
    for b in range(B):
        for i in range(n):
            s = float(scale[i, 0]) if per_row else scale
            want[b, i] = s * sum(float(x[b, j]) * float(Q[i, j]) for j in range(8 * m))
    torch.testing.assert_close(codes_matmul_reference(x, codes, scale, quantizer), want, rtol=1e-5, atol=1e-5)


def test_check_quantizer_names_the_stages_and_refuses_others():
    assert check_quantizer("e8p") == (1, 1.0)
    assert check_quantizer("e8p-rvq4") == (2, 3.45)
    with pytest.raises(ValueError, match="no compressed-matmul kernel for quantizer 'rtn4'"):
        check_quantizer("rtn4")
    with pytest.raises(ValueError, match="no compressed-matmul kernel"):
        dequantize_codes(torch.zeros(1, 1, dtype=torch.int64), "e8p-rvq3")

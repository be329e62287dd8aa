"""Tests of caldera.quantizers.e8p_kernel: the compiled E8P search against brute force over the codebook, the
two-stage residual search against two single-stage searches, and the fused BlockLDLQ chunk against a loop over
its blocks."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from caldera.quantizers import e8p
from caldera.quantizers.e8p_codebook import cpu_lookup

kernel = pytest.importorskip("caldera.quantizers.e8p_kernel")


def _kernel_lookup():
    _, key_to_index, sum_odd, n12_abs = e8p._numba_kernel()
    return cpu_lookup().codebook.numpy(), key_to_index, sum_odd, n12_abs


def _encode(x: np.ndarray) -> np.ndarray:
    _, *t = _kernel_lookup()
    out = np.empty(x.shape[0], np.int32)
    kernel._encode_rows(np.ascontiguousarray(x, np.float32), *t, out)
    return out


def _brute_force_dist(x: np.ndarray) -> np.ndarray:
    cb = cpu_lookup().codebook.double()
    return torch.cdist(torch.from_numpy(x).double(), cb).min(1).values.numpy()


@pytest.mark.parametrize("scale", [0.3, 1.0, 3.0])
def test_encode_rows_finds_a_nearest_codeword(scale):
    x = (torch.randn(300, 8, generator=torch.Generator().manual_seed(50)) * scale).numpy()
    codes = _encode(x)
    cb = cpu_lookup().codebook.double().numpy()
    got = np.linalg.norm(x.astype(np.float64) - cb[codes], axis=1)
    np.testing.assert_allclose(got, _brute_force_dist(x), rtol=0, atol=1e-9)


def test_encode_rows_returns_each_codeword_s_own_code():
    cb = cpu_lookup().codebook.numpy()
    idx = np.arange(0, 1 << 16, 37)
    assert np.array_equal(_encode(cb[idx]), idx)


def test_encode_rvq_rows_is_two_searches_with_the_float32_residual():
    cb, *t = _kernel_lookup()
    x = torch.randn(200, 8, generator=torch.Generator().manual_seed(51)).numpy()
    rs = np.float32(3.45)
    out = np.empty(200, np.int64)
    kernel._encode_rvq_rows(x, rs, 16, cb, *t, out)
    c1 = _encode(x)
    c2 = _encode((x - cb[c1]) * rs)
    assert np.array_equal(out, (c1.astype(np.int64) << 16) | c2)


@pytest.mark.parametrize("has_F", [False, True])
def test_ldlq_chunk_equals_the_loop_over_its_blocks(has_F):
    n, c = 5, 24
    g = torch.Generator().manual_seed(52)
    W = torch.randn(n, c, generator=g).numpy()
    F = (0.3 * torch.randn(n, c, generator=g)).numpy()
    Lc = torch.tril(0.2 * torch.randn(c, c, generator=g), -1).numpy() + np.eye(c, dtype=np.float32)
    cb, *t = _kernel_lookup()
    W_hat, delta = np.empty((n, c), np.float32), np.empty((n, c), np.float32)
    codes = np.empty((n, c // 8), np.int32)
    kernel._ldlq_chunk(F, has_F, Lc, W, cb, *t, W_hat, delta, codes)

    want_codes = np.empty((n, c // 8), np.int32)
    want_delta = np.zeros((n, c), np.float64)
    for b in range(c // 8 - 1, -1, -1):
        cols = slice(8 * b, 8 * b + 8)
        base = (W[:, cols] + F[:, cols]) if has_F else W[:, cols]
        feedback = want_delta[:, 8 * b + 8 :] @ Lc[8 * b + 8 :, cols].astype(np.float64)
        x = (base.astype(np.float64) + feedback).astype(np.float32)
        want_codes[:, b] = _encode(x)
        want_delta[:, cols] = W[:, cols] - cb[want_codes[:, b]]
    assert np.array_equal(codes, want_codes)
    assert np.array_equal(W_hat, cb[want_codes].reshape(n, c))
    assert np.array_equal(delta, want_delta.astype(np.float32))

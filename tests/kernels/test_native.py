"""Tests of caldera.kernels.native: the int8 LUT, the layout and build-record checks, the row / column range
products of the C kernels, and the prepared fused layer against the dequantized reference.

The loading of the extension (missing, damaged or foreign builds, the variants) is tested with its build in
``tests/kernels/test_native_build.py``."""

from __future__ import annotations

import copy
import hashlib
import pickle

import numpy as np
import pytest
import torch

from caldera.kernels import native
from caldera.kernels.e8p_decode import SUPPORTED, codes_matmul_reference, dequantize_codes
from caldera.kernels.factors import Factors
from caldera.quantizers.e8p_codebook import cpu_lookup
from tests.helpers import kernel_close as _close
from tests.helpers import random_codes as _codes

needs_ext = pytest.mark.skipif(not native.available(), reason="the C extension is not built")


def test_int8_codebook_is_four_times_the_codebook():
    assert torch.equal(torch.from_numpy(native.int8_codebook()).float() / 4, cpu_lookup().codebook)  # int8 LUT: exact
    assert native.int8_codebook().dtype == np.int8 and native.int8_codebook().flags["C_CONTIGUOUS"]


def test_layout_mismatch_names_the_struct_that_differs():
    layout = native.mirror_layout()
    assert native.layout_mismatch(layout) is None
    assert set(layout) == set(native.MIRRORS)
    layout["caldera_mm_t_args"] = dict(layout["caldera_mm_t_args"], sizeof=1)
    assert "caldera_mm_t_args" in native.layout_mismatch(layout)
    assert "caldera_mm_args" in native.layout_mismatch({})


def test_build_problem_compares_the_file_with_its_record(tmp_path):
    mod = tmp_path / "mod.so"
    mod.write_bytes(b"built bytes")
    assert "no build record" in native.build_problem(str(mod))
    (tmp_path / ("mod.so" + native.HASH_SUFFIX)).write_text(hashlib.sha256(b"built bytes").hexdigest() + "\n")
    assert native.build_problem(str(mod)) is None
    mod.write_bytes(b"built byte")  # truncated
    assert "truncated or damaged" in native.build_problem(str(mod))


def test_one_byte_codes_are_refused():
    with pytest.raises(ValueError, match="2-, 4- or 8-byte"):
        native.codes_mm_rows(np.zeros((1, 8), np.float32), np.zeros((1, 1), np.uint8), 1, 1.0,
                             np.ones(1, np.float32), np.zeros((1, 1), np.float32), 0, 1)  # fmt: skip


def _kernel_args(quantizer, rows, m, seed):
    """``(codes, stages, 1 / residual scale)`` of random codes as the C calls take them."""
    stages, rs = SUPPORTED[quantizer]
    return _codes(rows, m, quantizer, seed=seed), stages, 1.0 / rs


@needs_ext
@pytest.mark.parametrize("quantizer", sorted(SUPPORTED))
def test_codes_mm_rows_writes_exactly_its_rows(quantizer):
    n, m, B = 11, 3, 3
    codes, stages, inv_rs = _kernel_args(quantizer, n, m, seed=40)
    g = torch.Generator().manual_seed(41)
    x = torch.randn(B, 8 * m, generator=g)
    scale = torch.rand(n, generator=g) + 0.5
    y = np.full((B, n), 7.0, np.float32)
    native.codes_mm_rows(x.numpy(), codes.numpy(), stages, inv_rs, scale.numpy(), y, 2, 9)
    ref = codes_matmul_reference(x, codes.long(), scale[:, None], quantizer)
    _close(torch.from_numpy(y[:, 2:9]), ref[:, 2:9])
    assert (y[:, :2] == 7).all() and (y[:, 9:] == 7).all()


@needs_ext
@pytest.mark.parametrize("quantizer", sorted(SUPPORTED))
def test_codes_mm_t_cols_adds_to_exactly_its_columns(quantizer):
    k, m, B = 3, 5, 2
    codes, stages, inv_rs = _kernel_args(quantizer, k, m, seed=42)
    t = torch.randn(B, k, generator=torch.Generator().manual_seed(43))
    y = np.ones((B, 8 * m), np.float32)
    native.codes_mm_t_cols(t.numpy(), codes.numpy(), stages, inv_rs, 0.6, y, 1, 4)
    ref = 0.6 * t @ dequantize_codes(codes.long(), quantizer) + 1
    _close(torch.from_numpy(y[:, 8:32]), ref[:, 8:32])
    assert (y[:, :8] == 1).all() and (y[:, 32:] == 1).all()


@needs_ext
@pytest.mark.parametrize("q_dtype", [torch.uint16, torch.int32, torch.int64])
def test_fused_layer_with_code_factors_and_trainable_part_equals_the_dense_layer(q_dtype):
    n, d, k, r, B = 16, 24, 3, 2, 4
    g = torch.Generator().manual_seed(44)
    Q_codes = _codes(n, d // 8, "e8p", seed=45)
    Q_scale = torch.rand(n, 1, generator=g) + 0.5
    Lc, Rc = _codes(k, n // 8, "e8p-rvq4", seed=46), _codes(k, d // 8, "e8p-rvq4", seed=47).to(torch.int64)
    f = Factors(L_codes=Lc, L_scale=torch.tensor(0.05), R_codes=Rc, R_scale=torch.tensor(0.07), quantizer="e8p-rvq4")
    L_ft, R_ft = torch.randn(n, r, generator=g).bfloat16(), torch.randn(r, d, generator=g).bfloat16()
    bias = torch.randn(n, generator=g)
    layer = native.fused_layer(Q_codes.to(torch.int64).to(q_dtype), Q_scale, None, None, f, (L_ft, R_ft), bias)
    W = (Q_scale * dequantize_codes(Q_codes, "e8p")
         + (0.05 * dequantize_codes(Lc, "e8p-rvq4").T) @ (0.07 * dequantize_codes(Rc, "e8p-rvq4"))
         + L_ft.float() @ R_ft.float())  # fmt: skip
    x = torch.randn(B, d, generator=g)
    _close(layer(x), x @ W.T + bias)
    assert copy.deepcopy(layer) is None and pickle.loads(pickle.dumps(layer)) is None
    with pytest.raises(ValueError, match="Q_scale"):
        native.fused_layer(Q_codes, torch.ones(3), None, None, None, None, None)

"""Tests of caldera.nn.format: codes in their smallest dtype, decoding through the quantizer registry, and the
checks of a stored layer's tensors against its metadata."""

from __future__ import annotations

import pytest
import torch

from caldera.nn.format import dequantize, narrow_codes, stored_tensor_problem
from caldera.quantizers.e8p_codebook import cpu_lookup
from tests.helpers import random_codes as _codes

N, D = 16, 24
#: the candidate dtypes, smallest first, in the order narrow_codes tries them
DTYPES = (torch.uint8, torch.int8, torch.uint16, torch.int16, torch.uint32, torch.int32, torch.int64)


def test_narrow_codes_picks_uint32_for_large_positive_and_int32_once_negative():
    assert narrow_codes(torch.tensor([0, 70000])).dtype == torch.uint32
    assert narrow_codes(torch.tensor([-1, 70000])).dtype == torch.int32


@pytest.mark.parametrize(
    "values", [[0, 255], [-1, 127], [0, 256], [-129, 5], [0, 1 << 16], [-(1 << 15) - 1, 0], [0, 1 << 32], [-1, 1 << 31]]
)
def test_narrow_codes_is_the_first_dtype_that_holds_the_values(values):
    codes = torch.tensor(values, dtype=torch.int64)
    want = next(dt for dt in DTYPES if torch.iinfo(dt).min <= min(values) and max(values) <= torch.iinfo(dt).max)
    got = narrow_codes(codes)
    assert got.dtype == want
    assert torch.equal(got.to(torch.int64), codes)


def test_narrow_codes_refuses_non_integers_and_keeps_empty_codes_small():
    assert narrow_codes(torch.zeros(0, 3, dtype=torch.int64)).dtype == torch.uint8
    for bad in (torch.zeros(2), torch.zeros(2, dtype=torch.bool)):
        with pytest.raises(ValueError, match="integer tensor"):
            narrow_codes(bad)


def test_dequantize_restores_the_codes_dtype_and_scales_the_codewords():
    codes = _codes(N, D // 8, "e8p", seed=70).to(torch.int64)
    scale = torch.rand(N, 1, generator=torch.Generator().manual_seed(71)) + 0.5
    got = dequantize("e8p", narrow_codes(codes), scale, "int32")
    assert got.dtype == torch.float32
    torch.testing.assert_close(got, scale * cpu_lookup().codebook[codes].reshape(N, D))


def _stored(lr_format="quantized"):
    g = torch.Generator().manual_seed(72)
    meta = {
        "version": 1, "method": "caldera", "in_features": D, "out_features": N, "q_quantizer": "e8p",
        "q_codes_dtype": "int32", "rht": True, "rank": 3, "ft_rank": 1, "lr_format": lr_format,
        "l_quantizer": None, "r_quantizer": None, "lr_codes_dtype": None, "signs_trainable": False, "bias": False,
        "ft_dtype": "bfloat16",
    }  # fmt: skip
    ts = {
        "Q_codes": _codes(N, D // 8, "e8p", seed=73), "Q_scale": torch.rand(N, 1, generator=g) + 0.1,
        "S_U": torch.ones(D, dtype=torch.int8), "S_V": -torch.ones(N, dtype=torch.int8),
        "L_ft": torch.zeros(N, 1, dtype=torch.bfloat16), "R_ft": torch.zeros(1, D, dtype=torch.bfloat16),
    }  # fmt: skip
    if lr_format == "quantized":
        meta.update(l_quantizer="e8p-rvq4", r_quantizer="e8p-rvq4", lr_codes_dtype="int64")
        ts.update(L_codes=_codes(2, N // 8, "e8p-rvq4", seed=74), L_scale=torch.tensor(0.05),
                  R_codes=_codes(2, D // 8, "e8p-rvq4", seed=75), R_scale=torch.tensor(0.07))  # fmt: skip
    else:
        ts.update(L_16=torch.zeros(N, 2, dtype=torch.float16), R_16=torch.zeros(2, D, dtype=torch.float16))
    return meta, ts


@pytest.mark.parametrize("lr_format", ["quantized", "float16"])
def test_a_consistent_layer_has_no_problem(lr_format):
    assert stored_tensor_problem(*_stored(lr_format)) is None


@pytest.mark.parametrize(
    ("name", "bad", "message"),
    [
        ("Q_codes", torch.zeros(N, D // 8), "integer dtype"),
        ("Q_codes", torch.zeros(N, D // 4, dtype=torch.int32), "have shape"),
        ("Q_scale", -torch.ones(N, 1), "negative or non-finite"),
        ("Q_scale", torch.ones(N, 1, dtype=torch.float64), "float32"),
        ("S_U", torch.full((D,), 2, dtype=torch.int8), "other than ±1"),
        ("S_V", torch.ones(N + 1, dtype=torch.int8), "expected"),
        ("L_codes", torch.zeros(2, N // 8), "integer dtype"),
        ("R_scale", torch.tensor(-1.0), "negative"),
        ("L_ft", torch.zeros(N, 1), "bfloat16"),
    ],
)
def test_each_mismatch_is_named(name, bad, message):
    meta, ts = _stored()
    ts[name] = bad
    problem = stored_tensor_problem(meta, ts)
    assert problem is not None and problem[0] == name and message in problem[1], problem



def _trainable(signs: list[float]):
    """The layer of :func:`_stored` as RHT fine-tuning stores it (float32 signs, ``signs_trainable``), its S_U
    starting with ``signs``."""
    meta, ts = _stored()
    meta["signs_trainable"] = True
    ts["S_U"], ts["S_V"] = ts["S_U"].float(), ts["S_V"].float()
    ts["S_U"][: len(signs)] = torch.tensor(signs)
    return meta, ts


def test_trainable_signs_may_take_any_finite_nonzero_value():
    assert stored_tensor_problem(*_trainable([0.5, -1.25, 3e-4])) is None


@pytest.mark.parametrize("bad", [0.0, -0.0, float("nan"), float("inf"), float("-inf")])
def test_a_zero_or_non_finite_trainable_sign_is_named(bad):
    """A zero sign zeroes a whole column of the transform, a non-finite one poisons it: refused like a sign other
    than ±1 is when the signs are not trainable."""
    assert stored_tensor_problem(*_trainable([0.5, bad, bad])) == (
        "S_U", f"holds 2 zero or non-finite values (e.g. {bad:g}); trainable signs are finite and nonzero (a zero "
               "sign zeroes a whole row or column of the transform, a non-finite one poisons it)")


def test_a_bias_of_another_shape_or_an_integer_dtype_is_named():
    meta, ts = _stored()
    meta["bias"] = True
    ts["bias"] = torch.zeros(N + 1)
    assert stored_tensor_problem(meta, ts)[0] == "bias"
    ts["bias"] = torch.zeros(N, dtype=torch.int64)
    assert stored_tensor_problem(meta, ts)[0] == "bias"


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_floating_bias_is_accepted(dtype):
    meta, ts = _stored()
    meta["bias"] = True
    ts["bias"] = torch.zeros(N, dtype=dtype)
    assert stored_tensor_problem(meta, ts) is None


def test_sixteen_bit_factors_of_another_shape_or_dtype_are_named():
    meta, ts = _stored("float16")
    ts["L_16"] = torch.zeros(N, 3, dtype=torch.float16)
    assert stored_tensor_problem(meta, ts)[0] == "L_16"
    meta, ts = _stored("float16")
    ts["R_16"] = torch.zeros(2, D)
    assert stored_tensor_problem(meta, ts) == ("R_16", "has dtype float32; the metadata says float16")


def test_a_zero_scale_needs_the_codes_of_zero():
    meta, ts = _stored()
    ts["Q_scale"][3] = 0
    problem = stored_tensor_problem(meta, ts)
    assert problem is not None and problem[0] == "Q_scale" and "is 0 where the codes" in problem[1]
    meta, ts = _stored()
    ts["R_scale"] = torch.tensor(0.0)
    assert stored_tensor_problem(meta, ts)[0] == "R_scale"


def _factor_bits():
    """Every (q_bits, l_bits, r_bits) of the three bit tables, with whether CalderaConfig accepts it."""
    import itertools

    from caldera import CalderaConfig
    from caldera.algorithm.config import LR_BITS, Q_BITS

    for q, lb, rb in itertools.product(Q_BITS, LR_BITS, LR_BITS):
        try:
            CalderaConfig.preset("paper", rank=8, q_bits=q, l_bits=lb, r_bits=rb)
            yield q, lb, rb, True
        except ValueError:
            yield q, lb, rb, False


@pytest.mark.parametrize("q_bits, l_bits, r_bits, accepted", list(_factor_bits()))
def test_every_factor_bits_the_config_accepts_is_stored_and_read_back(q_bits, l_bits, r_bits, accepted):
    """The format stores every accepted (q_bits, l_bits, r_bits), e.g. 2-bit L with 4-bit R, whose codes need a
    wider dtype than L's (r_codes_dtype): written to safetensors bytes and read back, the layer decodes to the
    decomposition's Q + L R and its tensors pass the scheme's checks. The config refuses exactly what the format
    cannot store: quantized factors beside 16-bit ones (one lr_format per layer)."""
    from safetensors.torch import load, save

    from caldera import CalderaConfig, caldera_decompose
    from caldera.nn.compressed_linear import CompressedLinear

    if not accepted:
        assert (l_bits == 16) != (r_bits == 16)
        return
    g = torch.Generator().manual_seed(q_bits * 100 + l_bits * 10 + r_bits)
    W, X = torch.randn(N, 64, generator=g), torch.randn(256, 64, generator=g)
    cfg = CalderaConfig.preset("paper", rank=8, q_bits=q_bits, l_bits=l_bits, r_bits=r_bits, outer_iters=1,
                               inner_iters=1)
    dec = caldera_decompose(W, X.T @ X / 256, cfg)
    mod = CompressedLinear.from_decomposition(dec)
    meta, tensors = mod.metadata(), load(save({k: v.contiguous() for k, v in mod.state_dict().items()}))
    assert stored_tensor_problem(meta, tensors) is None
    back = CompressedLinear.from_tensors(meta, tensors)
    want = (dec.Q + dec.L @ dec.R).float()
    torch.testing.assert_close(back.rotated_weight(), want, rtol=0, atol=1e-5 * float(want.abs().max()))
    if l_bits != 16 and torch.iinfo(dec.R_codes.codes.dtype).bits > torch.iinfo(dec.L_codes.codes.dtype).bits:
        assert meta["r_codes_dtype"] == str(dec.R_codes.codes.dtype).removeprefix("torch.")
    else:
        assert "r_codes_dtype" not in meta  # the layouts that stored before are written byte for byte as before

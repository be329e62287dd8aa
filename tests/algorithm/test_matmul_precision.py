"""caldera.algorithm.matmul_precision: which float32 arithmetic a decomposition gets, its accuracy, and that the
caller's torch setting survives the call."""

import pytest
import torch

from caldera import CalderaConfig, caldera_decompose
from caldera.algorithm import matmul_precision
from tests.helpers import llm_like

needs_flag = pytest.mark.skipif(
    matmul_precision._flag() is None, reason="torch < 2.9: no oneDNN float32 precision setting"
)


def _flag_value() -> str:
    return matmul_precision._flag().fp32_precision


@pytest.fixture
def native(monkeypatch):
    """Pretend the CPU has bfloat16 instructions that keep float32 accuracy and no pin is set (the case where "auto"
    picks bf16)."""
    monkeypatch.setattr(matmul_precision, "bf16_native", lambda: True)
    monkeypatch.setattr(matmul_precision, "bf16_accurate", lambda: True)
    for v in matmul_precision.PIN_VARS:
        monkeypatch.delenv(v, raising=False)


@needs_flag
def test_auto_picks_bf16_only_on_an_unpinned_bf16_cpu(native, monkeypatch):
    assert matmul_precision.resolve("auto", "cpu") == "bf16"
    assert matmul_precision.resolve("auto", "meta") == "ieee"  # not a CPU tensor: oneDNN does not run it
    assert matmul_precision.resolve("ieee", "cpu") == "ieee"
    assert matmul_precision.resolve("bf16", "cpu") == "bf16"
    for var, value in (("MKL_CBWR", "AVX2"), ("ATEN_CPU_CAPABILITY", "avx2")):  # numerics: avx2 / portable pins
        monkeypatch.setenv(var, value)
        assert matmul_precision.resolve("auto", "cpu") == "ieee"
        monkeypatch.delenv(var)
    monkeypatch.setattr(matmul_precision, "bf16_native", lambda: False)
    assert matmul_precision.resolve("auto", "cpu") == "ieee"
    monkeypatch.setattr(matmul_precision, "bf16_native", lambda: True)
    monkeypatch.setattr(matmul_precision, "bf16_accurate", lambda: False)  # a plain bfloat16 product (AMX here)
    assert matmul_precision.resolve("auto", "cpu") == "ieee"
    assert matmul_precision.resolve("bf16", "cpu") == "bf16"  # asked for by name: given


@needs_flag
def test_the_accuracy_probe_agrees_with_a_measured_product():
    """bf16_accurate() says what a fresh measurement on another product says: float32 accuracy (within 4× IEEE's
    error) or a bfloat16 product's (above 1e-4). It restores the caller's setting."""
    g = torch.Generator().manual_seed(7)
    A, B = torch.randn(384, 256, generator=g), torch.randn(256, 320, generator=g)
    before = _flag_value()
    accurate = matmul_precision.bf16_accurate()
    assert _flag_value() == before
    e = _product_errors(A, B)
    assert (e["bf16"] <= 4 * e["ieee"]) == accurate and (e["bf16"] > 1e-4) == (not accurate), e


def test_unknown_mode_is_refused():
    with pytest.raises(ValueError, match="fp32_matmul='fast'.*auto \\| ieee \\| bf16"):
        matmul_precision.resolve("fast", "cpu")
    with pytest.raises(ValueError, match="CalderaConfig.fp32_matmul='tf32'"):
        CalderaConfig(fp32_matmul="tf32")


def test_bf16_without_the_torch_setting_is_refused(monkeypatch):
    monkeypatch.setattr(matmul_precision, "_flag", lambda: None)
    with pytest.raises(ValueError, match="torch >= 2.9"):
        matmul_precision.resolve("bf16", "cpu")
    assert matmul_precision.resolve("auto", "cpu") == "ieee"


@needs_flag
def test_scoped_sets_then_restores_the_callers_setting():
    flag = matmul_precision._flag()
    before = flag.fp32_precision
    try:
        flag.fp32_precision = "bf16"  # a caller who chose bf16 globally gets IEEE inside an "ieee" scope ...
        with matmul_precision.scoped("ieee", "cpu") as eff:
            assert eff == "ieee" and _flag_value() == "ieee"
        assert _flag_value() == "bf16"  # ... and their own setting back
        with pytest.raises(RuntimeError):
            with matmul_precision.scoped("bf16", "cpu"):
                flag.fp32_precision = "ieee"
                raise RuntimeError("inside")
        assert _flag_value() == "bf16"  # restored after an exception too
    finally:
        flag.fp32_precision = before


def _product_errors(A: torch.Tensor, B: torch.Tensor, small: torch.Tensor | None = None) -> dict[str, float]:
    """Relative Frobenius error of ``A @ B`` under each arithmetic against float64 (against the product of ``small``,
    the part of A that a coarse arithmetic would drop, when given)."""
    ref = A.double() @ B.double()
    scale = (small.double() @ B.double()).norm() if small is not None else ref.norm()
    out = {}
    for mode in ("ieee", "bf16"):
        with matmul_precision.scoped(mode, "cpu"):
            out[mode] = float((((A @ B).double() - ref).norm() / scale))
    return out


@needs_flag
@pytest.mark.skipif(matmul_precision._flag() is not None and not matmul_precision.bf16_accurate(),
                    reason="oneDNN's bf16 mode is a plain bfloat16 product on this CPU; auto gives IEEE here")
def test_bf16_arithmetic_is_float32_accurate_not_a_bfloat16_product():
    """The speed-up is worth taking only because oneDNN's bf16 mode keeps float32 accuracy (measured ≈ 2× IEEE's
    error): a plain bfloat16 product (8 mantissa bits) has a relative error ≈ 1e-3 and drops an operand term of
    relative size 2⁻¹⁶ entirely. Either would fail here."""
    g = torch.Generator().manual_seed(0)
    A, B = torch.randn(256, 512, generator=g), torch.randn(512, 256, generator=g)
    e = _product_errors(A, B)
    assert e["bf16"] <= 4 * e["ieee"] and e["bf16"] < 2e-6
    bf = (A.bfloat16() @ B.bfloat16()).double()
    assert float((bf - A.double() @ B.double()).norm() / (A.double() @ B.double()).norm()) > 1e-4  # the contrast
    small = 2.0**-16 * torch.randn(256, 512, generator=g)
    e = _product_errors(torch.ones(256, 512) + small, B, small)
    assert e["bf16"] <= 4 * e["ieee"] and e["bf16"] < 0.1


def _cfg(**kw) -> CalderaConfig:
    return CalderaConfig(rank=16, outer_iters=2, inner_iters=2, svd="exact", **kw)


@needs_flag
def test_decomposition_records_the_arithmetic_and_restores_the_setting(native):
    W, H = llm_like(64, 128, seed=1)
    before = _flag_value()
    dec = caldera_decompose(W, H, _cfg())
    assert dec.config["fp32_matmul"] == "bf16"  # "auto" resolved on this (pretended) bf16 CPU
    assert _flag_value() == before
    dec = caldera_decompose(W, H, _cfg(fp32_matmul="ieee"))
    assert dec.config["fp32_matmul"] == "ieee"
    assert CalderaConfig.from_dict(dec.config).fp32_matmul == "ieee"  # the recorded config round-trips


@needs_flag
def test_decomposition_error_is_the_same_under_either_arithmetic():
    """Statistically the same decomposition: LDLQ turns last-bit differences into other codes, so the errors are
    not bitwise equal, but the data-aware error stays within 1 % (measured at 4096×4096: ENGINE.md)."""
    W, H = llm_like(128, 256, seed=2)
    errs = {m: caldera_decompose(W, H, _cfg(fp32_matmul=m)).error for m in ("ieee", "bf16")}
    assert abs(errs["bf16"] - errs["ieee"]) <= 0.01 * errs["ieee"], errs

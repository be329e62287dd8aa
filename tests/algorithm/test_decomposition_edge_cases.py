"""Numerical edge cases of caldera_decompose (and, for inputs that require grad or hold no values, of the other
entry points and every registered method): every input gets a correct result or a clear error naming the argument
and the fix.

Oracles: the decomposition is exactly equivariant under power-of-two scalings of W (the algorithm scales W by
an exact power of two and back), the data-aware relative error recomputed in float64 from the reconstruction,
and the closed form of W = 0 (Ŵ = 0 exactly).
"""

from __future__ import annotations

import pytest
import torch

from caldera import CalderaConfig, caldera_decompose
from caldera.algorithm.decomposition import HessianContext
from caldera.nn.compressed_linear import CompressedLinear
from tests.helpers import gen

CFG = CalderaConfig(rank=2, outer_iters=2, inner_iters=2)


@pytest.fixture(scope="module")
def problem():
    g = gen(0)
    W = torch.randn(32, 32, generator=g)
    X = torch.randn(256, 32, generator=g)
    return W, X.T @ X / 256


def true_rel_error(dec, W, H) -> float:
    """‖(Ŵ − W)Xᵀ‖/‖WXᵀ‖ through H, in float64 (the unregularized H: an independent oracle)."""
    E = dec.reconstruction().double() - W.double()
    Hd = H.double()
    Wd = W.double()
    return float(torch.einsum("ij,jk,ik->", E, Hd, E) / torch.einsum("ij,jk,ik->", Wd, Hd, Wd)) ** 0.5


# ----------------------------------------------------------------------------------------------- W = 0


@pytest.mark.parametrize(
    "cfg",
    [CFG, CFG.replace(rht=False), CFG.replace(l_bits=16, r_bits=16, hessian_update=False), CFG.replace(q_bits=4)],
    ids=["default", "no-rht", "16bit-factors", "q4"],
)
def test_all_zero_W_is_exact(problem, cfg):
    _, H = problem
    W = torch.zeros(32, 32)
    dec = caldera_decompose(W, H, cfg)
    assert dec.error == 0.0 and dec.error_trace == [] and dec.best_iter == -1
    assert not dec.Q.any() and not dec.L.any() and not dec.R.any() and dec.rank == 2
    assert not dec.reconstruction().any()
    assert float(dec.Q_scale) == 0.0
    # storable like any other matrix (the codes/scale reproduce Q; RHT signs as the general path draws them)
    mod = CompressedLinear.from_decomposition(dec, bias=torch.arange(32.0))
    assert not mod.weight_reconstruction().any()
    x = torch.randn(3, 32, generator=gen(1))
    assert torch.equal(mod(x), torch.arange(32.0).expand(3, 32))
    if cfg.rht:
        ref = caldera_decompose(problem[0], H, cfg)
        assert torch.equal(dec.rht.S_U, ref.rht.S_U) and torch.equal(dec.rht.S_V, ref.rht.S_V)


def test_all_zero_W_with_a_shared_context_uses_its_signs(problem):
    _, H = problem
    ctx = HessianContext.prepare(H, rht=True, seed=123)
    dec = caldera_decompose(torch.zeros(16, 32), H, CFG, context=ctx)
    assert dec.rht.S_U is ctx.S_U and not dec.reconstruction().any()


# ----------------------------------------------------------------------------------- tiny and huge W


@pytest.mark.parametrize("k", [-100, -70, 64, 100])
def test_power_of_two_scaled_W_gives_the_exactly_scaled_result(problem, k):
    """2^-100 ≈ 7.9e-31 (the float32 squares underflow), 2^64 ≈ 1.8e19 (they overflow: _LinAlgError before)."""
    W, H = problem
    ref = caldera_decompose(W, H, CFG)
    dec = caldera_decompose(W * 2.0**k, H, CFG)
    assert dec.error == ref.error and dec.best_iter == ref.best_iter
    assert torch.equal(dec.Q, ref.Q * 2.0**k) and torch.equal(dec.Q_codes, ref.Q_codes)
    assert torch.equal(dec.Q_scale, ref.Q_scale * 2.0**k)
    assert torch.equal(dec.L @ dec.R, (ref.L @ ref.R) * 2.0**k)
    assert torch.equal(dec.L_codes.codes, ref.L_codes.codes) and torch.equal(dec.R_codes.codes, ref.R_codes.codes)
    mod = CompressedLinear.from_decomposition(dec)  # the codes and scales reproduce Q, L, R
    torch.testing.assert_close(mod.weight_reconstruction(), ref.reconstruction() * 2.0**k, rtol=1e-5, atol=0)


@pytest.mark.parametrize("mag", [1e-30, 1e-20, 1e18, 1e30])
def test_tiny_and_huge_W_have_the_true_error(problem, mag):
    """At magnitudes where a float32 RMS underflows (1e-30: a scale of 1 would give an error of 6e27) or where
    the factorizations overflow (1e18), dec.error is the true relative error and matches the unit-scale
    problem's."""
    W, H = problem
    ref = caldera_decompose(W, H, CFG)
    dec = caldera_decompose(W * mag, H, CFG)
    true = true_rel_error(dec, W * mag, H)
    assert dec.error == pytest.approx(true, rel=1e-2)  # dec.error uses the regularized H
    assert true == pytest.approx(true_rel_error(ref, W, H), rel=1e-3)
    assert float(dec.reconstruction().abs().max()) == pytest.approx(float(ref.reconstruction().abs().max()) * mag,
                                                                    rel=1e-3)


def test_tiny_float64_W_is_scaled_before_the_float32_cast(problem):
    W, H = problem
    ref = caldera_decompose(W, H, CFG)
    dec = caldera_decompose(W.double() * 2.0**-110, H, CFG)  # W², ~1e-66, exists in float64 only
    assert dec.error == ref.error and torch.equal(dec.Q, ref.Q * 2.0**-110)


@pytest.mark.parametrize("W_fn", [lambda W: W.double() * 1e-50, lambda W: W.double() * 1e50, lambda W: W * 1e-40],
                         ids=["float64-1e-50", "float64-1e50", "float32-subnormal"])
def test_magnitudes_outside_float32_are_a_clear_error(problem, W_fn):
    W, H = problem
    with pytest.raises(ValueError, match=r"W has max \|entry\| .* outside \[.*\].*rescale W"):
        caldera_decompose(W_fn(W), H, CFG)


# ------------------------------------------------------------------------------------- shapes and config


def test_block_multiples_name_W_and_the_fix():
    with pytest.raises(ValueError, match=r"W has d=36 columns.*pad W with zero columns and H"):
        caldera_decompose(torch.randn(32, 36), torch.eye(36), CFG)
    with pytest.raises(ValueError, match=r"W has n=36 rows.*pad W with zero rows, or use 16-bit factors"):
        caldera_decompose(torch.randn(36, 32), torch.eye(32), CFG)


def test_sigma_reg_zero_is_refused_at_config_time():
    with pytest.raises(ValueError, match=r"sigma_reg=0\.0 is invalid; accepted: a float in \(0, 1\).*singular"):
        CalderaConfig(sigma_reg=0.0)
    with pytest.raises(ValueError, match=r"sigma_reg=True"):
        CalderaConfig(sigma_reg=True)
    assert CalderaConfig(sigma_reg=1e-6).sigma_reg == 1e-6


def test_seed_range(problem):
    W, H = problem
    for bad in (2**64 - 1, 2**63, -1):
        with pytest.raises(ValueError, match=r"seed=.* is invalid; accepted: an integer in \[0, 2\*\*63\)"):
            CalderaConfig(seed=bad)
    dec = caldera_decompose(W, H, CFG.replace(seed=2**63 - 1))  # the largest: seed + 2 still fits
    assert dec.error == pytest.approx(true_rel_error(dec, W, H), rel=1e-2)


@pytest.mark.parametrize("field", ["q_bits", "l_bits", "r_bits"])
def test_integral_float_bits_get_a_non_contradicting_message(field):
    msg = rf"{field}=4\.0 is invalid; accepted: one of the integers .*: write 4, not 4\.0"
    with pytest.raises(ValueError, match=msg):
        CalderaConfig(**{field: 4.0})
    with pytest.raises(ValueError, match=rf"{field}=5 is invalid; accepted: one of the integers"):
        CalderaConfig(**{field: 5})


# ------------------------------------------------------------------ inputs that require grad or hold no values


def _entry_points(problem):
    """(name, call(W, H)) of the public entry points that take a weight matrix (and a Hessian)."""
    from caldera.algorithm.ldlq import ldlq_quantize, nearest_quantize
    from caldera.algorithm.lplr import lplr_factorize
    from caldera.quantizers import get_quantizer, quantize_scaled

    e8p = get_quantizer("e8p")
    eye = torch.eye(32)
    return {
        "caldera_decompose": lambda W, H: caldera_decompose(W, H, CFG).reconstruction(),
        "ldlq_quantize": lambda W, H: ldlq_quantize(W, H + eye.to(H.device), e8p).codes,
        "nearest_quantize": lambda W, H: nearest_quantize(W, e8p).codes,
        "lplr_factorize": lambda W, H: lplr_factorize(W, (H + eye.to(H.device)).double(), 2, e8p, e8p, 1).L,
        "quantize_scaled": lambda W, H: quantize_scaled(e8p, W).codes,
        "e8p-rvq4.quantize": lambda W, H: get_quantizer("e8p-rvq4").quantize(W),
        "identity.quantize": lambda W, H: get_quantizer("identity").quantize(W),
    }


ENTRY_POINTS = ["caldera_decompose", "ldlq_quantize", "nearest_quantize", "lplr_factorize", "quantize_scaled",
                "e8p-rvq4.quantize", "identity.quantize"]


@pytest.mark.parametrize("name", ENTRY_POINTS)
@pytest.mark.parametrize("which", ["W", "H"])
def test_inputs_that_require_grad_give_the_same_result(problem, name, which):
    """A W (or H) with requires_grad=True, e.g. a model's parameter: read as data, the same result as without."""
    W, H = problem
    call = _entry_points(problem)[name]
    W2, H2 = (W.clone().requires_grad_(), H) if which == "W" else (W, H.clone().requires_grad_())
    assert torch.equal(call(W2, H2), call(W, H))


@pytest.mark.parametrize("name", ENTRY_POINTS)
@pytest.mark.parametrize("which", ["W", "H"])
def test_meta_inputs_are_a_clear_error(problem, name, which):
    """A tensor on the meta device (a model built on meta, weights not loaded): a ValueError naming the
    argument and the fix, not a raw torch error."""
    W, H = problem
    call = _entry_points(problem)[name]
    if which == "H" and name in ("nearest_quantize", "quantize_scaled", "e8p-rvq4.quantize", "identity.quantize"):
        pytest.skip("takes no Hessian")
    args = (W.to("meta"), H) if which == "W" else (W, H.to("meta"))
    with pytest.raises(ValueError, match=r"\w+ is on the meta device: it has a shape \(32, 32\) but no values.*"
                                         r"load the weights first"):
        call(*args)


# every registered method, called as the pipeline calls it: fn(W, H, config, context=None) -> Decomposition

#: parameters that make each method quick on the 32×32 problem; a method not named here runs with its defaults
#: (and fails loudly if they do not fit the problem)
SMALL_PARAMS = {
    "caldera": {"rank": 2, "outer_iters": 2, "inner_iters": 2},
    "caldera-rank-per-layer": {"rank": 2, "min_rank": 2, "rank_multiple": 2, "outer_iters": 2, "inner_iters": 2},
    "loftq": {"rank": 2, "block": 32, "iters": 1},
    "quip#-lr": {"lr_rank": 2},
}


def _methods() -> list[str]:
    from caldera.methods import registered_methods

    return registered_methods()


def _run_method(name, W, H):
    from caldera.methods import get_method

    spec = get_method(name)
    return spec.fn(W, H, spec.make_config(SMALL_PARAMS.get(name, {})))


def _tensors(dec) -> dict:
    """Every tensor a Decomposition holds, by field (the RHT's signs too)."""
    import dataclasses

    out = {f.name: getattr(dec, f.name) for f in dataclasses.fields(dec)}
    if dec.rht is not None:
        out.update({f"rht.{k}": v for k, v in vars(dec.rht).items()})
    return {k: v for k, v in out.items() if isinstance(v, torch.Tensor)}


@pytest.mark.parametrize("name", _methods())
@pytest.mark.parametrize("which", ["W", "H"])
def test_every_method_reads_inputs_that_require_grad_as_data(problem, name, which):
    """A W (or H) with requires_grad=True (a model's parameter): the same decomposition as without, and no tensor of
    it carries an autograd graph (one would reach the checkpoint writer, which cannot save it)."""
    W, H = problem
    W2, H2 = (W.clone().requires_grad_(), H) if which == "W" else (W, H.clone().requires_grad_())
    got, want = _run_method(name, W2, H2), _run_method(name, W, H)
    tensors = _tensors(got)
    assert [k for k, t in tensors.items() if t.requires_grad] == []
    assert tensors.keys() == _tensors(want).keys()
    assert all(torch.equal(t, _tensors(want)[k]) for k, t in tensors.items()), name
    assert got.error == want.error and isinstance(got.error, float)


@pytest.mark.parametrize("name", _methods())
@pytest.mark.parametrize("which", ["W", "H"])
def test_every_method_refuses_meta_inputs_clearly(problem, name, which):
    """A W or H on the meta device: the ValueError naming the argument and the fix, from every method."""
    W, H = problem
    args = (W.to("meta"), H) if which == "W" else (W, H.to("meta"))
    with pytest.raises(ValueError, match=rf"^{which} is on the meta device: it has a shape \(32, 32\) but no values.*"
                                         r"load the weights first"):
        _run_method(name, *args)

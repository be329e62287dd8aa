"""Bounded Hypothesis strategies for the theory checks: shapes, spectra, condition numbers and seeds.

Matrices are generated from a drawn seed with ``torch.Generator`` (fast and shrinkable: Hypothesis shrinks the
seed and the shape), with singular values / eigenvalues log-spaced over a drawn condition number.
"""

from __future__ import annotations

import torch
from hypothesis import strategies as st

from caldera.synthetic import calibration_hessian
from theory.common import gen, matrix_with_spectrum, randn

seeds = st.integers(min_value=0, max_value=2**31 - 1)
condition_numbers = st.sampled_from([1.0, 3.0, 10.0, 1e2, 1e3, 1e4])


@st.composite
def spectra(draw, size: int, max_cond: float = 1e4) -> torch.Tensor:
    """``size`` positive singular values, descending: log-spaced over a drawn condition number, or a power law."""
    cond = draw(st.floats(min_value=1.0, max_value=max_cond, allow_nan=False, allow_infinity=False))
    if draw(st.booleans()):
        return torch.logspace(0, -float(torch.log10(torch.tensor(cond))), size, dtype=torch.float64)
    decay = draw(st.floats(min_value=0.0, max_value=2.0, allow_nan=False))
    return torch.arange(1, size + 1, dtype=torch.float64) ** (-decay)


@st.composite
def regression_shapes(draw, case: str = "any", max_dim: int = 12) -> tuple[int, int, int, int]:
    """(m, d, n, k) with 1 ≤ k ≤ min(m, d, n); case 'm<=d', 'm>d' or 'any'."""
    m = draw(st.integers(2, max_dim))
    if case == "m<=d":
        d = draw(st.integers(m, max_dim + 4))
    elif case == "m>d":
        d = draw(st.integers(1, m - 1))
    else:
        d = draw(st.integers(1, max_dim + 4))
    n = draw(st.integers(1, max_dim))
    k = draw(st.integers(1, max(1, min(m, d, n))))
    return m, d, n, k


@st.composite
def regression_instances(draw, case: str = "any", rank_deficient: bool = False):
    """(X, Y, k, seed) for min_{rank Z ≤ k} ‖XZ − Y‖² with a drawn spectrum for X (full rank unless asked)."""
    m, d, n, k = draw(regression_shapes(case))
    seed = draw(seeds)
    g = gen(seed)
    r = min(m, d)
    if rank_deficient:
        if r < 2:
            m, d, r = m + 2, d + 2, min(m + 2, d + 2)
        r = draw(st.integers(1, r - 1))
    X = matrix_with_spectrum(m, d, draw(spectra(r)), g)
    Y = matrix_with_spectrum(m, n, draw(spectra(min(m, n), max_cond=1e3)), g)
    return X, Y, min(k, r, n), seed


@st.composite
def hessians(draw, sizes: tuple[int, ...] = (8, 16, 24), max_cond: float = 1e3):
    """(H, seed): the library's calibration Hessian (log-spaced spectrum, random basis, optional sample version)."""
    d = draw(st.sampled_from(sizes))
    seed = draw(seeds)
    cond = draw(st.floats(min_value=1.0, max_value=max_cond, allow_nan=False))
    m = draw(st.sampled_from([None, 2 * d, 4 * d]))
    return calibration_hessian(d, seed=seed, cond=cond, m=m), seed


@st.composite
def factor_problems(draw):
    """(A, X, R, L, seed) for the C.1 updates; X may have m < d (singular H)."""
    n = draw(st.integers(2, 10))
    d = draw(st.integers(3, 12))
    k = draw(st.integers(1, min(n, d) - 1 if min(n, d) > 1 else 1))
    m = draw(st.integers(k + 1, d + 4))
    seed = draw(seeds)
    g = gen(seed)
    X = matrix_with_spectrum(m, d, draw(spectra(min(m, d), max_cond=1e3)), g)
    return randn(n, d, g=g), X, randn(k, d, g=g), randn(n, k, g=g), seed


quantizer_params = st.tuples(
    st.floats(min_value=0.1, max_value=10.0, allow_nan=False, allow_infinity=False),
    st.integers(min_value=1, max_value=16),
)

mp_ratios = st.floats(min_value=0.005, max_value=4.0, allow_nan=False, allow_infinity=False)

import pytest
import torch

from caldera import CalderaConfig, caldera_decompose
from caldera.algorithm.decomposition import HessianContext, hessian_update
from caldera.algorithm.ldl import block_ldl, regularize_hessian
from caldera.metrics import relative_data_aware_error
from tests.helpers import llm_like

FAST = dict(rank=8, outer_iters=3, inner_iters=3)


@pytest.fixture(scope="module")
def WH():
    return llm_like(64, 48, seed=21, decay=0.6, cond=1e3, outliers=2)


def test_shapes_codes_and_reconstruction(WH):
    W, H = WH
    dec = caldera_decompose(W, H, CalderaConfig(**FAST))
    assert dec.Q.shape == (64, 48) and dec.L.shape == (64, 8) and dec.R.shape == (8, 48)
    assert dec.Q_codes.shape == (64, 6)
    W_hat = dec.reconstruction()
    assert W_hat.shape == W.shape
    # the reported error is the data-aware error of the returned reconstruction (RHT preserves it)
    err = relative_data_aware_error(W_hat, W, regularize_hessian(H))
    assert err == pytest.approx(dec.error, rel=1e-4)
    assert err < 0.5


def test_best_iterate_is_minimum_of_outer_trace(WH):
    W, H = WH
    dec = caldera_decompose(W, H, CalderaConfig(**FAST))
    per_outer = [e["error"] for e in dec.error_trace if e["step"] == "LR"]
    assert len(per_outer) == 3
    assert dec.error == pytest.approx(min(per_outer))
    assert all("lplr_errors" in e for e in dec.error_trace if e["step"] == "LR")


def test_deterministic_same_seed_identical_outputs(WH):
    W, H = WH
    a = caldera_decompose(W, H, CalderaConfig(**FAST, seed=3))
    b = caldera_decompose(W, H, CalderaConfig(**FAST, seed=3))
    c = caldera_decompose(W, H, CalderaConfig(**FAST, seed=4))
    assert torch.equal(a.Q_codes, b.Q_codes) and torch.equal(a.L, b.L) and torch.equal(a.R, b.R)
    assert a.error_trace == b.error_trace
    assert not torch.equal(a.rht.S_U, c.rht.S_U)


@pytest.mark.parametrize(
    "preset", ["paper", "authors-2025", "16bit-factors", "4bit-no-rht", "4bit-no-ldlq", "16bit-hessian-update"]
)
def test_presets_run_and_beat_zero(WH, preset):
    W, H = WH
    cfg = CalderaConfig.preset(preset, **FAST)
    dec = caldera_decompose(W, H, cfg)
    assert 0 < dec.error < 1
    if not cfg.rht:
        assert dec.rht is None


def test_lr_first_and_substep_tracking(WH):
    W, H = WH
    dec = caldera_decompose(W, H, CalderaConfig(**FAST, update_order="LR-first", best_tracking="substep"))
    assert dec.error_trace[0]["step"] == "LR"
    eligible = [e["error"] for e in dec.error_trace[1:]]
    assert dec.error == pytest.approx(min(eligible))


def test_shared_context_gives_identical_result(WH):
    W, H = WH
    cfg = CalderaConfig(**FAST)
    ctx = HessianContext.prepare(H, rht=True, seed=cfg.seed, sigma_reg=cfg.sigma_reg)
    a = caldera_decompose(W, H, cfg, context=ctx)
    b = caldera_decompose(W, H, cfg)
    assert torch.equal(a.Q_codes, b.Q_codes)


def test_hessian_update_removes_LR_subspace():
    _, H = llm_like(16, 32, seed=2)
    Hr = regularize_hessian(H)
    g = torch.Generator().manual_seed(0)
    L, R = torch.randn(16, 3, generator=g), torch.randn(3, 32, generator=g)
    Ht = hessian_update(Hr, L, R, sigma_reg=0.0)
    # H̃ = M (I − VVᵀ) Mᵀ: PSD of rank d − k, and L R H̃ (L R)ᵀ = 0 (the directions LR can fix are free)
    ev = torch.linalg.eigvalsh(Ht)
    assert ev[:3].abs().max() < 1e-8 and ev[3:].min() > 0
    LR = (L @ R).double()
    assert float(torch.trace(LR @ Ht @ LR.T)) == pytest.approx(0, abs=1e-8)


def test_hessian_update_by_the_gram_projector_equals_the_svd_form(monkeypatch):
    """Full-rank L R: H̃ by the k×k Gram's Cholesky (no SVD taken) equals App. E.2's SVD form to float64
    accuracy; a wrong projector (e.g. from R M alone with the wrong Cholesky side) would miss by O(1)."""
    import caldera.algorithm.decomposition as dm

    _, H = llm_like(16, 64, seed=3)
    Hr = regularize_hessian(H)
    g = torch.Generator().manual_seed(1)
    L, R = torch.randn(16, 4, generator=g), torch.randn(4, 64, generator=g)
    calls = []
    real_svd = torch.linalg.svd
    monkeypatch.setattr(dm.torch.linalg, "svd", lambda *a, **k: calls.append(1) or real_svd(*a, **k))
    Ht = hessian_update(Hr, L, R, sigma_reg=0.01)
    assert calls == []
    monkeypatch.setattr(dm.torch.linalg, "svd", real_svd)
    assert torch.allclose(Ht, _oracle_hessian_update(Hr, L, R, 0.01), atol=1e-10)


def test_hessian_update_of_a_rank_deficient_LR_takes_the_svd(monkeypatch):
    """L with a zero column: L R has rank k − 1, its Gram is singular, and the update falls back to the SVD (whose
    extra singular vector is arbitrary); the directions L R uses are still removed and H̃ stays PSD."""
    import caldera.algorithm.decomposition as dm

    _, H = llm_like(16, 32, seed=4)
    Hr = regularize_hessian(H)
    g = torch.Generator().manual_seed(2)
    L, R = torch.randn(16, 3, generator=g), torch.randn(3, 32, generator=g)
    L[:, 1] = 0
    calls = []
    real_svd = torch.linalg.svd
    monkeypatch.setattr(dm.torch.linalg, "svd", lambda *a, **k: calls.append(1) or real_svd(*a, **k))
    Ht = hessian_update(Hr, L, R, sigma_reg=0.0)
    assert calls == [1]
    LR = (L @ R).double()
    assert float(torch.trace(LR @ Ht @ LR.T)) == pytest.approx(0, abs=1e-8)
    assert float(torch.linalg.eigvalsh(Ht)[0]) > -1e-10


def test_the_context_ldl_is_the_block_ldl_of_the_rotated_hessian():
    """HessianContext builds its block LDL from the square root's Cholesky factor (one factorization): the same
    (L, D) as block_ldl(H_rot), and the square root itself untouched (the LDL is made in place on a copy)."""
    _, H = llm_like(16, 64, seed=5)
    ctx = HessianContext.prepare(H, rht=True, seed=0)
    L, D = block_ldl(ctx.H_rot)
    assert torch.equal(ctx.ldl[0], L) and torch.equal(ctx.ldl[1], D)
    assert torch.allclose(ctx.sqrt.half @ ctx.sqrt.half.T, ctx.H_rot, atol=1e-10)


@pytest.mark.parametrize(
    "W,H,rank,match",
    [
        (torch.full((16, 16), float("nan")), torch.eye(16), 2, "W contains"),
        (torch.randn(16, 16), torch.randn(16, 16), 2, "not symmetric"),
        (torch.randn(16, 16), torch.eye(8), 2, "H must be"),
        (torch.randn(16, 16), torch.eye(16), 16, "rank=16 is impossible"),
        (torch.randn(16, 12), torch.eye(12), 2, "multiple of 8"),
    ],
)
def test_bad_input_errors_name_the_argument(W, H, rank, match):
    with pytest.raises(ValueError, match=match):
        caldera_decompose(W, H, CalderaConfig(rank=rank, outer_iters=1, inner_iters=1, rht=False))


# ------------------------------------------------------------------------------------------------------------------
# Algorithm 1 replayed in float64. The library's BlockLDLQ and LPLRFactorize are recorded as black boxes (each has
# its own oracle tests); everything around them (what is quantized, which Hessian LDLQ sees, the App. E.2 update,
# the errors, the best iterate) is recomputed here from the paper's equations.
# ------------------------------------------------------------------------------------------------------------------


def _sqrt_h(H):
    lam, U = torch.linalg.eigh(H.double())
    return U * lam.sqrt()


def _oracle_hessian_update(H, L, R, sigma_reg):
    """App. E.2: H̃ = H − M V Vᵀ Mᵀ (H = M Mᵀ, L R M = U Σ Vᵀ, top-k V), then + σ·mean(diag H̃)·I. Any square root M
    gives the same H̃ (M O has right singular vectors Oᵀ V), so the eigen-square-root is used here."""
    M = _sqrt_h(H)
    _, _, Vh = torch.linalg.svd(L.double() @ R.double() @ M)
    MV = M @ Vh[: L.shape[1]].T
    Ht = H.double() - MV @ MV.T
    return Ht + sigma_reg * float(Ht.diagonal().mean()) * torch.eye(H.shape[0], dtype=torch.float64)


def _record(monkeypatch):
    import caldera.algorithm.decomposition as dm

    calls: list[tuple] = []
    real_ldlq, real_lplr = dm.ldlq_quantize, dm.lplr_factorize

    def ldlq(A, H, q, **kw):
        out = real_ldlq(A, H, q, **kw)
        calls.append(("Q", A.double().clone(), H.double().clone(), out))
        return out

    def lplr(A, H, k, qL, qR, T, **kw):
        out = real_lplr(A, H, k, qL, qR, T, **kw)
        calls.append(("LR", A.double().clone(), (k, T), out))
        return out

    monkeypatch.setattr(dm, "ldlq_quantize", ldlq)
    monkeypatch.setattr(dm, "lplr_factorize", lplr)
    return calls


def _close(x, y, rtol=1e-5):
    return float((x.double() - y.double()).norm()) <= rtol * float(y.double().norm()) + 1e-12


def _replay(W, H, cfg, dec, calls):
    """Check every recorded call against Alg. 1 (lines 3–4, App. E.2) and return the oracle's (error, state) list."""
    Hr = dec.rht.rotate_H(regularize_hessian(H, cfg.sigma_reg)).double()
    Wr = dec.rht.rotate_W(W.float()).double()
    M = _sqrt_h(Hr)
    denom = float((Wr @ M).norm())
    n, d = W.shape
    L, R = torch.zeros(n, cfg.rank, dtype=torch.float64), torch.zeros(cfg.rank, d, dtype=torch.float64)
    Q = torch.zeros_like(Wr)  # Alg. 1 starts from L_0 = R_0 = 0 (and Q = 0 when LR goes first)
    states = []
    assert len(calls) == 2 * cfg.outer_iters
    for i, (step, A, extra, out) in enumerate(calls):
        if step == "Q":  # line 3: Q_{t+1} = LDLQ(W − L_t R_t), with H̃ after the first LR (App. E.2)
            assert _close(A, Wr - L @ R), f"call {i}: LDLQ input is not W − L_t R_t"
            expect_H = _oracle_hessian_update(Hr, L, R, cfg.sigma_reg) if (cfg.hessian_update and L.any()) else Hr
            assert _close(extra, expect_H, 1e-6), f"call {i}: LDLQ Hessian is not App. E.2's H̃"
            Q = out.Q.double()
        else:  # line 4: L_{t+1}, R_{t+1} = LPLRFactorize(W − Q_{t+1}, k, X, Q_L, Q_R, T_in)
            assert _close(A, Wr - Q), f"call {i}: LPLR input is not W − Q_{{t+1}}"
            assert extra == (cfg.rank, cfg.inner_iters)
            L, R = out.L.double(), out.R.double()
        err = float(((Q + L @ R - Wr) @ M).norm()) / denom
        states.append((step, err, Q, L, R))
    return states


def _best_not_last_case():
    """A seeded LLM-like case whose best outer iterate is not the last: per-outer errors 0.1069, 0.0997, 0.0995,
    0.1066 with BEST_NOT_LAST (best t = 2 of 4; measured 2026-11-23, asserted by the test below)."""
    return llm_like(64, 48, seed=5, decay=0.6, cond=1e3, outliers=2)


BEST_NOT_LAST = dict(rank=8, outer_iters=4, inner_iters=2)


@pytest.mark.parametrize("order,tracking", [("Q-first", "outer"), ("LR-first", "substep")])
def test_algorithm_1_matches_float64_replay(monkeypatch, order, tracking):
    """Each Q step quantizes W − L_t R_t against the (App. E.2-updated) Hessian, each LPLR step factors W − Q_{t+1},
    the trace holds the data-aware errors, and the returned iterate is the best one (lines 5–6)."""
    W, H = _best_not_last_case()
    cfg = CalderaConfig(**BEST_NOT_LAST, update_order=order, best_tracking=tracking)
    calls = _record(monkeypatch)
    dec = caldera_decompose(W, H, cfg)
    states = _replay(W, H, cfg, dec, calls)
    assert [e["step"] for e in dec.error_trace] == [s[0] for s in states]
    assert [e["error"] for e in dec.error_trace] == pytest.approx([s[1] for s in states], rel=1e-4)
    if tracking == "outer":
        eligible = {i: states[i] for i in range(1, len(states), 2)}
    else:
        eligible = dict(enumerate(states))
        del eligible[0]  # both sub-steps must have run once
    i_best = min(eligible, key=lambda i: eligible[i][1])
    _, err, Q, L, R = states[i_best]
    assert dec.best_iter == i_best // 2
    assert dec.error == pytest.approx(err, rel=1e-4)
    assert torch.equal(dec.Q.double(), Q) and torch.equal(dec.L.double(), L) and torch.equal(dec.R.double(), R)
    assert relative_data_aware_error(dec.reconstruction(), W, regularize_hessian(H)) == pytest.approx(
        dec.error, rel=1e-4)


def test_best_iterate_fixture_is_not_the_last():
    """The fixture above must distinguish 'best' from 'last': its best outer iterate is an earlier one."""
    W, H = _best_not_last_case()
    dec = caldera_decompose(W, H, CalderaConfig(**BEST_NOT_LAST))
    per_outer = [e["error"] for e in dec.error_trace if e["step"] == "LR"]
    assert dec.best_iter == per_outer.index(min(per_outer)) < len(per_outer) - 1
    assert dec.error == min(per_outer) < per_outer[-1]
    assert relative_data_aware_error(dec.reconstruction(), W, regularize_hessian(H)) == pytest.approx(
        dec.error, rel=1e-4)


def test_factors_and_backbone_are_codewords(WH):
    """Q, L and R are exactly what their codes decode to (Alg. 1 output: Q ∈ Q_Q, L ∈ Q_L, R ∈ Q_R)."""
    from caldera.quantizers import quantizer_for_bits
    from caldera.quantizers.base import dequantize_scaled

    W, H = WH
    cfg = CalderaConfig(**FAST)
    dec = caldera_decompose(W, H, cfg)
    qQ, qL, qR = (quantizer_for_bits(b) for b in (cfg.q_bits, cfg.l_bits, cfg.r_bits))
    assert torch.equal(dec.Q, qQ.dequantize(dec.Q_codes) * dec.Q_scale)
    assert torch.equal(dec.L.T, dequantize_scaled(qL, dec.L_codes))
    assert torch.equal(dec.R, dequantize_scaled(qR, dec.R_codes))


def test_output_side_rht_makes_a_coherent_weight_incoherent():
    """§5: W̃ = H_L W H_Rᵀ with random sign diagonals on both sides. A weight whose rows are all equal is mapped by
    an unsigned Hadamard transform onto a single row; with random output signs its energy is spread over rows."""
    n, d = 64, 48
    v = torch.randn(1, d, generator=torch.Generator().manual_seed(0))
    W = torch.ones(n, 1) @ v + 0.01 * torch.randn(n, d, generator=torch.Generator().manual_seed(1))
    H = torch.eye(d, dtype=torch.float64)
    for seed in range(3):
        dec = caldera_decompose(W, H, CalderaConfig(rank=2, outer_iters=1, inner_iters=1, seed=seed))
        S_V = dec.rht.S_V
        assert set(S_V.tolist()) == {-1.0, 1.0}
        row_energy = dec.rht.rotate_W(W).double().pow(2).sum(1)
        assert float(row_energy.max() / row_energy.sum()) < 0.25  # unsigned: ≈ 1 (all energy in one row)


# ------------------------------------------------------------------------------------------------------------------
# Matrix-level claims at the calibration-aware error, on seeded LLM-like matrices (caldera.synthetic). Only directions
# that hold with a margin on every seed tried are asserted (seeds 0–3 of 96×128 and 128×128, rank 16, measured
# 2026-11-23): the no-RHT ablation is left out (the paper itself says RHT helps "for some of the matrices").
# ------------------------------------------------------------------------------------------------------------------

CLAIM_SEEDS = [(96, 128, 0), (96, 128, 1)]


def _claim_case(n, d, seed):
    return llm_like(n, d, seed=seed, decay=0.6, cond=1e3, outliers=2)


@pytest.mark.parametrize("n,d,seed", CLAIM_SEEDS)
def test_caldera_beats_quip_sharp_and_quip_sharp_lr(n, d, seed):
    """App. G.1 / Fig. 3: CALDERA (2-bit Q, 4-bit rank-16 factors) has a much lower data-aware error than QuIP#
    (measured ratio 0.51–0.56), and with 16-bit factors and the Hessian update it beats QuIP# with the same-size
    fp16 low-rank factors (measured 0.93 at T_out = 8)."""
    from caldera.methods import get_method

    W, H = _claim_case(n, d, seed)
    quip = get_method("quip#")
    quip_lr = get_method("quip#-lr")
    e_quip = quip.fn(W, H, quip.make_config({})).error
    e_quip_lr = quip_lr.fn(W, H, quip_lr.make_config({"lr_rank": 16})).error
    e_cal = caldera_decompose(W, H, CalderaConfig.preset("paper", rank=16, outer_iters=3, inner_iters=3)).error
    e_cal16 = caldera_decompose(W, H, CalderaConfig.preset("16bit-hessian-update", rank=16, outer_iters=8)).error
    assert e_cal < 0.7 * e_quip
    assert e_cal16 < 0.97 * e_quip_lr


@pytest.mark.parametrize("n,d,seed", CLAIM_SEEDS)
def test_ablation_directions(n, d, seed):
    """App. G.1: 16-bit factors below 4-bit factors, no-LDLQ much worse than LDLQ (measured ≥ 1.5×), and the Hessian
    update lowering the 16-bit-factor error (measured 0.84–0.85 at T_out = 3)."""
    W, H = _claim_case(n, d, seed)

    def err(preset):
        return caldera_decompose(W, H, CalderaConfig.preset(preset, rank=16, outer_iters=3, inner_iters=3)).error

    e16, e4, e_noldlq, e_hu = (err(p) for p in ("16bit-factors", "4bit-factors", "4bit-no-ldlq",
                                                  "16bit-hessian-update"))
    assert e16 < 0.8 * e4
    assert e_noldlq > 1.25 * e4
    assert e_hu < 0.92 * e16


def test_warm_svd_passes_each_lplr_calls_basis_to_the_next_and_matches_exact(monkeypatch):
    """``svd="warm"``: the first LPLR call has no start (the seeded range finder), each later call starts from
    the basis the previous call returned; on an input whose spectrum has a gap the run tracks the exact-SVD run
    closely (the first LPLR result within 0.5 %, the best iterate within 0.5 %), and a rerun is identical."""
    import caldera.algorithm.decomposition as dm

    W, H = llm_like(256, 256, seed=31, decay=0.3)
    calls = []
    real = dm.lplr_factorize

    def spy(*a, **kw):
        res = real(*a, **kw)
        calls.append((kw["start"], res.basis))
        return res

    monkeypatch.setattr(dm, "lplr_factorize", spy)
    cfg = CalderaConfig(rank=16, outer_iters=4, inner_iters=4, svd="warm")
    warm = caldera_decompose(W, H, cfg)
    assert calls[0][0] is None and all(calls[i][0] is calls[i - 1][1] for i in range(1, 4))
    assert calls[0][1].shape == (256, 16 + 16)
    exact = caldera_decompose(W, H, cfg.replace(svd="exact"))
    assert warm.error_trace[1]["error"] == pytest.approx(exact.error_trace[1]["error"], rel=5e-3)
    assert warm.error == pytest.approx(exact.error, rel=5e-3)
    again = caldera_decompose(W, H, cfg)
    assert torch.equal(again.Q_codes, warm.Q_codes) and again.error == warm.error

import pytest
import torch

from caldera.algorithm.ldl import block_ldl, regularize_hessian
from caldera.algorithm.ldlq import block_ldlq, greedy_refine, ldlq_quantize, nearest_quantize
from caldera.metrics import data_aware_sq_error
from tests.helpers import ExactIdentity, IntegerGrid, llm_like


def test_ldlq_with_identity_quantizer_returns_W():
    W, H = llm_like(24, 64, seed=1)
    L, _ = block_ldl(regularize_hessian(H))
    W_hat, _ = block_ldlq(W, L, ExactIdentity(), buffer=16)
    assert torch.allclose(W_hat, W, atol=1e-5)


@pytest.mark.parametrize("buffer", [8, 24, 128])
def test_ldlq_error_identity_and_oracle(buffer):
    """W − Ŵ = ε L⁻¹ and tr(ΔHΔᵀ) = Σ_k tr(ε_k D_k ε_kᵀ) (quip-sharp.md §2), vs a float64 column loop."""
    W, H = llm_like(16, 48, seed=2)
    W = W * 3
    Hr = regularize_hessian(H)
    L, D = block_ldl(Hr)
    W_hat, codes = block_ldlq(W, L, IntegerGrid(), buffer=buffer)
    # slow oracle: unbuffered float64 recurrence
    Wd, Ld = W.double(), L
    ref = torch.zeros_like(Wd)
    for k in reversed(range(6)):
        s = slice(8 * k, 8 * k + 8)
        ref[:, s] = torch.round(Wd[:, s] + (Wd[:, 8 * k + 8 :] - ref[:, 8 * k + 8 :]) @ Ld[8 * k + 8 :, s])
    assert torch.equal(W_hat.double(), ref)
    eps = (W.double() - W_hat.double()) @ L
    lhs = data_aware_sq_error(W - W_hat, Hr)
    rhs = sum(float(torch.trace(eps[:, 8 * k : 8 * k + 8] @ D[k] @ eps[:, 8 * k : 8 * k + 8].T)) for k in range(6))
    assert lhs == pytest.approx(rhs, rel=1e-6)
    assert torch.equal(codes.float(), W_hat)


def test_ldlq_beats_nearest_rounding_on_proxy_loss():
    W, H = llm_like(64, 64, seed=3, cond=1e4)
    Hr = regularize_hessian(H)
    q = IntegerGrid()
    ld = ldlq_quantize(W * 4, Hr, q)
    nr = nearest_quantize(W * 4, q)
    assert data_aware_sq_error(ld.Q - W * 4, Hr) < data_aware_sq_error(nr.Q - W * 4, Hr)


def test_forward_order_is_reverse_order_on_reversed_problem():
    W, H = llm_like(16, 32, seed=4)
    Hr = regularize_hessian(H)
    fwd = ldlq_quantize(W, Hr, IntegerGrid(), order="forward")
    perm = torch.arange(32).reshape(4, 8).flip(0).reshape(-1)
    rev = ldlq_quantize(W[:, perm], Hr[perm][:, perm], IntegerGrid(), order="reverse")
    assert torch.allclose(fwd.Q, rev.Q[:, perm], rtol=1e-6)
    assert torch.equal(fwd.codes, rev.codes[:, perm])


def test_greedy_refinement_matches_block_coordinate_descent_oracle():
    W, H = llm_like(8, 16, seed=5)
    W = W * 3
    Hr = regularize_hessian(H).float()
    L, _ = block_ldl(Hr.double())
    q = IntegerGrid()
    W_hat, codes = block_ldlq(W, L, q)
    out, _ = greedy_refine(W, W_hat, codes, Hr, q, passes=1)
    ref = W_hat.clone()
    for k in reversed(range(2)):
        s = slice(8 * k, 8 * k + 8)
        G = (W - ref) @ Hr
        ref[:, s] = torch.round(ref[:, s] + G[:, s] @ torch.linalg.inv(Hr[s, s]))
    assert torch.allclose(out, ref)


@pytest.mark.parametrize("buffer", [8, 32, 128])
def test_fused_e8p_ldlq_follows_the_recurrence_and_matches_the_block_loop(buffer):
    """The compiled chunk (``fused=True``, E8P on the CPU) runs BlockLDLQ's recurrence: every code is the nearest
    codeword of ``W_k + Σ_{j>k} (W − Ŵ)_j L_{j,k}`` recomputed from its own output in float64 (a skipped
    feedback term, a wrong block order or the wrong delta (Wf − Ŵ instead of W − Ŵ) changes codes); and it
    agrees with the per-block loop up to float ties (the in-chunk sums are float64 there, float32 here)."""
    from caldera.quantizers.e8p import E8P

    q = E8P()
    if not q.fused_ldlq_available(torch.zeros(1)):
        pytest.skip("the fused kernel needs Numba")
    d = 96
    W, H = llm_like(300, d, seed=21)
    L, _ = block_ldl(regularize_hessian(H))
    X = W / W.pow(2).mean().sqrt()
    Wh, codes = block_ldlq(X, L, q, buffer=buffer, fused=True)
    assert torch.equal(q.dequantize(codes), Wh)
    below = (torch.arange(d)[:, None] // 8) > (torch.arange(d)[None, :] // 8)  # block j > block k
    feed = (X - Wh).double() @ (L.double() * below)
    x = (X.double() + feed).float()
    nearest = q.quantize(x)
    assert (nearest == codes).float().mean() > 0.999
    # where they differ, the fused code is as near as the nearest (a float tie, within float32 rounding)
    dist = lambda c: (x - q.dequantize(c)).reshape(300, -1, 8).pow(2).sum(-1)  # noqa: E731
    assert float((dist(codes) - dist(nearest)).max()) < 1e-4
    Wh_loop, codes_loop = block_ldlq(X, L, q, buffer=buffer, fused=False)
    assert (codes == codes_loop).float().mean() > 0.99
    assert (feed.abs() > 0.1).float().mean() > 0.5  # the feedback is not negligible: the check above is sharp


def test_fused_e8p_ldlq_splits_rows_over_threads_without_changing_the_result():
    """From ``_NUMBA_SPLIT_ROWS`` rows the compiled chunks run on several threads, each on a row slice of the
    strided column views (W, the feedback, Ŵ, δ, the codes): a slice written to the wrong rows or a view offset
    lost would change the output against one thread."""
    from caldera.quantizers import e8p
    from caldera.quantizers.e8p import E8P

    q = E8P()
    if not q.fused_ldlq_available(torch.zeros(1)):
        pytest.skip("the fused kernel needs Numba")
    n, d = e8p._NUMBA_SPLIT_ROWS + 520, 64
    W, H = llm_like(n, d, seed=22)
    L, _ = block_ldl(regularize_hessian(H))
    X = W / W.pow(2).mean().sqrt()
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        Wh1, c1 = block_ldlq(X, L, q, buffer=32, fused=True)
        torch.set_num_threads(2)
        Wh2, c2 = block_ldlq(X, L, q, buffer=32, fused=True)
    finally:
        torch.set_num_threads(threads)
    assert torch.equal(c1, c2) and torch.equal(Wh1, Wh2)
    assert torch.equal(q.dequantize(c2), Wh2)


_HOST_READS = ("item", "nonzero", "__bool__", "__float__", "__int__", "__index__", "tolist")


def test_block_ldlq_loop_reads_nothing_back_to_the_host(monkeypatch):
    """The loop that a tensor on a GPU takes (E8P's unchecked search and decode, the torch search, ``checked=True``)
    never reads a value back to the host: run on the CPU with every ``Tensor`` method that does (and
    ``torch.nonzero``) made to raise. A per-block input check (``float(amax)``), ``check_codes`` in the decode
    (``int(min)``) or a ``nonzero`` over the columns where a norm-12 pattern may win each raises here."""
    from caldera.quantizers.e8p import E8P

    q = E8P(backend="torch")
    W, H = llm_like(40, 48, seed=23)
    L, _ = block_ldl(regularize_hessian(H))
    X = (W / W.pow(2).mean().sqrt()) * 1.5  # RMS 1.5: many columns where a norm-12 pattern could win

    def refuse(name):
        def read(*args, **kwargs):
            raise AssertionError(f"host read inside block_ldlq: {name}")

        return read

    with monkeypatch.context() as m:
        for name in _HOST_READS:
            m.setattr(torch.Tensor, name, refuse(f"Tensor.{name}"))
        m.setattr(torch, "nonzero", refuse("torch.nonzero"))
        Wh, codes = block_ldlq(X, L, q, buffer=16, fused=False, checked=True)
    assert torch.equal(q.dequantize(codes), Wh)
    below = (torch.arange(48)[:, None] // 8) > (torch.arange(48)[None, :] // 8)
    x = (X.double() + (X - Wh).double() @ (L.double() * below)).float()
    assert (q.quantize(x) == codes).float().mean() > 0.99  # it is BlockLDLQ: each code is its x's nearest


def test_block_ldlq_checks_the_matrix_once_on_the_unchecked_path():
    """Without ``checked`` the loop checks W and L once before it quantizes blocks unchecked: a NaN is named."""
    from caldera.quantizers.e8p import E8P

    W, H = llm_like(8, 16, seed=24)
    L, _ = block_ldl(regularize_hessian(H))
    W[3, 5] = float("nan")
    with pytest.raises(ValueError, match="W contains 1 NaN"):
        block_ldlq(W, L, E8P(backend="torch"), fused=False)
    L2 = L.clone()
    L2[9, 2] = float("inf")
    with pytest.raises(ValueError, match="L contains 1 NaN"):
        block_ldlq(W.nan_to_num(), L2, E8P(backend="torch"), fused=False)


@pytest.mark.parametrize(("n", "d", "rms", "seed"), [(256, 128, 1.03, 31), (300, 96, 2.0, 32), (128, 256, 0.9, 33)])
def test_device_path_matches_the_cpu_fused_path(n, d, rms, seed):
    """The device-agnostic path (the per-block loop with the sync-free torch search) against the CPU path of record
    (the Numba fused chunks) on fixed seeds: codes equal except at float ties (after a tie a row's later blocks
    see other feedback, so at most a few rows differ) and the proxy loss tr(ΔHΔᵀ) equal to 1e-6."""
    from caldera.quantizers.e8p import E8P

    cpu = E8P()
    if not cpu.fused_ldlq_available(torch.zeros(1)):
        pytest.skip("the CPU path of record needs Numba")
    W, H = llm_like(n, d, seed=seed)
    Hr = regularize_hessian(H)
    L, _ = block_ldl(Hr)
    X = W / W.pow(2).mean().sqrt() * rms
    Wh_cpu, codes_cpu = block_ldlq(X, L, cpu, fused=True)
    Wh_dev, codes_dev = block_ldlq(X, L, E8P(backend="torch"), fused=False, checked=True)
    rows_differ = (codes_cpu != codes_dev).any(1)
    assert rows_differ.float().mean() <= 0.02, float(rows_differ.float().mean())
    loss = lambda Wh: float(data_aware_sq_error((X - Wh).double(), Hr.double()))  # noqa: E731
    assert loss(Wh_dev) == pytest.approx(loss(Wh_cpu), rel=1e-6)


def test_greedy_refine_off_the_numba_path_reads_nothing_back_and_matches(monkeypatch):
    """QuIP#'s refinement passes with E8P off the Numba CPU path apply every block's update unconditionally (no
    ``bool(dq.any())``) and search unchecked: with every host read raising they give the result of the checked
    per-block passes (the CPU path's rule: skip a block that did not move) bit for bit."""
    from caldera.quantizers.e8p import E8P

    W, H = llm_like(24, 32, seed=25)
    Hr = regularize_hessian(H).float()
    L, _ = block_ldl(Hr)
    X = W / W.pow(2).mean().sqrt()
    q = E8P(backend="torch")
    Wh, codes = block_ldlq(X, L, q, fused=False, checked=True)

    class Checked(E8P):  # the same search with the per-block checks: the loop's other rule
        quantize_validated = None

    want = greedy_refine(X, Wh, codes, Hr, Checked(backend="torch"), passes=2)
    with monkeypatch.context() as m:
        for name in _HOST_READS:
            m.setattr(torch.Tensor, name, lambda *a, _n=name, **k: (_ for _ in ()).throw(AssertionError(_n)))
        got = greedy_refine(X, Wh, codes, Hr, q, passes=2, checked=True)
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
    assert not torch.equal(got[1], codes)  # the passes moved some blocks: the comparison is not vacuous


def test_a_quantizer_without_an_unchecked_pair_keeps_its_per_block_checks(monkeypatch):
    """A quantizer with no ``quantize_validated`` (the integer grid here) goes through its own checked ``quantize``
    in every block, and neither BlockLDLQ nor the refinement adds a whole-matrix check for it."""
    import caldera.algorithm.ldlq as ldlq_mod

    calls = []
    monkeypatch.setattr(ldlq_mod, "check_finite", lambda x, name: calls.append(name))
    W, H = llm_like(8, 16, seed=26)
    Hr = regularize_hessian(H).float()
    L, _ = block_ldl(Hr)
    Wh, codes = block_ldlq(W * 3, L, IntegerGrid(), fused=False)
    greedy_refine(W * 3, Wh, codes, Hr, IntegerGrid(), passes=1)
    assert calls == []

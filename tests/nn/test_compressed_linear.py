"""CompressedLinear: forward in the rotated domain equals x Ŵᵀ for every kind of decomposition."""

from __future__ import annotations

import pytest
import torch

from caldera.algorithm.config import CalderaConfig
from caldera.algorithm.decomposition import caldera_decompose
from caldera.methods import get_method
from caldera.nn.compressed_linear import CompressedLinear
from caldera.synthetic import llm_like

N, D = 32, 64


@pytest.fixture(scope="module")
def WH():
    return llm_like(N, D, seed=3)


@pytest.fixture(scope="module")
def decs(WH):
    W, H = WH
    small = dict(rank=4, outer_iters=2, inner_iters=2)
    return {
        "caldera-e8p-rvq4": caldera_decompose(W, H, CalderaConfig(**small)),
        "caldera-16bit": caldera_decompose(W, H, CalderaConfig.preset("16bit-factors", **small)),
        "caldera-no-rht": caldera_decompose(W, H, CalderaConfig(**small, rht=False)),
        "quip#": get_method("quip#").fn(W, H, get_method("quip#").make_config({})),
        "rtn": get_method("rtn").fn(W, H, get_method("rtn").make_config({"bits": 4})),
    }


def _x(*shape, seed=0):
    return torch.randn(*shape, D, generator=torch.Generator().manual_seed(seed))


def _check_matches(mod, dec, x):
    ref = x.double() @ dec.reconstruction().double().T
    y = mod(x)
    assert y.shape == (*x.shape[:-1], N) and y.dtype == x.dtype
    torch.testing.assert_close(y.double(), ref, rtol=1e-4, atol=1e-5 * float(ref.abs().max()))


@pytest.mark.parametrize("kind", ["caldera-e8p-rvq4", "caldera-16bit", "caldera-no-rht", "quip#", "rtn"])
def test_forward_matches_reconstruction(decs, kind):
    dec = decs[kind]
    mod = CompressedLinear.from_decomposition(dec)
    _check_matches(mod, dec, _x(2, 5))
    _check_matches(mod, dec, _x(7, seed=1))  # 2-D input, cached Q reused
    assert mod.meta["rht"] == (dec.rht is not None)
    assert mod.rank == dec.rank
    assert torch.equal(mod.Q_codes.to(torch.int64), dec.Q_codes.to(torch.int64))  # the codes, exactly
    assert "_Q_cache" not in mod.state_dict()  # the dequantized cache is never saved
    torch.testing.assert_close(mod.weight_reconstruction(), dec.reconstruction(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("kind", ["caldera-e8p-rvq4", "caldera-16bit", "caldera-no-rht", "quip#"])
def test_to_linear_same_function(decs, kind):
    """The dense stand-in used for evaluation (``eval.weights: reconstructed``) computes x Ŵᵀ + b too."""
    dec = decs[kind]
    bias = torch.linspace(-1, 1, N)
    mod = CompressedLinear.from_decomposition(dec, bias=bias)
    lin = mod.to_linear()
    assert isinstance(lin, torch.nn.Linear) and not lin.weight.requires_grad
    x = _x(3, 4, seed=2)
    ref = x.double() @ dec.reconstruction().double().T + bias.double()
    torch.testing.assert_close(lin(x).double(), ref, rtol=1e-4, atol=1e-5 * float(ref.abs().max()))
    torch.testing.assert_close(lin(x), mod(x), rtol=1e-4, atol=1e-5 * float(ref.abs().max()))


def test_storage_formats(decs):
    m = CompressedLinear.from_decomposition(decs["caldera-e8p-rvq4"])
    assert m.meta["q_quantizer"] == "e8p" and m.meta["lr_format"] == "quantized"
    assert m.Q_codes.dtype == torch.uint16 and m.Q_codes.shape == (N, D // 8)
    assert m.S_U.dtype == torch.int8 and m.S_U.shape == (D,) and m.S_V.shape == (N,)
    assert m.L_codes.shape[0] == 4 and m.R_codes.shape[0] == 4
    m16 = CompressedLinear.from_decomposition(decs["caldera-16bit"])
    assert m16.meta["lr_format"] == "float16" and m16.L_16.dtype == torch.float16
    assert not hasattr(CompressedLinear.from_decomposition(decs["caldera-no-rht"]), "S_U")
    # 2-bit Q + rank-4 4-bit factors + signs + 3 scales
    assert m.storage_bits() == 2 * N * D + 4 * 4 * (N + D) + (N + D) + 3 * 32


def test_no_cache_and_state_roundtrip(decs):
    dec = decs["caldera-e8p-rvq4"]
    mod = CompressedLinear.from_decomposition(dec, bias=torch.linspace(-1, 1, N))
    x = _x(3)
    y = mod(x)
    again = CompressedLinear.from_tensors(mod.metadata(), mod.state_dict(), cache_dequantized=False)
    assert torch.equal(again(x), y) and again._Q_cache is None
    # load_state_dict drops the cache: loading another layer's codes changes the output
    other = CompressedLinear.from_decomposition(decs["caldera-no-rht"])
    other2 = CompressedLinear.from_decomposition(decs["caldera-no-rht"])
    other2.Q_codes.zero_()
    other2(x)
    other2.load_state_dict(other.state_dict())
    assert torch.equal(other2(x), other(x))
    assert mod(x.to(torch.bfloat16)).dtype == torch.bfloat16


def test_ft_split_and_trainable_signs(decs):
    dec = decs["caldera-e8p-rvq4"]
    x = _x(4)
    mod = CompressedLinear.from_decomposition(dec, ft_rank=2, ft_dtype=torch.float32)
    assert mod.L_ft.shape == (N, 2) and mod.R_ft.shape == (2, D) and mod.L_codes.shape[0] == 2
    _check_matches(mod, dec, x)
    assert {n for n, _ in mod.named_parameters()} == {"L_ft", "R_ft"}
    full = CompressedLinear.from_decomposition(dec, ft_rank=4, ft_dtype=torch.bfloat16)
    assert "L_codes" not in full.state_dict()
    with torch.no_grad():
        torch.testing.assert_close(full(x), mod(x), rtol=2e-2, atol=2e-2 * float(mod(x).abs().max()))

    y0 = mod(x)
    mod.make_signs_trainable()
    assert mod.S_U.dtype == torch.float32 and mod.S_U.requires_grad
    torch.testing.assert_close(mod(x), y0, rtol=1e-6, atol=1e-6)
    mod(x).square().sum().backward()
    assert mod.S_U.grad is not None and mod.S_V.grad is not None and mod.L_ft.grad is not None
    again = CompressedLinear.from_tensors(mod.metadata(), mod.state_dict())
    assert isinstance(again.S_U, torch.nn.Parameter)
    with pytest.raises(ValueError, match="no RHT"):
        CompressedLinear.from_decomposition(decs["caldera-no-rht"]).make_signs_trainable()


def test_rejections(decs):
    dec = decs["quip#"]
    with pytest.raises(ValueError, match="do not reproduce"):
        CompressedLinear.from_decomposition(dec, q_quantizer="e8p-rvq4")
    import dataclasses

    with pytest.raises(ValueError, match="no Q_scale"):
        CompressedLinear.from_decomposition(dataclasses.replace(dec, Q_scale=None))
    with pytest.raises(ValueError, match="no Q codes"):
        CompressedLinear.from_decomposition(dataclasses.replace(dec, Q_codes=None, Q_scale=None), q_quantizer="e8p")
    with pytest.raises(ValueError, match="ft_rank"):
        CompressedLinear.from_decomposition(decs["caldera-16bit"], ft_rank=5)
    with pytest.raises(ValueError, match="last dimension"):
        CompressedLinear.from_decomposition(dec)(torch.randn(2, D + 1))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA (paper-scale evaluation runs on a GPU)")
@pytest.mark.parametrize("kind", ["caldera-e8p-rvq4", "caldera-16bit", "caldera-no-rht", "quip#", "rtn"])
def test_forward_on_cuda_matches_cpu(decs, kind):
    mod = CompressedLinear.from_decomposition(decs[kind])
    x = _x(3, 5)
    ref = mod(x)
    gpu = mod.to("cuda")
    assert all(t.is_cuda for t in gpu.state_dict().values())
    torch.testing.assert_close(gpu(x.cuda()).cpu(), ref, rtol=1e-4, atol=1e-5 * float(ref.abs().max()))


@pytest.mark.parametrize("half", [False, True])
def test_a_float_q_without_codes_is_stored_as_is_and_counted_at_its_width(WH, decs, half):
    """A method whose Q fits no quantizer (Q_codes None) is stored as Q_dense: float16 when exact (16 bits per
    weight), else float32 (32); the forward, the reload and the bits follow it, with RHT and factors kept."""
    import dataclasses

    W, _ = WH
    base = decs["caldera-16bit"]  # RHT + 16-bit factors around the float Q
    Q = base.Q.half().float() if half else base.Q + 1e-3 * W  # 1e-3 W: not exact in fp16
    dec = dataclasses.replace(base, Q=Q, Q_codes=None, Q_scale=None, q_quantizer=None)
    mod = CompressedLinear.from_decomposition(dec)
    want = torch.float16 if half else torch.float32
    assert mod.Q_dense.dtype == want and mod.meta["q_format"] == str(want).removeprefix("torch.")
    assert mod.meta["q_quantizer"] is None and "Q_codes" not in mod.state_dict()
    assert torch.equal(mod.dequantized_Q(), Q)
    _check_matches(mod, dec, _x(2, 5))
    _check_matches(mod, dec, _x(3, seed=2))  # few rows: no kernel reads a float Q, the reference path runs
    assert mod.kernel_backend(_x(1)) is None
    b = 16 if half else 32
    assert mod.bit_widths()["b_q"] == b
    k = dec.rank
    assert mod.storage_bits() == b * N * D + 16 * k * (N + D) + (N + D)  # no scale; packed signs
    again = CompressedLinear.from_tensors(mod.metadata(), mod.state_dict())
    torch.testing.assert_close(again(_x(4)), mod(_x(4)), rtol=0, atol=0)


# ------------------------------------------------------------------------- a quantizer's storage declaration

def _codebook_quantizer():
    """2-bit codes into a codebook of four float16 levels held per matrix (a stored extra)."""
    from caldera.quantizers.base import Quantizer

    class Codebook2(Quantizer):
        name = "test-codebook2"
        block_size = 1
        bits_per_weight = 2.0
        num_codes = 4

        def quantize(self, x):
            raise NotImplementedError  # the method below picks the codes against its own levels

        def dequantize(self, codes):
            raise NotImplementedError  # needs the matrix's codebook: decode reads it

        def stored_extras(self, rows, features):
            return {"codebook": ((4,), torch.float16)}

        def decode(self, codes, scale, extras=None):
            return extras["codebook"].float()[codes.long()] * scale

    return Codebook2()


@pytest.fixture
def codebook(monkeypatch, WH):
    """The codebook quantizer registered for one test, and a decomposition of W stored with it."""
    from caldera import quantizers
    from caldera.algorithm.decomposition import Decomposition

    monkeypatch.setattr(quantizers, "_REGISTERED", dict(quantizers._REGISTERED))
    q = quantizers.register_quantizer(_codebook_quantizer())
    W = WH[0].float()
    levels = torch.quantile(W.flatten(), torch.tensor([0.1, 0.4, 0.6, 0.9])).half()
    codes = (W[..., None] - levels.float()).abs().argmin(-1).to(torch.uint8)
    dec = Decomposition(method="codebook", Q=levels.float()[codes.long()], L=None, R=None, Q_codes=codes,
                        Q_scale=torch.tensor(1.0), q_quantizer=q.name, Q_extras={"codebook": levels})
    return q, dec


def test_a_codebook_of_the_matrix_is_stored_decoded_and_counted(codebook):
    q, dec = codebook
    mod = CompressedLinear.from_decomposition(dec)
    sd = mod.state_dict()
    assert set(sd) == {"Q_codes", "Q_scale", "Q_codebook"}
    assert sd["Q_codebook"].dtype == torch.float16 and torch.equal(sd["Q_codebook"], dec.Q_extras["codebook"])
    assert mod.storage_bits() == 2 * N * D + 32 + 4 * 16  # codes, one scale, the codebook as stored
    torch.testing.assert_close(mod.weight_reconstruction(), dec.Q, rtol=0, atol=0)
    again = CompressedLinear.from_tensors(mod.metadata(), {k: v.clone() for k, v in sd.items()})
    x = _x(3, seed=4)
    torch.testing.assert_close(again(x), mod(x), rtol=0, atol=0)
    moved = {k: v.clone() for k, v in sd.items()}
    moved["Q_codebook"] = moved["Q_codebook"].flip(0)  # another codebook decodes to another weight
    assert not torch.equal(CompressedLinear.from_tensors(mod.metadata(), moved).weight_reconstruction(), dec.Q)


def test_a_codebook_layer_missing_or_mistyping_its_extra_is_refused(codebook):
    import dataclasses

    from caldera.nn.format import stored_tensor_problem

    q, dec = codebook
    with pytest.raises(ValueError, match=r"Q_extras are \[\]; quantizer 'test-codebook2' declares \['codebook'\]"):
        CompressedLinear.from_decomposition(dataclasses.replace(dec, Q_extras=None))
    with pytest.raises(ValueError, match=r"Q_extras\['codebook'\] is \(4,\) float32; .* declares \(4,\) float16"):
        CompressedLinear.from_decomposition(dataclasses.replace(dec, Q_extras={"codebook": dec.Q_extras[
            "codebook"].float()}))
    mod = CompressedLinear.from_decomposition(dec)
    sd = {k: v.clone() for k, v in mod.state_dict().items()}
    with pytest.raises(ValueError, match=r"missing tensors \['Q_codebook'\]"):
        CompressedLinear.from_tensors(mod.metadata(), {k: v for k, v in sd.items() if k != "Q_codebook"})
    bad = {**sd, "Q_codebook": sd["Q_codebook"].float()}
    assert stored_tensor_problem(mod.metadata(), bad) == ("Q_codebook", "has dtype float32; the metadata says float16")


def test_a_scale_of_a_shape_the_quantizer_does_not_declare_is_refused(decs):
    """uniform-4 codes take one scale per matrix or per row: an (n, d) scale (one per weight) is refused when
    stored and when loaded, naming the accepted shapes."""
    import dataclasses

    from caldera.nn.format import stored_tensor_problem

    dec = decs["rtn"]
    with pytest.raises(ValueError, match=r"Q_scale has shape \(32, 64\); quantizer 'uniform-4' stores scales of "
                                         r"an 32x64 matrix with shape \(\) or \(32, 1\)"):
        CompressedLinear.from_decomposition(dataclasses.replace(dec, Q_scale=torch.ones(N, D)))
    mod = CompressedLinear.from_decomposition(dec)
    sd = {k: v.clone() for k, v in mod.state_dict().items()}
    sd["Q_scale"] = torch.ones(N, D)
    assert stored_tensor_problem(mod.metadata(), sd) == (
        "Q_scale", "has shape (32, 64); uniform-4 scales of a 32x64 matrix have shape () or (32, 1)")


def test_register_quantizer_refuses_taken_names_and_bad_declarations(monkeypatch):
    from caldera import quantizers
    from caldera.quantizers.base import Quantizer

    monkeypatch.setattr(quantizers, "_REGISTERED", dict(quantizers._REGISTERED))
    q = quantizers.register_quantizer(_codebook_quantizer())
    assert quantizers.get_quantizer("test-codebook2") is q and "test-codebook2" in quantizers.registered_quantizers()
    with pytest.raises(ValueError, match="the name 'test-codebook2' is taken"):
        quantizers.register_quantizer(_codebook_quantizer())
    builtin = _codebook_quantizer()
    builtin.name = "uniform-3"
    with pytest.raises(ValueError, match="the name 'uniform-3' is taken"):
        quantizers.register_quantizer(builtin)
    clash = _codebook_quantizer()
    clash.name = "test-codebook2b"
    clash.stored_extras = lambda rows, features: {"scale": ((1,), torch.float32)}
    with pytest.raises(ValueError, match="declares an extra tensor 'scale'"):
        quantizers.register_quantizer(clash)
    with pytest.raises(ValueError, match="expected a caldera.quantizers.Quantizer instance"):
        quantizers.register_quantizer("test")
    with pytest.raises(ValueError, match=r"unknown quantizer.*registered: test-codebook2"):
        quantizers.get_quantizer("test-codebook3")
    assert issubclass(type(q), Quantizer)


def test_a_quantizer_registered_by_a_method_module_is_found_when_a_checkpoint_names_it(monkeypatch):
    """The loader resolves a quantizer name this package does not know after importing the registered methods
    (whose modules register their quantizers), once; a name nobody registers stays an error."""
    from caldera import quantizers
    from caldera.nn.format import resolve_quantizer

    monkeypatch.setattr(quantizers, "_REGISTERED", dict(quantizers._REGISTERED))
    calls = []

    def import_methods(strict=True):
        calls.append(strict)
        if "test-codebook2" not in quantizers._REGISTERED:
            quantizers.register_quantizer(_codebook_quantizer())
        return []

    monkeypatch.setattr("caldera.methods.registered_methods", import_methods)
    assert resolve_quantizer("test-codebook2").name == "test-codebook2" and calls == [False]
    assert resolve_quantizer("test-codebook2").name == "test-codebook2" and calls == [False]  # known now
    with pytest.raises(ValueError, match="unknown quantizer"):
        resolve_quantizer("nobody-registers-this")


def test_cuda_graph_needs_the_layer_on_cuda(decs):
    """Off CUDA the graphed decode is refused with the layer's device named, not captured into nothing."""
    mod = CompressedLinear.from_decomposition(decs["caldera-16bit"])
    with pytest.raises(ValueError, match="on cpu; a CUDA graph needs"):
        mod.cuda_graph()


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA (a CUDA graph)")
@pytest.mark.parametrize("kind", ["caldera-e8p-rvq4", "caldera-16bit"])
def test_cuda_graph_replays_the_forward_for_each_new_input(decs, kind):
    """The replayed graph gives the eager forward's output for every input copied in, not the captured one's."""
    mod = CompressedLinear.from_decomposition(decs[kind]).to("cuda")
    run = mod.cuda_graph(batch=2, dtype=torch.float16)
    for seed in (1, 2):
        x = _x(2, seed=seed).cuda().half()
        with torch.no_grad():
            want = mod(x)
            got = run(x).clone()
        torch.testing.assert_close(got.float(), want.float(), rtol=1e-3, atol=1e-3 * float(want.abs().max()))

"""Low-rank adaptation of CALDERA's factors: re-split, bits, what trains, checkpoint selection, save/reload."""

from __future__ import annotations

import pytest
import torch

from caldera.algorithm.config import CalderaConfig
from caldera.algorithm.decomposition import caldera_decompose
from caldera.bits import average_bits
from caldera.finetune import lora
from caldera.nn.compressed_linear import CompressedLinear
from caldera.pipeline.checkpoint import load_compressed, replace_module, save_compressed
from caldera.pipeline.layer_runner import decoder_layers
from caldera.pipeline.linears import LINEARS
from caldera.quantizers.base import dequantize_scaled, quantize_scaled
from caldera.synthetic import llm_like
from tests.helpers import tiny_llama

# every warning is an error here: the fine-tuning code must not warn (e.g. float() of a tensor that requires
# grad in the checkpoint fingerprint of a model with trainable factors / signs)
pytestmark = pytest.mark.filterwarnings("error")


@pytest.fixture(scope="module")
def layers():
    W, H = llm_like(32, 64, seed=5)
    small = dict(rank=8, outer_iters=2, inner_iters=2)
    return {
        "4bit": CompressedLinear.from_decomposition(caldera_decompose(W, H, CalderaConfig(**small))),
        "16bit": CompressedLinear.from_decomposition(
            caldera_decompose(W, H, CalderaConfig.preset("16bit-factors", **small))),
    }


def _svd64(M):
    return torch.linalg.svdvals(M.double())


@pytest.mark.parametrize("kind", ["4bit", "16bit"])
@pytest.mark.parametrize("r", [3, 8])
def test_resplit_top_r_components(layers, kind, r):
    mod = layers[kind]
    L, R = mod.quantized_factors()
    LR = L.double() @ R.double()
    S = _svd64(LR)[: mod.rank]
    new = lora.resplit_top_r(mod, r, torch.float32)
    assert new.ft_rank == r and new.L_ft.requires_grad and new.R_ft.requires_grad
    assert new.meta["l_quantizer"] == mod.meta["l_quantizer"]
    ft = new.L_ft.double() @ new.R_ft.double()
    # the fine-tuned part is the best rank-r approximation of L R: its singular values are the top r
    torch.testing.assert_close(_svd64(ft)[:r], S[:r], rtol=1e-5, atol=1e-6 * float(S[0]))
    U, _, Vh = torch.linalg.svd(LR)
    oracle_top = U[:, :r] @ torch.diag(S[:r]) @ Vh[:r]
    torch.testing.assert_close(ft, oracle_top, rtol=0, atol=1e-5 * float(S[0]))
    # the rest is the tail of the SVD, re-quantized with the layer's factor quantizer
    rest = LR - oracle_top
    W_old, W_new = mod.rotated_weight().detach().double(), new.rotated_weight().detach().double()
    if r == mod.rank:
        assert new.quantized_factors() is None
        torch.testing.assert_close(W_new, W_old, rtol=0, atol=1e-5 * float(S[0]))
        return
    L2, R2 = new.quantized_factors()
    tail_err = float((L2.double() @ R2.double() - rest).norm())
    total_err = float((W_new - W_old).norm())
    assert total_err <= tail_err + 1e-4 * float(LR.norm())
    if kind == "16bit":  # fp16 re-cast: tiny
        assert tail_err <= 2e-3 * float(rest.norm())
    else:  # the oracle: the same quantizer applied to the SVD tail factors
        from caldera.nn.format import resolve_quantizer

        q = resolve_quantizer(mod.meta["l_quantizer"])
        s = S[r: mod.rank].sqrt()
        Lo = (U[:, r: mod.rank] * s).float()
        Ro = (s[:, None] * Vh[r: mod.rank]).float()
        Lq = dequantize_scaled(q, quantize_scaled(q, Lo.T.contiguous())).T
        Rq = dequantize_scaled(q, quantize_scaled(q, Ro.contiguous()))
        torch.testing.assert_close(L2.double() @ R2.double(), Lq.double() @ Rq.double(), rtol=1e-4,
                                   atol=1e-4 * float(rest.abs().max()))
        assert 0 < tail_err < float(rest.norm())  # quantized, not dropped


def test_resplit_refuses_bad_rank(layers):
    with pytest.raises(ValueError, match="ft_rank"):
        lora.resplit_top_r(layers["4bit"], 9)


def test_bits_formula_with_ft_rank():
    # App. E.5: (B_Q n d + (k - r) B_LR (n + d) + 16 r (n + d)) / (n d), by hand for one 64 x 32 matrix
    n, d, k, r = 64, 32, 16, 8
    want = (2 * n * d + (k - r) * 4 * (n + d) + 16 * r * (n + d)) / (n * d)
    assert average_bits([(n, d)], 2, 4, k, ft_rank=r) == pytest.approx(want, rel=1e-12)
    assert average_bits([(n, d)], 2, None, k, ft_rank=k) == pytest.approx((2 * n * d + 16 * k * (n + d)) / (n * d))
    # the paper's LLaMa-2 7B row: rank 128, B_LR 4, r 64 -> 2.5 bits (Table 5)
    from caldera.bits import MODEL_SHAPES

    assert round(average_bits(MODEL_SHAPES["llama-2-7b"], 2, 4, 128, ft_rank=64), 1) == 2.5


def test_mapped_ft_rank():
    assert lora.mapped_ft_rank(16, 128, 64, 8) == 8
    assert lora.mapped_ft_rank(8, 64, 64, 8) == 8
    assert lora.mapped_ft_rank(40, 256, 64, 8) == 8


def _compressed_tiny(seed=0):
    model = tiny_llama(seed)
    small = CalderaConfig(rank=8, outer_iters=1, inner_iters=1)
    for li, layer in enumerate(decoder_layers(model)):
        for name in LINEARS:
            W = layer.get_submodule(name).weight.detach().float()
            H = torch.eye(W.shape[1], dtype=torch.float64) + 0.1
            dec = caldera_decompose(W, H, small)
            replace_module(model, f"model.layers.{li}.{name}", CompressedLinear.from_decomposition(dec))
    return model


def _lm_setup(model, seed=0):
    g = torch.Generator().manual_seed(seed)
    train_blocks = torch.randint(3, 128, (6, 16), generator=g)
    held = torch.randint(3, 128, (2, 16), generator=g)

    def batches(epoch):
        perm = torch.randperm(6, generator=torch.Generator().manual_seed(100 + epoch))
        return [train_blocks[perm[i:i + 2]] for i in range(0, 6, 2)]

    def heldout(m):
        with torch.no_grad():
            return {"score": float(lora.lm_loss(m, held))}

    return batches, heldout


def test_only_lora_factors_change(tmp_path):
    model = lora.prepare_lora(_compressed_tiny(), lambda m: 4, torch.float32)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    batches, heldout = _lm_setup(model)
    hyper = lora.TaskHyper(block_size=16, batch_size=2, grad_acc=1, epochs=1, lr=1e-2, weight_decay=0.01,
                           warmup_steps=1)
    lora.train(model, batches, lora.lm_loss, heldout, hyper, n_checkpoints=3, state_path=tmp_path / "s.safetensors",
               spec={"t": 1}, progress=False)
    after = model.state_dict()
    changed = {k for k in before if not torch.equal(before[k], after[k])}
    assert changed, "training changed nothing"
    assert all(k.endswith((".L_ft", ".R_ft")) for k in changed), sorted(changed)[:5]
    assert len(changed) == 2 * 7 * 2  # every L_ft and R_ft of the 14 layers


def test_classifier_head_trains_and_backbone_frozen(tmp_path):
    model = lora.prepare_lora(_compressed_tiny(), lambda m: 8, torch.float32)
    clf = lora.SequenceClassifier(model, 2, seed=0)
    before = {k: v.clone() for k, v in clf.state_dict().items()}
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(3, 128, (8, 10), generator=g)
    mask = torch.ones_like(ids)
    mask[::2, 7:] = 0
    y = torch.randint(0, 2, (8,), generator=g)

    def loss_fn(m, b):
        return torch.nn.functional.cross_entropy(m(ids[b], mask[b]), y[b])

    def heldout(m):
        return {"score": 0.0}

    hyper = lora.TaskHyper(block_size=10, batch_size=4, grad_acc=2, epochs=1, lr=1e-2, weight_decay=0.0,
                           warmup_steps=0)
    lora.train(clf, lambda e: [slice(0, 4), slice(4, 8)], loss_fn, heldout, hyper, n_checkpoints=1,
               state_path=tmp_path / "c.safetensors", spec={}, progress=False)
    changed = {k for k, v in clf.state_dict().items() if not torch.equal(before[k], v)}
    assert "head.weight" in changed
    assert all(k == "head.weight" or k.endswith((".L_ft", ".R_ft")) for k in changed)


def test_best_checkpoint_chosen_on_heldout_and_resume(tmp_path):
    model = lora.prepare_lora(_compressed_tiny(), lambda m: 4, torch.float32)
    batches, _ = _lm_setup(model)
    scores = iter([3.0, 1.0, 2.0])  # held-out scores at the three checkpoints: the second is best

    def heldout(m):
        return {"score": next(scores)}

    hyper = lora.TaskHyper(block_size=16, batch_size=2, grad_acc=1, epochs=1, lr=1e-2, weight_decay=0.0,
                           warmup_steps=0)
    res = lora.train(model, batches, lora.lm_loss, heldout, hyper, n_checkpoints=3,
                     state_path=tmp_path / "s.safetensors", spec={"a": 1}, progress=False)
    assert [h["step"] for h in res["history"]] == [1, 2, 3]
    assert res["best_step"] == 2 and res["final_step"] == 3
    final = {k: v.clone() for k, v in lora.trainable_parameters(model).items()}
    assert any(not torch.equal(final[k], res["best"][k]) for k in final)  # best (step 2) != final (step 3)
    # higher_is_better flips the choice (accuracy-like scores)
    m2 = lora.prepare_lora(_compressed_tiny(), lambda m: 4, torch.float32)
    scores2 = iter([3.0, 1.0, 2.0])
    res2 = lora.train(m2, batches, lora.lm_loss, lambda m: {"score": next(scores2)}, hyper, n_checkpoints=3,
                      state_path=tmp_path / "s2.safetensors", spec={"a": 1}, progress=False, higher_is_better=True)
    assert res2["best_step"] == 1
    # a killed run resumes from its state file to the same final parameters (state at step 3: nothing left)
    m3 = lora.prepare_lora(_compressed_tiny(), lambda m: 4, torch.float32)
    res3 = lora.train(m3, batches, lora.lm_loss, lambda m: {"score": 0.0}, hyper, n_checkpoints=3,
                      state_path=tmp_path / "s.safetensors", spec={"a": 1}, progress=False)
    assert res3["best_step"] == 2
    for k, v in lora.trainable_parameters(m3).items():
        assert torch.equal(v, final[k])


def test_resume_mid_run_is_bit_identical(tmp_path):
    hyper = lora.TaskHyper(block_size=16, batch_size=2, grad_acc=1, epochs=2, lr=1e-2, weight_decay=0.01,
                           warmup_steps=1)
    ref = lora.prepare_lora(_compressed_tiny(), lambda m: 4, torch.float32)
    b, h = _lm_setup(ref)
    lora.train(ref, b, lora.lm_loss, h, hyper, n_checkpoints=2, state_path=tmp_path / "ref.safetensors",
               spec={}, progress=False)
    calls = []

    def dies_at_second_checkpoint(m):  # a kill during step 6's evaluation: the state file holds step 3
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return h(m)

    st = tmp_path / "killed.safetensors"
    with pytest.raises(KeyboardInterrupt):
        lora.train(lora.prepare_lora(_compressed_tiny(), lambda m: 4, torch.float32), b, lora.lm_loss,
                   dies_at_second_checkpoint, hyper, n_checkpoints=2, state_path=st, spec={}, progress=False)
    fresh = lora.prepare_lora(_compressed_tiny(), lambda m: 4, torch.float32)
    res = lora.train(fresh, b, lora.lm_loss, h, hyper, n_checkpoints=2, state_path=st, spec={}, progress=False)
    assert [x["step"] for x in res["history"]] == [3, 6]
    for k, v in lora.trainable_parameters(fresh).items():
        assert torch.equal(v, lora.trainable_parameters(ref)[k]), k
    # a state written for another configuration is not resumed: training starts again from the initial values
    other = lora.prepare_lora(_compressed_tiny(), lambda m: 4, torch.float32)
    res = lora.train(other, b, lora.lm_loss, h, hyper, n_checkpoints=2, state_path=st, spec={"x": 1},
                     progress=False)
    assert [x["step"] for x in res["history"]] == [3, 6]
    for k, v in lora.trainable_parameters(other).items():
        assert torch.equal(v, lora.trainable_parameters(ref)[k]), k


def test_save_reload_logits_equal(tmp_path):
    model = lora.prepare_lora(_compressed_tiny(), lambda m: 4, torch.bfloat16)
    with torch.no_grad():
        for p in lora.trainable_parameters(model).values():
            p.add_(0.01)  # "fine-tuned" values
    ids = torch.tensor([[1, 5, 9, 33, 7, 100, 2, 64]])
    with torch.no_grad():
        want = model(ids).logits
    path = save_compressed(model, tmp_path / "ft", method="caldera+lora", method_config={"ft_rank": 4})
    back, _ = load_compressed(path, load_tokenizer=False, kernel="reference")  # the path prepare_lora sets
    fast, _ = load_compressed(path, load_tokenizer=False)  # kernel="auto": the fused C layer where it built
    with torch.no_grad():
        got = back(ids).logits
        torch.testing.assert_close(fast(ids).logits, want, rtol=1e-4, atol=1e-5)
    assert torch.equal(got, want)
    mods = lora.compressed_modules(back)
    assert all(m.ft_rank == 4 and m.L_ft.dtype == torch.bfloat16 for m in mods.values())


def test_split_documents_disjoint_and_eval_first():
    s = lora.split_documents(50, 10, 5, 20, seed=0)
    assert s["eval"] == list(range(10))
    assert not (set(s["eval"]) & set(s["heldout"])) and not (set(s["train"]) & set(s["heldout"] + s["eval"]))
    assert len(s["heldout"]) == 5 and len(s["train"]) == 20
    assert s == lora.split_documents(50, 10, 5, 20, seed=0) and s != lora.split_documents(50, 10, 5, 20, seed=1)
    with pytest.raises(ValueError, match="available"):
        lora.split_documents(20, 10, 5, 20, seed=0)


def test_classification_examples():
    a, b, y = lora.classification_example("winogrande", {"sentence": "A _ b", "option1": "x", "option2": "z",
                                                         "answer": "2"})
    assert (a, b, y) == ("A x b", "A z b", 1)
    assert lora.classification_example("rte", {"sentence1": "p", "sentence2": "h", "label": 0}) == ("p", "h", 0)

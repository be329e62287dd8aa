"""caldera.pipeline.checkpoint.loader: load_compressed builds the base architecture with CompressedLinear layers
(tied head, eval mode), refuses a base config that builds no model, casts the uncompressed parameters to a dtype,
restores non-persistent buffers, and materialize swaps the compressed layers for dense ones."""

from __future__ import annotations

import pytest
import torch

from caldera.nn.compressed_linear import CompressedLinear
from caldera.pipeline.checkpoint.loader import load_compressed, materialize
from caldera.pipeline.linears import LINEARS
from tests.pipeline.checkpoint_helpers import IDS, copy_checkpoint, edit_config, ids_logits, reseal


def test_load_in_process_types(saved):
    model, path = saved
    loaded, tok = load_compressed(path)
    lin = loaded.model.layers[1].mlp.gate_proj
    assert isinstance(lin, CompressedLinear) and lin.Q_codes.dtype == torch.uint16
    assert loaded.lm_head.weight is loaded.model.embed_tokens.weight
    assert tok is not None and not loaded.training


def test_materialize_keeps_the_function(saved):
    """eval.weights: reconstructed swaps every CompressedLinear for its dense Ŵ; the logits stay the same
    (float rounding) and the tied head stays tied."""
    _, path = saved
    loaded, _ = load_compressed(path, load_tokenizer=False)
    ids = torch.tensor(IDS)
    with torch.no_grad():
        ref = loaded(ids).logits
        assert materialize(loaded) == 14
        got = loaded(ids).logits
    assert not any(isinstance(m, CompressedLinear) for m in loaded.modules())
    assert loaded.lm_head.weight is loaded.model.embed_tokens.weight
    torch.testing.assert_close(got, ref, rtol=1e-4, atol=1e-4 * float(ref.abs().max()))


def test_hidden_size_mismatch_is_a_value_error(saved, tmp_path):
    """A hidden_size the head count does not divide (manifest resealed, so the model build is reached): a
    ValueError naming base_config, not transformers' StrictDataclassClassValidationError."""
    _, path = saved
    ck = copy_checkpoint(path, tmp_path / "ck")
    edit_config(lambda c: c["base_config"].update(hidden_size=63))(ck)
    reseal(ck)
    with pytest.raises(ValueError, match=r"base_config of caldera_config\.json \(the base config of config\.json\) "
                       r"does not build a model \(StrictDataclassClassValidationError.*hidden size \(63\) is not a "
                       r"multiple of the number of attention heads.*re-run"):
        load_compressed(ck)


def test_load_compressed_dtype_and_device(saved):
    """dtype casts the uncompressed parameters only (the compressed layers keep their stored dtypes and compute
    in float32); a per-module device_map is refused with the from_pretrained alternative."""
    _, path = saved
    m, _ = load_compressed(path, dtype="bfloat16", device_map="cpu", load_tokenizer=False)
    assert m.model.embed_tokens.weight.dtype == torch.bfloat16 and m.model.norm.weight.dtype == torch.bfloat16
    q = m.model.layers[0].self_attn.q_proj
    assert q.Q_scale.dtype == torch.float32 and q.S_U.dtype == torch.int8
    assert ids_logits(m).dtype == torch.bfloat16
    with pytest.raises(ValueError, match=r"device_map='auto'.*from_pretrained\(CKPT, device_map=...\)"):
        load_compressed(path, device_map="auto")
    with pytest.raises(FileNotFoundError, match=r"neither a local folder nor a hub repository"):
        load_compressed("nosuch-org/nosuch-model-xyz")


def test_materialize_in_a_16_bit_dtype(saved):
    _, path = saved
    ref, _ = load_compressed(path)
    half, _ = load_compressed(path)
    materialize(ref)
    assert materialize(half, torch.float16) == 14
    for name in LINEARS:
        a, b = (m.model.layers[1].get_submodule(name).weight for m in (ref, half))
        assert b.dtype == torch.float16 and torch.equal(b, a.half())


@pytest.mark.parametrize("vocab", [16, -1])  # -1: the small model cannot be built, the full one is
def test_non_persistent_buffers_come_from_a_small_vocabulary_model_with_the_same_values(monkeypatch, vocab):
    """Gemma-3's embed_scale and rotary frequencies, restored on load from a model built with a tiny vocabulary
    (or, when that fails, the full model): the values a full build gives."""
    from transformers import AutoModelForCausalLM

    import caldera.pipeline.checkpoint.loader as CK
    from tests.helpers import tiny_gemma3

    monkeypatch.setattr(CK, "REFERENCE_VOCAB", vocab)
    config = tiny_gemma3(0, vocab_size=256).config
    full = dict(AutoModelForCausalLM.from_config(config).named_buffers())
    with torch.device("meta"):
        wanted = dict(AutoModelForCausalLM.from_config(config).named_buffers())
    assert "model.embed_tokens.embed_scale" in wanted
    got = CK.reference_buffers(config, wanted)
    assert set(got) == set(wanted) and all(torch.equal(got[n], full[n]) for n in wanted)
    assert config.vocab_size == 256  # the caller's config is not altered

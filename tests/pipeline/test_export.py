"""caldera.pipeline.export: export_hf writes each compressed layer as the dense weight it stands for, with the
tokenizer, atomically, and refuses an existing folder or a checkpoint with nothing compressed."""

from __future__ import annotations

import pytest
import torch

from caldera.nn.compressed_linear import CompressedLinear
from caldera.pipeline import checkpoint
from caldera.pipeline.export import export_hf
from tests.pipeline.checkpoint_helpers import IDS, ids_logits, save_tiny_checkpoint, tiny_llama


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    return save_tiny_checkpoint(tmp_path_factory.mktemp("ckpt") / "ck")


def _dense_weight(module: CompressedLinear) -> torch.Tensor:
    """Oracle: the layer applied to the identity is x Ŵᵀ (+ bias) row by row."""
    eye = torch.eye(module.in_features)
    with torch.no_grad():
        y = module(eye)
    if getattr(module, "bias", None) is not None:
        y = y - module.bias
    return y.T


def test_export_writes_the_reconstructed_dense_model_and_tokenizer(saved, tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model, path = saved
    out = tmp_path / "nested" / "hf"
    assert export_hf(path, out) == out
    assert (out / "model.safetensors").is_file() and not list(out.parent.glob(".hf.tmp-*"))
    hf = AutoModelForCausalLM.from_pretrained(str(out)).eval()
    compressed = {n: m for n, m in model.named_modules() if isinstance(m, CompressedLinear)}
    assert len(compressed) == 14
    for name, module in compressed.items():
        lin = hf.get_submodule(name)
        assert type(lin) is torch.nn.Linear and lin.weight.dtype == torch.float32
        ref = _dense_weight(module)
        torch.testing.assert_close(lin.weight, ref, rtol=1e-4, atol=1e-5 * float(ref.abs().max()))
    ref = ids_logits(model)
    with torch.no_grad():
        got = hf(torch.tensor(IDS)).logits
    torch.testing.assert_close(got, ref, rtol=1e-4, atol=1e-4 * float(ref.abs().max()))
    _, tok = checkpoint.load_compressed(path)
    assert AutoTokenizer.from_pretrained(str(out))("w5 w9 w33")["input_ids"] == tok("w5 w9 w33")["input_ids"]


def test_an_existing_folder_is_refused_untouched(saved, tmp_path):
    _, path = saved
    out = tmp_path / "hf"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    with pytest.raises(ValueError, match="already exists"):
        export_hf(path, out)
    assert [p.name for p in out.iterdir()] == ["keep.txt"]


def test_a_checkpoint_without_compressed_layers_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(checkpoint, "load_compressed", lambda ck: (tiny_llama(0), None))
    with pytest.raises(ValueError, match="has no compressed layers; nothing to export"):
        export_hf(tmp_path / "ck", tmp_path / "hf")
    assert list(tmp_path.iterdir()) == []


def test_a_failed_write_leaves_neither_the_folder_nor_its_temporary(saved, tmp_path, monkeypatch):
    from transformers import PreTrainedTokenizerFast

    _, path = saved

    def broken(self, folder, **kw):
        (folder / "partial").write_text("x")
        raise OSError("disk full")

    monkeypatch.setattr(PreTrainedTokenizerFast, "save_pretrained", broken)
    with pytest.raises(OSError, match="disk full"):
        export_hf(path, tmp_path / "hf")
    assert list(tmp_path.iterdir()) == []

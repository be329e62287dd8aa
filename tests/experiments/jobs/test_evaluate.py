"""The evaluation jobs (caldera.experiments.jobs.evaluate) on a tiny CALDERA checkpoint."""

from __future__ import annotations

import pytest
import torch


@pytest.fixture(scope="module")
def caldera_checkpoint(tmp_path_factory):
    return _caldera_checkpoint(tmp_path_factory.mktemp("ck") / "ck")


def _caldera_checkpoint(folder, config_dtype=None):
    """A tiny LLaMA compressed with CALDERA (4-bit Q, 4-bit quantized factors) as a checkpoint folder; its
    config's dtype (the model's own) ``config_dtype``."""
    import dataclasses

    from caldera.methods import get_method
    from caldera.nn.compressed_linear import CompressedLinear
    from caldera.pipeline.checkpoint import replace_module, save_compressed
    from caldera.pipeline.layer_runner import decoder_layers
    from tests.helpers import tiny_llama

    model = tiny_llama(0, tie_word_embeddings=False)
    if config_dtype is not None:
        model.config.dtype = config_dtype
    spec = get_method("caldera")
    cfg = spec.make_config({"rank": 8, "l_bits": 4, "r_bits": 4, "outer_iters": 1, "inner_iters": 1})
    for li, layer in enumerate(decoder_layers(model)):
        for name, lin in list(layer.named_modules()):
            if isinstance(lin, torch.nn.Linear):
                H = torch.eye(lin.in_features, dtype=torch.float64)
                dec = spec.fn(lin.weight.detach().float(), H, cfg)
                replace_module(model, f"model.layers.{li}.{name}", CompressedLinear.from_decomposition(dec))
    return save_compressed(model, folder, method="caldera", method_config=dataclasses.asdict(cfg))


def _fp32_dense_tensors(model):
    """float32 tensors of at least one compressed layer's size: parameters, buffers and dequantized caches."""
    from caldera.nn.compressed_linear import CompressedLinear

    big = 64 * 64
    found = [n for n, t in list(model.named_parameters()) + list(model.named_buffers())
             if t.dtype == torch.float32 and t.numel() >= big and "embed" not in n and "lm_head" not in n]
    for n, m in model.named_modules():
        if isinstance(m, CompressedLinear):
            found += [f"{n}.{c}" for c in ("_Q_cache", "_L_cache", "_R_cache") if getattr(m, c) is not None]
    return found


@pytest.mark.parametrize("reconstructed,kernel", [(False, "auto"), (False, "reference"), (True, "auto")])
def test_lean_load_holds_no_fp32_dense_copy(caldera_checkpoint, reconstructed, kernel):
    """Evaluation on an accelerator (lean, stood in for by the CPU here): no float32 dense copy of any compressed
    layer, before or after a forward, dense parts in the 16-bit dtype, the same logits as the CPU path up to
    that dtype's rounding. ``reference``: the decode path CUDA takes for 4-bit factors (no kernel)."""
    from caldera.experiments.jobs.evaluate import load_compressed_for

    ids = torch.tensor([[1, 5, 9, 33, 7, 100, 2, 64]])
    ref, _ = load_compressed_for(str(caldera_checkpoint), "cpu", reconstructed=reconstructed, kernel=kernel)
    lean, _ = load_compressed_for(str(caldera_checkpoint), "cpu", reconstructed=reconstructed,
                                  dtype=torch.bfloat16, lean=True, kernel=kernel)
    assert _fp32_dense_tensors(lean) == []
    assert lean.model.embed_tokens.weight.dtype == torch.bfloat16
    with torch.no_grad():
        a, b = ref(ids).logits, lean(ids).logits
    assert _fp32_dense_tensors(lean) == []  # the forward decoded on the fly, cached nothing
    assert b.dtype == torch.bfloat16
    torch.testing.assert_close(b.float(), a, rtol=0.05, atol=0.05 * float(a.abs().max()))
    if reconstructed or kernel == "reference":  # the CPU path: float32 dense layers or caches, as before
        assert _fp32_dense_tensors(ref) != []


def test_lean_is_the_default_off_the_cpu_and_auto_takes_the_models_dtype(tmp_path):
    """On any non-CPU device (``meta`` stands in for CUDA: shapes and dtypes only) the load is lean, and dtype
    "auto" is the base model's own (its config's: bfloat16 here)."""
    from caldera.experiments.jobs.evaluate import load_compressed_for

    path = _caldera_checkpoint(tmp_path / "ck", config_dtype="bfloat16")
    mdl, _ = load_compressed_for(str(path), "meta", dtype="auto")
    assert _fp32_dense_tensors(mdl) == [] and mdl.model.norm.weight.device.type == "meta"
    assert mdl.model.norm.weight.dtype == torch.bfloat16


def _dense_run(tmp_path, monkeypatch, windows: int):
    """A tiny dense model "m" saved under ``tmp_path`` and its run context, with the perplexity stream replaced by
    ``windows`` windows of 16 random tokens: ``(run, ppl spec)``."""
    import caldera.pipeline.text as text
    from caldera.experiments.planning.settings import RunContext
    from tests.helpers import model_entry, tiny_llama, word_tokenizer

    src = tmp_path / "m"
    tiny_llama(0).save_pretrained(src)
    word_tokenizer().save_pretrained(src)
    stream = torch.randint(0, 128, (1, windows * 16), generator=torch.Generator().manual_seed(2))
    monkeypatch.setattr(text, "perplexity_stream", lambda tok, source: stream)
    run = RunContext(name="t", device="cpu", dtype="auto", models={"m": model_entry(src)})
    return run, {"source": "wikitext2", "protocol": "stream", "seq_len": 16}


@pytest.mark.usefixtures("prepared")
def test_a_replicate_is_scored_only_on_the_corpora_its_claims_read(tmp_path, monkeypatch):
    """``replicates.corpora``: a seed replicate's other corpora get a file that says they were skipped (no
    windows, so the tables stack only the seeds that have them); the variant itself is scored on every corpus."""
    import json

    from caldera.atomic import timing_path
    from caldera.experiments.jobs import evaluate as evaluate_job
    from caldera.experiments.planning.plan import Variant
    from caldera.experiments.planning.settings import EvalSettings
    from caldera.experiments.report.tables import variant_samples

    run, spec = _dense_run(tmp_path, monkeypatch, 3)
    settings = EvalSettings.from_block({"ppl": {"wiki": spec, "c4": spec}, "zeroshot": {"tasks": ["caldera_piqa"]}})
    for vid, rep in [("m-dense", None), ("m-dense-seed1", "m-dense")]:
        v = Variant(id=vid, model="m", method="dense", replicate_of=rep)
        out = tmp_path / "eval" / vid
        evaluate_job.step_evaluate(settings, run, v, None, {c: str(out / f"ppl_{c}.json") for c in ("wiki", "c4")},
                            str(out / "zeroshot.json"), replicate_corpora=["wiki"])
    wiki, c4 = (json.loads((tmp_path / f"eval/m-dense-seed1/ppl_{c}.json").read_text()) for c in ("wiki", "c4"))
    assert wiki["n_windows"] == 3 and "skipped" not in wiki
    # the clock reading is beside the result, not in it: a rerun rewrites the result byte for byte
    assert "wall_s" not in wiki
    assert json.loads(timing_path(tmp_path / "eval/m-dense-seed1/ppl_wiki.json").read_text())["wall_s"] > 0
    assert timing_path(tmp_path / "eval/m/ppl_wiki.json").name == "ppl_wiki.timing.json"
    assert "replicates.corpora" in c4["skipped"] and "window_nll" not in c4
    assert set(variant_samples(tmp_path, "m-dense-seed1")["ppl"]) == {"wiki"}
    assert set(variant_samples(tmp_path, "m-dense")["ppl"]) == {"wiki", "c4"}


@pytest.mark.usefixtures("prepared")
def test_a_regime_row_is_scored_zero_shot_at_its_own_documents_per_task(tmp_path, monkeypatch):
    """``zeroshot_limit`` (a regime row's documents per task) replaces ``eval.zeroshot.limit`` task by task: the
    zero-shot file holds those documents, and the tables read them."""
    import json

    from caldera.experiments.jobs import evaluate as evaluate_job
    from caldera.experiments.planning.plan import Variant
    from caldera.experiments.planning.settings import EvalSettings
    from caldera.experiments.report.tables import variant_samples

    run, spec = _dense_run(tmp_path, monkeypatch, 2)
    settings = EvalSettings.from_block({"ppl": {"wiki": spec},
                                        "zeroshot": {"tasks": ["caldera_piqa", "caldera_winogrande"], "limit": 1}})
    v = Variant(id="m-dense", model="m", method="dense")
    for vid, limit in [("plain", None), ("regime", {"caldera_piqa": 3, "caldera_winogrande": 1})]:
        out = tmp_path / "eval" / vid
        evaluate_job.step_evaluate(settings, run, v, None, {"wiki": str(out / "ppl_wiki.json")},
                                   str(out / "zeroshot.json"), zeroshot_limit=limit)
    plain, regime = (variant_samples(tmp_path, vid)["zeroshot"] for vid in ("plain", "regime"))
    assert {t: len(r["doc_id"]) for t, r in plain.items()} == {"caldera_piqa": 1, "caldera_winogrande": 1}
    assert {t: len(r["doc_id"]) for t, r in regime.items()} == {"caldera_piqa": 3, "caldera_winogrande": 1}
    assert json.loads((tmp_path / "eval/regime/zeroshot.json").read_text())["limit"] == {
        "caldera_piqa": 3, "caldera_winogrande": 1}

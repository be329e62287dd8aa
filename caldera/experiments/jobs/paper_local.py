"""Inputs of ``config/paper-local.yaml``: the paper path end to end on a CPU, at toy sizes.

:func:`write_inputs` writes, deterministically (seeded), into one folder:

* ``models/{llama-2,llama-3,mistral}``: tiny random-init models in hub layout (``config.json``, safetensors,
  tokenizer files), loaded by the same ``from_pretrained`` calls as a hub id. Their shapes are
  :data:`caldera.bits.TINY_CONFIGS`: a LLaMa-2-style ``LlamaForCausalLM`` (multi-head attention, rope theta 1e4),
  a LLaMa-3-style one (grouped-query attention, rope theta 5e5, a larger vocabulary) and a ``MistralForCausalLM``
  (grouped-query attention, sliding window). Word-level tokenizers that prepend ``<s>`` as the LLaMA ones do.
* ``data/``: the folder of config ``local_data`` (:mod:`caldera.pipeline.local_data`): JSON-lines text standing in
  for WikiText-2 (test, train, validation), C4 (validation) and RedPajama, read through
  :func:`caldera.pipeline.text.load_hf_text`; the five zero-shot tasks' documents (and the RTE / WinoGrande train
  splits of Table 5), read by the lm-eval task loaders of ``caldera/eval/tasks``.

The text is random words of the tokenizers' vocabulary (no real data; nothing is downloaded): the numbers of a
paper-local run say that every rule runs, not what the paper measured.

    python -m caldera.experiments.jobs.paper_local --out paper-local
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path
from typing import Any

#: bump when the generated files change
FORMAT = 1
#: the prompt words of the task templates, so that they are tokens (not <unk>) of every tokenizer
TEMPLATE_WORDS = ["Question", "Answer", "True", "False", "or", ":", "?", ".", ",", "_"]
#: model folder -> (TINY_CONFIGS key, architecture, vocabulary size, extra config fields)
MODELS: dict[str, tuple[str, str, int, dict[str, Any]]] = {
    "llama-2": ("tiny-llama-2", "llama", 256, {"rope_theta": 10000.0}),
    "llama-3": ("tiny-llama-3", "llama", 512, {"rope_theta": 500000.0}),
    "mistral": ("tiny-mistral", "mistral", 256, {"rope_theta": 10000.0, "sliding_window": 256}),
}
#: the words every text and task document is drawn from (all in every vocabulary)
N_WORDS = 200


def words() -> list[str]:
    return [f"w{i}" for i in range(N_WORDS)]


def _vocab(size: int) -> dict[str, int]:
    names = ["<unk>", "<s>", "</s>", *TEMPLATE_WORDS, *words()]
    names += [f"x{i}" for i in range(size - len(names))]
    if len(names) != size:
        raise ValueError(f"vocabulary of {size} is smaller than the {len(names)} tokens it needs")
    return {n: i for i, n in enumerate(names)}


def write_model(out: Path, key: str, arch: str, vocab_size: int, extra: dict[str, Any], seed: int) -> Path:
    """One tiny random-init model with its tokenizer, in hub layout."""
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import LlamaConfig, LlamaForCausalLM, MistralConfig, MistralForCausalLM, PreTrainedTokenizerFast

    from caldera.bits import TINY_CONFIGS

    hidden, inter, heads, kv, head_dim, layers = TINY_CONFIGS[key]
    cls_cfg, cls_model = (LlamaConfig, LlamaForCausalLM) if arch == "llama" else (MistralConfig, MistralForCausalLM)
    cfg = cls_cfg(hidden_size=hidden, intermediate_size=inter, num_hidden_layers=layers, num_attention_heads=heads,
                  num_key_value_heads=kv, head_dim=head_dim, vocab_size=vocab_size, max_position_embeddings=512,
                  bos_token_id=1, eos_token_id=2, pad_token_id=0, tie_word_embeddings=False, **extra)
    torch.manual_seed(seed)
    cls_model(cfg).save_pretrained(str(out))
    tok = Tokenizer(models.WordLevel(vocab=_vocab(vocab_size), unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", pair="<s> $A $B", special_tokens=[("<s>", 1)])
    PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>",
                            pad_token="<unk>").save_pretrained(str(out))
    return out


def _sentence(rng: random.Random, lo: int, hi: int) -> str:
    return " ".join(rng.choice(words()) for _ in range(rng.randint(lo, hi)))


def _docs(rng: random.Random, n: int, lo: int, hi: int) -> list[str]:
    return [" . ".join(_sentence(rng, 5, 15) for _ in range(rng.randint(lo, hi))) for _ in range(n)]


def _write_jsonl(path: Path, rows: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")


#: HF_TEXT name -> (documents, sentences per document (min, max))
TEXTS = {"wikitext2": (12, (4, 8)), "wikitext2-train": (24, (4, 8)), "wikitext2-validation": (8, (4, 8)),
         "c4": (12, (6, 10)), "redpajama": (32, (6, 10))}


def task_documents(task: str, n: int, rng: random.Random) -> list[dict[str, Any]]:
    """``n`` random documents with the fields of the task's prepared JSONL (caldera.eval.zeroshot)."""
    out = []
    for i in range(n):
        if task == "winogrande":
            out.append({"sentence": f"{_sentence(rng, 4, 8)} _ {_sentence(rng, 3, 6)} .",
                        "option1": rng.choice(words()), "option2": rng.choice(words()),
                        "answer": rng.choice(["1", "2"])})
        elif task == "rte":
            out.append({"sentence1": _sentence(rng, 8, 16), "sentence2": _sentence(rng, 4, 8),
                        "label": rng.randint(0, 1), "idx": i})
        elif task == "piqa":
            out.append({"goal": _sentence(rng, 4, 10), "sol1": _sentence(rng, 3, 8), "sol2": _sentence(rng, 3, 8),
                        "label": rng.randint(0, 1)})
        else:  # arc_easy, arc_challenge
            out.append({"id": f"{task}-{i}", "question": _sentence(rng, 5, 12),
                        "choices": [_sentence(rng, 1, 4) for _ in range(4)], "gold": rng.randint(0, 3)})
    return out


def write_data(out: Path, seed: int, n_task_docs: int = 24) -> Path:
    """The ``local_data`` folder (layout: :mod:`caldera.pipeline.local_data`)."""
    from caldera.pipeline.assets import build_atomically
    from caldera.pipeline.text import HF_TEXT

    rng = random.Random(seed)
    for name in HF_TEXT:
        n, (lo, hi) = TEXTS[name]
        _write_jsonl(out / "text" / f"{name}.jsonl", [{"text": t} for t in _docs(rng, n, lo, hi)])

    def build(tmp: Path) -> dict:
        counts = {}
        for task in ("winogrande", "rte", "piqa", "arc_easy", "arc_challenge"):
            _write_jsonl(tmp / f"{task}.jsonl", task_documents(task, n_task_docs, rng))
            counts[task] = n_task_docs
        for task in ("rte", "winogrande"):  # Table 5's train splits
            _write_jsonl(tmp / f"{task}-train.jsonl", task_documents(task, n_task_docs, rng))
        return {"counts": counts, "generator": "caldera.experiments.jobs.paper_local", "seed": seed}

    build_atomically(out / "tasks", f"paper-local-v{FORMAT}-seed{seed}", build)
    return out


def write_inputs(out: str | Path, seed: int = 0) -> dict[str, str]:
    """Every input of ``config/paper-local.yaml`` under ``out``: ``models/<name>`` and ``data``."""
    out = Path(out)
    paths = {}
    for i, (name, (key, arch, vocab, extra)) in enumerate(sorted(MODELS.items())):
        paths[name] = str(write_model(out / "models" / name, key, arch, vocab, extra, seed + i))
    paths["data"] = str(write_data(out / "data", seed))
    return paths


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="paper-local", help="folder to write (default: paper-local)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    print(json.dumps(write_inputs(args.out, args.seed), indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

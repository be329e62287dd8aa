"""What the checkpoint tests share: a tiny LLaMA compressed in place and saved, token ids and the logits on them,
edits of a saved checkpoint (with or without recomputed checksums), and lm-eval's CLI on the project's ARC-Easy
task."""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

import pytest
import torch

from caldera.methods import get_method
from caldera.nn.compressed_linear import CompressedLinear
from caldera.pipeline.checkpoint import CHECKSUM_FILE, CONFIG_FILE, MODEL_FILE, replace_module, save_compressed
from caldera.pipeline.layer_runner import decoder_layers
from caldera.pipeline.linears import LINEARS
from tests.helpers import tiny_llama as _tiny_llama
from tests.helpers import word_tokenizer

ROOT = Path(__file__).resolve().parents[2]


def tiny_llama(seed: int = 0, tie: bool = True):
    return _tiny_llama(seed, tie_word_embeddings=tie, bos_token_id=1, eos_token_id=2, pad_token_id=0)


def compress_in_place(model):
    """QuIP# on every linear with an identity-like Hessian (fast), swapped into the model."""
    spec = get_method("quip#")
    cfg = spec.make_config({})
    for li, layer in enumerate(decoder_layers(model)):
        for name in LINEARS:
            lin = layer.get_submodule(name)
            W = lin.weight.detach().float()
            H = torch.eye(W.shape[1], dtype=torch.float64)
            dec = spec.fn(W, H, cfg)
            replace_module(model, f"model.layers.{li}.{name}", CompressedLinear.from_decomposition(dec))
    return model, cfg


def save_tiny_checkpoint(folder, seed: int = 0, extra=None):
    """``(model, path)``: a tiny LLaMA compressed in place (:func:`compress_in_place`) and saved to ``folder``
    with a word tokenizer and the further config keys ``extra``."""
    model, cfg = compress_in_place(tiny_llama(seed))
    path = save_compressed(model, folder, method="quip#", method_config=dataclasses.asdict(cfg),
                           tokenizer=word_tokenizer(), extra=extra)
    return model, path


IDS = [[1, 5, 9, 33, 7, 100, 2, 64], [1, 3, 3, 3, 90, 91, 92, 93]]


def ids_logits(model):
    """The logits of ``model`` on :data:`IDS`."""
    with torch.no_grad():
        return model(torch.tensor(IDS)).logits


def copy_checkpoint(path, dst):
    import shutil

    shutil.copytree(path, dst)
    return dst


def rechecksum(ck):
    """What a buggy writer or a hand edit produces: every checksum valid, the content inconsistent."""
    from caldera.atomic import sha256_file

    sums = {p.name: sha256_file(p) for p in sorted(ck.iterdir()) if p.is_file() and p.name != CHECKSUM_FILE}
    (ck / CHECKSUM_FILE).write_text(json.dumps({"sha256": sums}))


def reseal(ck):
    """What a buggy writer produces: the content manifest, config.json and every checksum recomputed from the
    (inconsistent) content, so only the deeper checks (structure, shapes, fingerprints) can catch it."""
    from safetensors.torch import load_file

    from caldera.atomic import sha256_file
    from caldera.pipeline.checkpoint import HF_CONFIG_FILE, hf_config_dict, json_digest, tensor_digest

    cfg = json.loads((ck / CONFIG_FILE).read_text())
    if isinstance(cfg.get("base_config"), dict):
        (ck / HF_CONFIG_FILE).write_text(json.dumps(hf_config_dict(cfg["base_config"], cfg.get("method"), cfg)))
        cfg["manifest"]["base_config"] = json_digest(cfg["base_config"])
    cfg["manifest"]["tensors"] = {k: tensor_digest(v) for k, v in load_file(str(ck / MODEL_FILE)).items()}
    cfg["manifest"]["files"] = {p.name: sha256_file(p) for p in ck.iterdir()
                                if p.name not in (MODEL_FILE, CONFIG_FILE, CHECKSUM_FILE)}
    (ck / CONFIG_FILE).write_text(json.dumps(cfg))
    rechecksum(ck)


def edit_config(f, name=CONFIG_FILE):
    def go(ck):
        cfg = json.loads((ck / name).read_text())
        f(cfg)
        (ck / name).write_text(json.dumps(cfg))

    return go


def edit_tensors(f):
    def go(ck):
        from safetensors.torch import load_file, save_file

        t = load_file(str(ck / MODEL_FILE))
        f(t)
        save_file(t, str(ck / MODEL_FILE), metadata={"format": "caldera-checkpoint/1"})

    return go


def continuation_loglik(model, tok, context: str, continuation: str) -> float:
    """log p(continuation | context) summed over its tokens, split as lm-eval's HF model splits the pair."""
    whole = tok(context + continuation, add_special_tokens=False)["input_ids"]
    n_ctx = len(tok(context, add_special_tokens=False)["input_ids"])
    ids = torch.tensor([whole])
    with torch.no_grad():
        logp = torch.log_softmax(model(ids).logits[0, :-1].double(), dim=-1)
    return float(sum(logp[i - 1, whole[i]] for i in range(n_ctx, len(whole))))


ARC_DOCS = [{"id": f"q{i}", "question": f"w{5 + i} w9 w33", "choices": ["w10 w11", "w20", f"w{30 + i} w31", "w40"],
             "gold": i % 4} for i in range(6)]


def lm_eval_args(pretrained: str, tmp_path) -> tuple[list[str], dict[str, str], Path]:
    """lm-eval CLI arguments for the project's ARC-Easy task on 4 local documents (ARC_DOCS, built into a
    CALDERA_CACHE under ``tmp_path``), the offline environment (without PYTHONPATH) and the output folder."""
    from caldera.eval.zeroshot import tasks_dir
    from caldera.pipeline.assets import build_atomically

    cache = tmp_path / "cache"

    def build(tmp):  # with the .complete marker the task loader verifies when caldera is importable
        (tmp / "arc_easy.jsonl").write_text("".join(json.dumps(d) + "\n" for d in ARC_DOCS))

    build_atomically(cache / "tasks", "0" * 64, build)
    out = tmp_path / "lm_eval_out"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", HF_DATASETS_OFFLINE="1", CALDERA_CACHE=str(cache))
    args = ["--model", "hf", "--model_args", pretrained, "--tasks", "caldera_arc_easy",
            "--include_path", str(tasks_dir()), "--limit", "4", "--batch_size", "2", "--device", "cpu",
            "--output_path", str(out), "--log_samples"]
    return args, env, out


def check_lm_eval_output(out, model, tok, abs_tol: float) -> None:
    """lm-eval's result files: 4 documents, every logged log-likelihood equal to ``model``'s own (oracle: a direct
    forward) within ``abs_tol``, and the accuracy that follows from them."""
    results = json.loads(next(out.rglob("results_*.json")).read_text())
    task = results["results"]["caldera_arc_easy"]
    assert results["n-samples"]["caldera_arc_easy"]["effective"] == 4
    lines = next(out.rglob("samples_caldera_arc_easy_*.jsonl")).read_text().splitlines()
    samples = [json.loads(line) for line in lines]
    assert sorted(s["doc_id"] for s in samples) == [0, 1, 2, 3]
    correct = []
    for s in samples:
        lls = []
        for arg, resp in zip(s["arguments"].values(), s["resps"]):
            ours = continuation_loglik(model, tok, arg["arg_0"], arg["arg_1"])
            assert float(resp[0][0]) == pytest.approx(ours, abs=abs_tol), (s["doc_id"], arg)
            lls.append(ours)
        assert len(lls) == 4
        correct.append(float(max(range(4), key=lls.__getitem__) == ARC_DOCS[s["doc_id"]]["gold"]))
    assert task["acc,none"] == pytest.approx(sum(correct) / 4)

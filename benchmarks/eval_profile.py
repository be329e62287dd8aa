"""Where one evaluation job spends its time: ``python benchmarks/eval_profile.py --config config/mini.yaml``.

Runs :func:`caldera.experiments.jobs.evaluate.step_evaluate` for the dense model of each ``--model`` into a
temporary folder and reports wall seconds per component: imports, model load, perplexity data (tokenization) and
forwards per corpus, lm-eval's model wrapper, task construction (``TaskManager`` + ``get_task_dict``),
zero-shot scoring (``_loglikelihood_tokens``, the forwards) and the rest of ``simple_evaluate``. The timers wrap
library functions (nothing in the product changes). ``--head`` also times one perplexity window's forward
split into the decoder body and the LM head (Gemma-3's 262,144-row head).
"""

from __future__ import annotations

import argparse
import functools
import json
import tempfile
import time
from collections import defaultdict
from pathlib import Path


def _wrap(owner, name: str, key: str, acc: dict) -> None:
    fn = getattr(owner, name)

    @functools.wraps(fn)
    def timed(*a, **k):
        t0 = time.perf_counter()
        try:
            return fn(*a, **k)
        finally:
            acc[key] += time.perf_counter() - t0

    setattr(owner, name, timed)


def head_split(mdl, seq_len: int) -> dict[str, float]:
    """Seconds of one ``(1, seq_len)`` forward: decoder body and LM head separately (random ids)."""
    import torch

    ids = torch.randint(0, mdl.config.vocab_size, (1, seq_len))
    with torch.inference_mode():
        mdl.model(input_ids=ids)  # warm-up
        t0 = time.perf_counter()
        h = mdl.model(input_ids=ids).last_hidden_state
        t1 = time.perf_counter()
        mdl.lm_head(h)
        t2 = time.perf_counter()
    return {"body_s": t1 - t0, "head_s": t2 - t1, "vocab": int(mdl.config.vocab_size)}


def profile(config: dict, model: str, head: bool = False) -> dict:
    t0 = time.perf_counter()
    import lm_eval  # noqa: F401
    import lm_eval.tasks
    from lm_eval.models.huggingface import HFLM

    from caldera.eval import perplexity as ppl_mod
    from caldera.experiments.jobs import evaluate as evaluate_job
    from caldera.experiments.planning.plan import make_variant
    from caldera.experiments.planning.settings import EvalSettings, RunContext
    from caldera.pipeline import text

    acc: dict[str, float] = defaultdict(float)
    acc["imports"] = time.perf_counter() - t0
    _wrap(evaluate_job, "load_variant", "model load", acc)
    _wrap(text, "perplexity_stream", "ppl data (tokenize)", acc)
    _wrap(text, "random_windows", "ppl data (tokenize)", acc)
    _wrap(ppl_mod, "window_losses", "ppl forwards", acc)
    _wrap(HFLM, "__init__", "lm-eval model wrapper", acc)
    _wrap(lm_eval.tasks.TaskManager, "__init__", "task construction", acc)
    _wrap(lm_eval.tasks, "get_task_dict", "task construction", acc)
    _wrap(lm_eval.tasks.TaskManager, "load", "task construction", acc)
    _wrap(HFLM, "_loglikelihood_tokens", "zero-shot scoring (forwards)", acc)
    _wrap(lm_eval, "simple_evaluate", "simple_evaluate (total)", acc)
    v, run = make_variant(model, "dense", {}, 0, None, "dense"), RunContext.from_config(config)
    with tempfile.TemporaryDirectory() as tmp:
        outs = {c: str(Path(tmp, f"ppl_{c}.json")) for c in config["eval"]["ppl"]}
        t1 = time.perf_counter()
        evaluate_job.step_evaluate(EvalSettings.from_block(config["eval"]), run, v, None,
                                   outs, str(Path(tmp, "zeroshot.json")))
        total = time.perf_counter() - t1
        zs = json.loads(Path(tmp, "zeroshot.json").read_text())
    out = {k: round(s, 2) for k, s in acc.items()}
    out["step_evaluate (total)"] = round(total, 2)
    out["zero-shot documents"] = sum(t["n"] for t in zs["results"]["tasks"].values())
    if head:
        mdl, _ = evaluate_job.load_variant(run, v, None)  # the dense model: eval.weights does not apply
        seq = max(s["seq_len"] for s in config["eval"]["ppl"].values())
        out["one ppl window forward"] = {k: round(x, 3) if isinstance(x, float) else x
                                         for k, x in head_split(mdl, seq).items()}
    return out


def main(argv=None) -> None:
    import torch

    from caldera.strict_yaml import load_yaml_strict

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--config", default="config/mini.yaml")
    p.add_argument("--model", action="append", help="model key of the config (repeatable; default: all)")
    p.add_argument("--set-eval", default=None, help="JSON merged into config['eval'] (e.g. a larger limit)")
    p.add_argument("--head", action="store_true", help="also time the LM head of one perplexity window")
    a = p.parse_args(argv)
    torch.set_num_threads(1)
    config = load_yaml_strict(a.config)
    if a.set_eval:
        for k, v in json.loads(a.set_eval).items():
            config["eval"][k] = {**config["eval"].get(k, {}), **v} if isinstance(v, dict) else v
    for m in a.model or list(config["models"]):
        print(json.dumps({"model": m, **profile(config, m, head=a.head)}, indent=1), flush=True)


if __name__ == "__main__":
    main()

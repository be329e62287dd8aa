"""``caldera eval ppl|zeroshot|throughput``: perplexity, zero-shot accuracy and generation speed."""

from __future__ import annotations

import argparse
import math
from typing import Any

from caldera.cli.common import (
    DEFAULT_MODEL,
    MAX_SEED,
    CLIError,
    _emit,
    _example,
    _Parser,
    check_memory,
    check_positions,
    forward_memory,
    guard_output,
    int_option,
    is_records_file,
    load_any_model,
    local_input,
    model_config,
    parse_limit,
    resolve_model_path,
)


def cmd_eval(args: argparse.Namespace) -> int:
    import torch

    if args.out:
        guard_output(args.out, option="--out", kind=f"records file of caldera eval {args.what}",
                     same_kind=is_records_file("model", "kind", what=args.what),
                     inputs={"--model": local_input(args.model), "--dense": local_input(getattr(args, "dense", None))},
                     resumable=True)
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.what == "throughput":
        return _eval_throughput(args)
    config = model_config(resolve_model_path(args.model)) if args.what == "ppl" else None
    if config is not None:  # config.json alone: a run that cannot fit is refused before the weights load
        check_ppl_fits(config, args)
    model, tok, kind = load_any_model(args.model)
    if tok is None:
        raise CLIError(f"{args.model} has no tokenizer files; re-run `caldera compress` (it saves the tokenizer)")
    if args.what == "ppl" and config is None:  # a hub model: its config came with it
        check_ppl_fits(model.config, args)
    try:
        if args.what == "ppl":
            from caldera.eval.perplexity import perplexity
            from caldera.pipeline import text

            if args.source in ("coqa-stories", "c4"):
                try:
                    data = text.random_windows(tok, args.source, args.seq_len, args.n_windows, seed=args.seed)
                except ValueError as e:
                    raise CLIError(f"--seq-len {args.seq_len}, --n-windows {args.n_windows}: {e}") from None
            else:
                data = text.perplexity_stream(tok, args.source)
                if data.shape[-1] < args.seq_len:
                    raise CLIError(f"--seq-len {args.seq_len} is longer than the {args.source} text "
                                   f"({data.shape[-1]} tokens): no window fits; use --seq-len <= {data.shape[-1]}")
            res = perplexity(
                model,
                data,
                args.seq_len,
                batch_size=args.batch_size,
                max_windows=args.max_windows,
                progress=not args.quiet,
            )
        else:
            from caldera.eval.zeroshot import TASKS, zeroshot

            tasks = args.tasks.split(",") if args.tasks else list(TASKS)
            res = zeroshot(model, tok, tasks=tasks, limit=args.limit, batch_size=args.batch_size)
    except FileNotFoundError as e:
        raise CLIError(f"{e}\n(evaluation data missing: run `caldera assets` first)") from None
    res.update(model=args.model, kind=kind, what=args.what)
    if args.what == "ppl":
        res.update(source=args.source, seq_len=args.seq_len)
        return _emit(args, res, ppl_summary(res))
    brief = {**res, "tasks": {t: {k: v for k, v in r.items() if k != "docs"} for t, r in res["tasks"].items()},
             "docs": f"per-document records in {args.out}" if args.out else "per-document records: pass --out FILE"}
    return _emit(args, res, zeroshot_summary(res), brief)


def check_ppl_fits(config: Any, args: argparse.Namespace) -> None:
    """``--seq-len`` within the model's positions and a forward of ``--batch-size`` windows
    (:func:`~caldera.cli.common.forward_memory`) within what this machine has available, for the model of
    transformers ``config``: :class:`CLIError` naming the options otherwise."""
    check_positions(config, args.seq_len, "--seq-len")
    check_memory(forward_memory(config, args.batch_size, args.seq_len),
                 f"perplexity on windows of --seq-len {args.seq_len}, --batch-size {args.batch_size} at a time,",
                 "lower --batch-size or --seq-len")


def ppl_summary(res: dict[str, Any]) -> list[str]:
    """``caldera eval ppl``'s lines: perplexity with its interval, then what was scored."""
    ci = f"  [{res['ppl_lo']:.2f}, {res['ppl_hi']:.2f}] 95 % (Student's t over windows)" if "ppl_lo" in res else ""
    return [f"perplexity {res['ppl']:.2f}{ci}",
            f"  {res['model']} ({res['kind']}), {res['source']}: {res['n_windows']} windows x {res['seq_len']} tokens "
            f"({res['n_tokens']} scored)"]


def zeroshot_summary(res: dict[str, Any]) -> list[str]:
    """``caldera eval zeroshot``'s lines: one per task, accuracy (and normalized) in % with a Wilson interval."""
    from caldera.stats import wilson_interval

    lines = [f"zero-shot accuracy, {res['model']} ({res['kind']}); 95 % Wilson intervals",
             f"  {'task':24s} {'n':>5s}  {'acc %':>20s}  {'acc_norm %':>20s}"]
    for task, r in res["tasks"].items():
        n = int(r.get("n") or 0)
        cells = []
        for m in ("acc", "acc_norm"):
            if m not in r:
                cells.append(f"{'—':>20s}")
                continue
            lo, hi = wilson_interval(round(r[m] * n), n) if n else (math.nan, math.nan)
            cells.append(f"{100 * r[m]:6.1f} [{100 * lo:5.1f}, {100 * hi:5.1f}]")
        lines.append(f"  {task:24s} {n:5d}  {cells[0]:>20s}  {cells[1]:>20s}")
    return lines


def _eval_throughput(args: argparse.Namespace) -> int:
    import torch

    from caldera.eval.throughput import compare_throughput

    length, option = args.prompt_len + args.new_tokens, "--prompt-len + --new-tokens"
    names = [(n, opt) for n, opt in ((args.dense, "--dense"), (args.model, "--model")) if n]
    configs = {n: model_config(resolve_model_path(n, opt)) for n, opt in names}
    for config in configs.values():  # config.json alone: checked before any weight loads
        if config is not None:
            check_positions(config, length, option)
    models: dict[str, Any] = {}
    tok = None
    if args.dense:
        m, tok, _ = load_any_model(args.dense, "--dense")
        models["dense"] = m
    m, t2, kind = load_any_model(args.model)
    models[kind if kind not in models else "model"] = m
    tok = tok or t2
    for (name, _), m in zip(names, models.values()):
        if configs[name] is None:  # a hub model: its config came with it
            check_positions(m.config, length, option)
    if args.device:
        for m in models.values():
            m.to(args.device)
    if tok is not None:
        ids = tok(args.prompt, return_tensors="pt")["input_ids"][:, : max(1, args.prompt_len)]
    else:
        ids = torch.arange(1, args.prompt_len + 1).unsqueeze(0)
    res = compare_throughput(
        models, ids, new_tokens=args.new_tokens, runs=args.runs, warmup=args.warmup, calls=args.calls
    )
    lines = [f"{name:10s} decode {r['decode']['tokens_per_s']:8.2f} tok/s   single-token forward "
             f"{r['single_token']['tokens_per_s']:8.2f} tok/s" for name, r in res["models"].items()]
    return _emit(args, res, lines)



def add_parser(sub: Any, raw: Any) -> None:
    """This command's parser (``caldera COMMAND --help``)."""
    from caldera.pipeline.text import EVALUATION_SOURCES

    p = sub.add_parser(
        "eval",
        help="evaluate: ppl, zeroshot or throughput",
        description="Evaluate a dense model or a compressed checkpoint (caldera eval ppl|zeroshot|throughput "
        "--help for each). Prints a short summary; --json prints the records (zero-shot: without the "
        "per-document rows), --out FILE writes all of them, --quiet prints nothing.",
        formatter_class=raw,
        epilog=_example("caldera eval ppl --model CKPT --max-windows 8",
                        "caldera eval zeroshot --model CKPT --tasks caldera_arc_easy --limit 100 --out zs.json",
                        "caldera eval throughput --model CKPT --dense smollm2"),
    )
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--model", default=DEFAULT_MODEL, help="checkpoint, smollm2, gemma3, local folder or hub name")
    common.add_argument("--threads", type=int_option(1, meaning="torch CPU threads"),
                        help="torch CPU threads (default: torch's own choice)")
    common.add_argument("--out", help="write the full JSON records here (zero-shot: with every document's result; "
                        "default: none written)")
    common.add_argument("--json", action="store_true", help="print the JSON records instead of the summary")
    common.add_argument("--quiet", action="store_true", help="no progress bars and no summary (errors only)")
    what = p.add_subparsers(dest="what", required=True, metavar="WHAT", parser_class=_Parser)
    q = what.add_parser("ppl", parents=[common], help="perplexity with its bootstrap interval",
                        description="Perplexity of the model: the stream protocol (WikiText-2 style) or random "
                        "windows (C4 style), with a 95 % bootstrap interval over windows.",
                        formatter_class=raw, epilog=_example("caldera eval ppl --model CKPT --max-windows 8"))
    q.add_argument("--source", default=EVALUATION_SOURCES[0],
                   help=f"text (default {EVALUATION_SOURCES[0]}; coqa-stories and c4 use the random-window protocol)")
    q.add_argument("--seq-len", type=int_option(2, meaning="window length, at most the model's "
                                                 "max_position_embeddings"), default=512,
                   help="window length (default 512; at most the model's max_position_embeddings)")
    q.add_argument("--n-windows", type=int_option(1, meaning="windows drawn"), default=64,
                   help="windows for the random-window protocol")
    q.add_argument("--max-windows", type=int_option(1, meaning="windows scored"),
                   help="only the first windows (quick estimate; default: every window)")
    q.add_argument("--seed", type=int_option(0, MAX_SEED, "the windows' seed"), default=0,
                   help="random-window protocol: the windows' seed")
    q.add_argument("--batch-size", type=int_option(1, meaning="windows per forward"), default=1,
                   help="windows per forward (default 1)")
    q = what.add_parser("zeroshot", parents=[common], help="lm-eval zero-shot accuracy with Wilson intervals",
                        description="Zero-shot accuracy on the shipped lm-eval tasks, with 95 % Wilson intervals; "
                        "--out keeps every document's result (the claims' paired measures).",
                        formatter_class=raw, epilog=_example(
                            "caldera eval zeroshot --model CKPT --tasks caldera_arc_easy --limit 100 --out zs.json"))
    q.add_argument("--tasks", help="comma-separated tasks (default all five)")
    q.add_argument("--limit", type=parse_limit,
                   help="documents per task (integer) or a fraction in (0, 1) (default: every document)")
    q.add_argument("--batch-size", type=int_option(1, meaning="requests per forward"), default=1,
                   help="requests per forward (default 1)")
    q = what.add_parser("throughput", parents=[common], help="batch-1 generation and single-token forward speed",
                        description="Batch-1 tokens per second: generation with a KV cache and the paper's "
                        "single-token forward, median of timed runs.",
                        formatter_class=raw, epilog=_example("caldera eval throughput --model CKPT --dense smollm2"))
    q.add_argument("--dense", help="also measure this dense model in the same run (default: none)")
    q.add_argument("--new-tokens", type=int_option(1, meaning="generated tokens"), default=32,
                   help="generated tokens per run")
    q.add_argument("--runs", type=int_option(1, meaning="timed runs"), default=5, help="timed runs (median)")
    q.add_argument("--warmup", type=int_option(0, meaning="untimed runs"), default=1, help="untimed runs")
    q.add_argument("--calls", type=int_option(1, meaning="calls per timed block"), default=20,
                   help="model(token) calls per timed block")
    q.add_argument("--prompt", default="The capital of France is", help="prompt text")
    q.add_argument("--prompt-len", type=int_option(1, meaning="prompt tokens"), default=8, help="prompt tokens kept")
    q.add_argument("--device", help="e.g. cuda (default: where the model loads, the CPU)")
    p.set_defaults(func=cmd_eval)

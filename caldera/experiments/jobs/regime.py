"""The stand-ins' regime measurement (config block ``regime``; not a rule of the default workflow): for each stand-in
of ``regime.models``, QuIP# compressed at every candidate Q bits (``regime.q_bits``: E8P 2, E8P-RVQ3 3, E8P-RVQ4
4) and seed (``regime.seeds``) with the run's own calibration Hessians, and its perplexity and the dense model's
on *held-out calibration* windows (:func:`heldout_windows`; never the evaluation text). The selection and its
Markdown are :mod:`caldera.experiments.report.regime_report`; the paper targets
:func:`caldera.experiments.planning.regime_plan.paper_target`.

Compression and evaluation are the workflow's own steps (:func:`caldera.experiments.jobs.compress.
step_compress_variant`, :func:`caldera.experiments.jobs.evaluate.load_variant`,
:func:`caldera.eval.perplexity.perplexity`), so a candidate is exactly the ``quip#`` variant a table row would
compress with ``q_bits`` and ``seed`` set. Its per-layer files and checkpoint stay in the work folder (a rerun
resumes them).

Run it from the repository root after the run's Hessians exist (``snakemake --cores 2`` makes them)::

    python -m caldera.experiments.jobs.regime --configfile config/mini.yaml --tables-dir paper_tables/generated

Outputs: ``regime.json`` (every perplexity, ratio and score, the choice) and ``regime.md`` in ``--tables-dir``;
their clock readings go to ``regime.timing.json``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import shlex
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from caldera.experiments.planning.regime_plan import RegimePlan
from caldera.experiments.planning.settings import RunContext


def heldout_windows(run: RunContext, model: str, n_windows: int):
    """``(n_windows, calibration.seq_len)`` int64 held-out calibration windows of ``model``'s tokenizer: the rows
    of :func:`caldera.pipeline.text.calibration_sequences` (the run's calibration source, seed and length) after
    the first ``calibration.n_samples``, which are the rows the Hessians were collected on (the sampler's first
    rows do not depend on how many are asked for, and each row starts at a new document, so a held-out window
    shares no document with them while the rows use fewer documents than the source has)."""
    from caldera.experiments.jobs.models import load_tokenizer
    from caldera.pipeline.text import calibration_sequences

    cal = run.calibration
    if cal is None:
        raise ValueError("regime: the run has no calibration block; the held-out windows are drawn from it")
    tok = load_tokenizer(run, model)
    ids = calibration_sequences(tok, cal.n_samples + n_windows, cal.seq_len, cal.seed, source=cal.source)
    return ids[cal.n_samples:]


def candidate_variant(plan: RegimePlan, model: str, q_bits: int, seed: int):
    """The ``quip#`` variant of candidate ``q_bits`` with compression seed ``seed`` (``methods.quip#.params``
    otherwise)."""
    from caldera.experiments.planning.variants import make_variant

    params = {**plan.quip_params, "q_bits": int(q_bits), "seed": int(seed)}
    return make_variant(model, "quip#", params, 0, None, f"quipsharp-q{q_bits}-seed{seed}",
                        f"regime candidate q_bits={q_bits} seed={seed}")


def one_chunk(run: RunContext, model: str) -> RunContext:
    """``run`` with every compressed layer of ``model`` in one job chunk (the measurement compresses a candidate in
    one process, :func:`caldera.experiments.jobs.compress.step_compress_variant`)."""
    n = len(run.layers) if run.layers is not None else run.models[model].num_layers
    return dataclasses.replace(run, layers_per_job=max(n, 1))


def measure_model(plan: RegimePlan, model: str, hessian_dir: str, work_dir: str, *,
                  log: Callable[[str], None] = print) -> tuple[dict[str, Any], dict[str, float]]:
    """``(measurements, seconds)`` of one stand-in: ``{"dense": {"ppl", "nll", "n_windows", "window_nll",
    "window_tokens"}, "candidates": {b: {"ppl_by_seed": {seed: ppl}, "window_nll_by_seed": {seed: [summed nats per
    window]}}}}`` on :func:`heldout_windows`, and the seconds of each step."""
    from caldera.eval.perplexity import perplexity
    from caldera.experiments.jobs.calibrate import check_job_hessians
    from caldera.experiments.jobs.compress import step_compress_variant
    from caldera.experiments.jobs.evaluate import load_variant
    from caldera.experiments.planning.variants import make_variant

    s = plan.settings
    run = one_chunk(plan.run, model)
    layers = list(run.layers) if run.layers is not None else list(range(run.models[model].num_layers))
    check_job_hessians(run, model, hessian_dir, layers)  # this run's files, before any work
    windows = heldout_windows(run, model, s.n_windows)
    seq_len = int(windows.shape[1])
    seconds: dict[str, float] = {}

    def ppl_of(v, checkpoint):
        mdl, _ = load_variant(run, v, checkpoint, reconstructed=plan.reconstructed)
        res = perplexity(mdl, windows, seq_len, progress=False)
        del mdl
        return res

    t0 = time.perf_counter()
    dense = ppl_of(make_variant(model, "dense", {}, 0, None, "dense"), None)
    seconds["dense_eval_s"] = time.perf_counter() - t0
    log(f"regime {model}: dense held-out ppl {dense['ppl']:.4f} ({seconds['dense_eval_s']:.0f}s)")
    cands: dict[int, dict[str, Any]] = {}
    for b in s.q_bits:
        cands[b] = {"ppl_by_seed": {}, "window_nll_by_seed": {}}
        for seed in s.seeds:
            v = candidate_variant(plan, model, b, seed)
            root = Path(work_dir) / model / v.id
            t0 = time.perf_counter()
            step_compress_variant(run, v, hessian_dir, str(root / "layers"), str(root / "checkpoint"))
            t1 = time.perf_counter()
            res = ppl_of(v, str(root / "checkpoint"))
            t2 = time.perf_counter()
            seconds[f"q{b}_seed{seed}_compress_s"], seconds[f"q{b}_seed{seed}_eval_s"] = t1 - t0, t2 - t1
            cands[b]["ppl_by_seed"][seed] = res["ppl"]
            cands[b]["window_nll_by_seed"][seed] = [float(x) for x in res["window_nll"]]
            log(f"regime {model}: QuIP# q_bits {b} seed {seed}: held-out ppl {res['ppl']:.4f} "
                f"(x{res['ppl'] / dense['ppl']:.3f} dense; compress {t1 - t0:.0f}s, eval {t2 - t1:.0f}s)")
    return ({"dense": {"ppl": dense["ppl"], "nll": dense["nll"], "n_windows": dense["n_windows"],
                       "window_nll": [float(x) for x in dense["window_nll"]],
                       "window_tokens": [float(x) for x in dense["window_tokens"]]},
             "candidates": cands}, seconds)


def step_regime(plan: RegimePlan, hessian_dirs: Mapping[str, str], work_dir: str, out_json: str, out_md: str,
                *, made_by: Mapping[str, str] | None = None, log: Callable[[str], None] = print) -> dict[str, Any]:
    """Measure every stand-in of ``plan`` (``hessian_dirs``: model → its calibration Hessians), select each one's
    Q bits (:func:`caldera.experiments.report.regime_report.summarize_model`) and write ``out_json`` (no clock
    reading; the seconds go to its timing file) and ``out_md``. ``made_by``: ``{"command", "commit"}`` the record
    names as its origin. Returns the result as written."""
    from caldera.atomic import write_atomic, write_result
    from caldera.experiments.report.regime_report import summarize_model, to_json_ready, to_markdown

    missing = sorted(m for m in plan.settings.models if m not in hessian_dirs)
    if missing:
        raise ValueError(f"regime.models names {missing} but no Hessians were given for them")
    s, cal = plan.settings, plan.run.calibration
    res: dict[str, Any] = {
        "criterion": f"|ln(QuIP# / dense held-out calibration ppl) - ln(paper's 2-bit QuIP# / unquantized "
                     f"{s.corpus} ppl)|, geometric mean over seeds; lowest wins, ties to fewer bits",
        "regime": s.as_block(), "seeds": list(s.seeds), "quip_params": plan.quip_params,
        "reconstructed": plan.reconstructed,
        "heldout": {"source": cal.source, "seed": cal.seed, "seq_len": cal.seq_len, "first_row": cal.n_samples,
                    "n_windows": s.n_windows},
        "models": {},
    }
    if made_by is not None:
        res["made_by"] = {"command": str(made_by["command"]), "commit": str(made_by["commit"])}
    seconds: dict[str, Any] = {}
    for model in s.models:
        meas, seconds[model] = measure_model(plan, model, hessian_dirs[model], work_dir, log=log)
        res["models"][model] = summarize_model(meas, plan.targets[model])
        configured = s.models[model].q_bits
        if configured is not None and configured != res["models"][model]["q_bits"]:
            log(f"regime {model}: measured choice {res['models'][model]['q_bits']} bits differs from "
                f"regime.models.{model}.q_bits = {configured}; update the config from {out_md}")
    res = to_json_ready(res)
    write_result(out_json, res, seconds)
    write_atomic(out_md, to_markdown(res))
    return res


# ---------------------------------------------------------------------------------------------- command line


def _override(config: dict[str, Any], models: Sequence[str] | None, seeds: Sequence[int] | None,
              n_windows: int | None) -> dict[str, Any]:
    """``config`` with its ``regime`` block narrowed to ``models`` and given ``seeds`` / ``n_windows``."""
    block = dict(config.get("regime") or {})
    if models:
        unknown = sorted(set(models) - set(block.get("models", {})))
        if unknown:
            raise ValueError(f"--models {unknown}: not in regime.models ({sorted(block.get('models', {}))})")
        block["models"] = {m: block["models"][m] for m in models}
    if seeds:
        block["seeds"] = [int(x) for x in seeds]
    if n_windows is not None:
        block["n_windows"] = int(n_windows)
    return {**config, "regime": block}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m caldera.experiments.jobs.regime",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--configfile", default="config/mini.yaml", help="workflow config with a regime block")
    ap.add_argument("--tables-dir", help="where regime.md and regime.json go (default: the config's tables_dir)")
    ap.add_argument("--results", help="the run's results folder (default results/<name>): its hessians/<model>")
    ap.add_argument("--hessians", action="append", default=[], metavar="MODEL=DIR",
                    help="a stand-in's Hessians folder (default RESULTS/hessians/MODEL)")
    ap.add_argument("--work-dir", help="candidates' per-layer files and checkpoints (default RESULTS/regime)")
    ap.add_argument("--models", nargs="+", help="only these stand-ins of regime.models")
    ap.add_argument("--seeds", nargs="+", type=int, help="compression seeds (default regime.seeds)")
    ap.add_argument("--n-windows", type=int, help="held-out windows (default regime.n_windows)")
    ap.add_argument("--threads", type=int, help="torch threads (default torch's own)")
    args = ap.parse_args(argv)

    from caldera.strict_yaml import load_yaml_strict

    config = _override(load_yaml_strict(Path(args.configfile)), args.models, args.seeds, args.n_windows)
    plan = RegimePlan.from_config(config)
    from caldera import numerics, openmp  # torch-free: the CPU code paths the run's jobs use, before torch loads

    numerics.apply(config.get("numerics", "native"))
    openmp.limit_spin()
    from caldera.pipeline import local_data

    local_data.use(config)
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    results = Path(args.results or f"results/{config['name']}")
    dirs = {m: str(results / "hessians" / m) for m in plan.settings.models}
    for spec in args.hessians:
        m, sep, d = spec.partition("=")
        if not sep or m not in dirs:
            raise SystemExit(f"--hessians {spec!r}: expected MODEL=DIR with MODEL one of {sorted(dirs)}")
        dirs[m] = d
    tables = Path(args.tables_dir or config["tables_dir"])
    from caldera.pipeline.checkpoint.provenance import caldera_commit

    made_by = {"command": shlex.join(["python", "-m", "caldera.experiments.jobs.regime",
                                      *(sys.argv[1:] if argv is None else argv)]), "commit": caldera_commit()}
    with torch.no_grad():
        res = step_regime(plan, dirs, args.work_dir or str(results / "regime"), str(tables / "regime.json"),
                          str(tables / "regime.md"), made_by=made_by,
                          log=lambda m: print(m, file=sys.stderr, flush=True))
    print(json.dumps({m: r["q_bits"] for m, r in res["models"].items()}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

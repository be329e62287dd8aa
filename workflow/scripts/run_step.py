"""Adapter: every rule calls exactly one library function, chosen by ``params.step``; output goes to the log."""

import contextlib
import os
import subprocess
import sys

sm = snakemake  # noqa: F821  (injected by Snakemake)
# One BLAS/OpenMP pool of exactly the job's `threads` (1 unless a profile sets more): Snakemake runs `--cores`
# jobs side by side, and two 2-thread torch jobs on 2 cores run ~3x slower than two 1-thread jobs.
for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ[var] = str(sm.threads)

import torch  # noqa: E402

torch.set_num_threads(sm.threads)

from caldera.experiments import claims, figures, plan, steps, tables  # noqa: E402

cfg, w, out, step = sm.config, sm.wildcards, sm.output, sm.params.step
res = f"results/{cfg['name']}"
with open(sm.log[0], "w") as log, contextlib.redirect_stdout(log), contextlib.redirect_stderr(log):
    v = plan.all_variants(cfg)[w.variant] if "variant" in w.keys() else None
    ckpt = f"{res}/compressed/{w.variant}/checkpoint" if v is not None and v.method != "dense" else None
    if step == "assets":
        steps.step_assets(cfg, out[0])
    elif step == "hessians":
        steps.step_hessians(cfg, w.model, os.path.dirname(out[0]))
    elif step == "compress_layers":
        steps.step_compress_layers(cfg, v, f"{res}/hessians/{v.model}", int(w.chunk), out[0])
    elif step == "assemble":
        steps.write_json(out.summary, steps.step_assemble(cfg, v, f"{res}/compressed/{v.id}/layers", ckpt))
    elif step == "evaluate":
        steps.step_evaluate(cfg, v, ckpt, dict(zip(cfg["eval"]["ppl"], out.ppl)), out.zeroshot)
    elif step == "spectra":
        figures.step_spectra(cfg, cfg["figures"]["model"], out[0])
    elif step == "ablation_traces":
        figures.step_ablation_traces(cfg, cfg["figures"]["model"], os.path.dirname(sm.input[0]), out[0])
    elif step == "lplr_traces":
        figures.step_lplr_traces(cfg, cfg["figures"]["model"], os.path.dirname(sm.input[0]), out[0])
    elif step == "plot":
        plot = {"1": figures.plot_figure1, "3": figures.plot_figure3, "4": figures.plot_figure4}[w.n]
        plot(steps.read_json(sm.input[0]), out.png, out.pdf)
    elif step == "table":
        tables.write_table(res, cfg, w.table, out.md, out.tex, out.csv, out.json)
    elif step == "pending_table":
        tables.write_pending_table(w.ptable, plan.PENDING_TABLES[w.ptable], out.md, out.tex, out.csv)
    elif step == "theory":
        subprocess.run([sys.executable, "-m", "caldera.theory.report", "--out", out.md,
                        "--profile", cfg.get("theory", {}).get("profile", "ci")], check=True, stdout=log, stderr=log)
    elif step == "claims":
        claims.write_claims(sm.input.fig3, sm.input.fig4, list(sm.input.tables), out.md, out.json)
    elif step == "timings":
        steps.step_timings(res, out.json, out.md)
    else:
        raise ValueError(f"unknown step {step!r}")

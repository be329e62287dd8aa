"""Rule timings: run time per workflow stage, from the Snakemake ``benchmark:`` files of this run."""

from pathlib import Path

from caldera_job import job

#: Snakemake rule -> workflow stage (a rule not listed is its own stage).
STAGES = {
    "assets": "assets",
    "hessians": "calibration (Hessians)",
    "compress_variant": "compression",
    "compress_layers": "compression",
    "assemble_checkpoint": "compression",
    "profile_layers": "compression",
    "allocate": "compression",
    "evaluate": "evaluation",
    "replicate": "seed replicates (compression + evaluation)",
    "dense_reference": "evaluation",
    "weight_spectra": "figures",
    "ablation_traces": "figures",
    "figure3_data": "figures",
    "lplr_traces": "figures",
    "plot_figure": "figures",
    "plot_ranks": "figures",
    "make_table": "tables and reports",
    "pending_table": "tables and reports",
    "theory_report": "tables and reports",
    "claims": "tables and reports",
    "throughput": "throughput (Table 6)",
    "throughput_table": "tables and reports",
    "lora_finetune": "LoRA fine-tuning (Table 5)",
    "rht_finetune": "RHT fine-tuning (Tables 3-4)",
    "lora_table": "tables and reports",
}


def read_benchmarks(bench_dir: Path) -> list[dict]:
    """One record per finished job from ``<bench_dir>/<rule>/<job>.tsv`` (the layout the rules' ``benchmark:``
    use): its stage, wall seconds ``s``, peak RSS (MB) and end time (the file's mtime)."""
    out = []
    for path in sorted(bench_dir.glob("*/*.tsv")):
        lines = path.read_text().splitlines()
        if len(lines) < 2:
            continue
        row = dict(zip(lines[0].split("\t"), lines[1].split("\t")))
        try:
            s, rss = float(row["s"]), float(row.get("max_rss", "nan"))
        except (KeyError, ValueError):
            continue
        out.append({"stage": STAGES.get(path.parent.name, path.parent.name), "rule": path.parent.name, "s": s,
                    "max_rss_mb": rss, "end": path.stat().st_mtime})
    return out


sm = snakemake  # noqa: F821  (injected by Snakemake)
with job(sm):
    from caldera.experiments.steps import step_timings

    step_timings(read_benchmarks(Path(sm.params.benchmarks)), sm.params.run, sm.output.json, sm.output.md)

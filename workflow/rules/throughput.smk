# Table 6 (paper §5.4): batch-1 throughput of the dense stand-in and of the compressed checkpoints that Table 6's
# rows map to (the zero-shot tables' variants; caldera.experiments.planning.throughput_rows). One job per stand-in
# model (TP_MODELS in common.smk) loads all of that model's variants, the dense one included, and times them in
# `throughput.rounds` randomized interleaved rounds (caldera.experiments.jobs.throughput), so the claims compare
# variants measured side by side, round by round. Machine settings, rule defaults a profile overrides: the job
# reserves every core of the run (threads: workflow.cores), so nothing runs beside the timed loops
# (`set-threads: {throughput: N}` in a profile changes that; the SLURM profile sets it); the timed loops run on
# `torch_threads` torch threads, pinned (default 1; `set-resources: {throughput: {torch_threads: N}}`).
rule throughput:
    input:
        unpack(get_throughput_input),
    output:
        f"{RES}/throughput/{{tp_model}}.json",
    benchmark:
        f"{RES}/benchmarks/throughput/{{tp_model}}.tsv"
    log:
        f"{RES}/logs/throughput/{{tp_model}}.log",
    wildcard_constraints:
        tp_model=id_pattern(TP_MODELS),
    params:
        spec=throughput_spec,
        variants=get_throughput_variants,
        checkpoints=get_throughput_checkpoints,
        settings=TP,
        run=get_throughput_run,
    threads: workflow.cores
    resources:
        gpu=1,
        torch_threads=1,
    conda:
        "../envs/caldera.yaml"
    script:
        "../scripts/throughput.py"


rule throughput_table:
    input:
        [f"{RES}/throughput/{m}.json" for m in TP_MODELS],
    output:
        md=report(f"{TABLES_DIR}/{THROUGHPUT_TABLE}.md", caption="../report/throughput.rst", category="Tables"),
        tex=f"{TABLES_DIR}/{THROUGHPUT_TABLE}.tex",
        csv=f"{TABLES_DIR}/{THROUGHPUT_TABLE}.csv",
        json=f"{TABLES_DIR}/{THROUGHPUT_TABLE}.json",
    benchmark:
        f"{RES}/benchmarks/throughput_table/{THROUGHPUT_TABLE}.tsv"
    log:
        f"{RES}/logs/tables/{THROUGHPUT_TABLE}.log",
    params:
        spec=declared(TP.as_block(), sorted(TP_VARIANTS), config["stand_ins"]),
        results=get_throughput_results_dir,
        plan=ThroughputTablePlan.from_config(config),
    conda:
        "../envs/caldera.yaml"
    script:
        "../scripts/throughput_table.py"

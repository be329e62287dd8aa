# Table 6 (paper §5.4): batch-1 throughput of the dense stand-in and of the compressed checkpoints that Table 6's
# rows map to (the zero-shot tables' variants: TP_VARIANTS in common.smk; caldera.experiments.planning.throughput_rows). One job
# per variant. Machine settings, rule defaults a profile overrides: the job reserves every core of the run
# (threads: workflow.cores), so nothing runs beside the timed loops (`set-threads: {throughput: N}` in a profile
# changes that; the SLURM profile sets it); the timed loops run on `torch_threads` torch threads, pinned (default 1;
# `set-resources: {throughput: {torch_threads: N}}`).
rule throughput:
    input:
        unpack(get_throughput_input),
    output:
        f"{RES}/throughput/{{variant}}.json",
    benchmark:
        f"{RES}/benchmarks/throughput/{{variant}}.tsv"
    log:
        f"{RES}/logs/throughput/{{variant}}.log",
    params:
        spec=throughput_spec,
        variant=get_throughput_variant,
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
        [f"{RES}/throughput/{v}.json" for v in sorted(TP_VARIANTS)],
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

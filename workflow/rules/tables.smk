rule weight_spectra:
    input:
        f"{RES}/assets.json",
    output:
        f"{RES}/figures/figure1.json",
    benchmark:
        f"{RES}/benchmarks/weight_spectra/figure1.tsv"
    log:
        f"{RES}/logs/figures/figure1.log",
    params:
        spec=declared(config["models"][FIG_MODEL]),
        run=run_context(FIG_MODEL),
        settings=SETTINGS.figures,
    conda:
        "../envs/caldera.yaml"
    script:
        "../scripts/weight_spectra.py"


# Figure 3: its curves split into jobs by figures.trace_jobs (caldera.experiments.jobs.figures.figure3_jobs: one job in
# the mini runs; one decomposition trace per job at paper scale), then merged in the figure's order.
rule ablation_traces:
    input:
        hessians=f"{RES}/hessians/{FIG_MODEL}",
    output:
        f"{RES}/figures/figure3/{{trace}}.json",
    benchmark:
        f"{RES}/benchmarks/ablation_traces/figure3_{{trace}}.tsv"
    log:
        f"{RES}/logs/figures/figure3_{{trace}}.log",
    params:
        spec=declared(SETTINGS.figures.as_block(), config["stand_ins"], config["rank_multiple"],
                      config["models"][FIG_MODEL]),
        settings=SETTINGS.figures,
        run=run_context(FIG_MODEL),
    resources:
        gpu=0,  # none locally; the SLURM profile requests one (decompositions on config `device`)
    conda:
        "../envs/caldera.yaml"
    script:
        "../scripts/ablation_traces.py"


rule figure3_data:
    input:
        get_figure3_parts,
    output:
        f"{RES}/figures/figure3.json",
    benchmark:
        f"{RES}/benchmarks/figure3_data/figure3.tsv"
    log:
        f"{RES}/logs/figures/figure3.log",
    params:
        spec=declared(SETTINGS.figures.as_block()),
        settings=SETTINGS.figures,
    conda:
        "../envs/caldera.yaml"
    script:
        "../scripts/figure3_data.py"


rule lplr_traces:
    input:
        hessians=f"{RES}/hessians/{FIG_MODEL}",
    output:
        f"{RES}/figures/figure4.json",
    benchmark:
        f"{RES}/benchmarks/lplr_traces/figure4.tsv"
    log:
        f"{RES}/logs/figures/figure4.log",
    params:
        spec=declared(SETTINGS.figures.as_block(), config["stand_ins"], config["rank_multiple"],
                      config["models"][FIG_MODEL]),
        settings=SETTINGS.figures,
        run=run_context(FIG_MODEL),
    conda:
        "../envs/caldera.yaml"
    script:
        "../scripts/lplr_traces.py"


rule plot_figure:
    input:
        f"{RES}/figures/figure{{n}}.json",
    output:
        png=report(f"{TABLES_DIR}/figure{{n}}.png", category="Figures"),
        pdf=f"{TABLES_DIR}/figure{{n}}.pdf",
    benchmark:
        f"{RES}/benchmarks/plot_figure/figure{{n}}.tsv"
    log:
        f"{RES}/logs/figures/plot{{n}}.log",
    params:
        run=RUN_CONTEXT,  # the models' labels (titles)
        settings=SETTINGS.figures,  # paper_model (titles)
    conda:
        "../envs/caldera.yaml"
    script:
        "../scripts/plot_figure.py"


# The ranks a per-matrix method chose (extra_methods with a model-level step, e.g. caldera-rank-per-layer): one
# heat map per allocated variant (its seed replicates aside), from the small allocation files only.
rule plot_ranks:
    input:
        get_rank_allocations,
    output:
        png=report(f"{TABLES_DIR}/figure_ranks.png", category="Figures"),
        pdf=f"{TABLES_DIR}/figure_ranks.pdf",
    benchmark:
        f"{RES}/benchmarks/plot_figure/figure_ranks.tsv"
    log:
        f"{RES}/logs/figures/plot_ranks.log",
    params:
        run=RUN_CONTEXT,  # the models' labels (titles)
    conda:
        "../envs/caldera.yaml"
    script:
        "../scripts/plot_ranks.py"


rule make_table:
    input:
        get_table_inputs,
    output:
        md=report(f"{TABLES_DIR}/{{table}}.md", category="Tables"),
        tex=f"{TABLES_DIR}/{{table}}.tex",
        csv=f"{TABLES_DIR}/{{table}}.csv",
        json=f"{TABLES_DIR}/{{table}}.json",
    benchmark:
        f"{RES}/benchmarks/make_table/{{table}}.tsv"
    log:
        f"{RES}/logs/tables/{{table}}.log",
    params:
        spec=declared(effective_config()),
        results=RES,
        plan=get_table_plan,
    conda:
        "../envs/caldera.yaml"
    script:
        "../scripts/make_table.py"


rule pending_table:
    output:
        md=report(f"{TABLES_DIR}/{{ptable}}.md", category="Tables (pending)"),
        tex=f"{TABLES_DIR}/{{ptable}}.tex",
        csv=f"{TABLES_DIR}/{{ptable}}.csv",
    benchmark:
        f"{RES}/benchmarks/pending_table/{{ptable}}.tsv"
    log:
        f"{RES}/logs/tables/{{ptable}}.log",
    params:
        reason=get_pending_reason,
    conda:
        "../envs/caldera.yaml"
    script:
        "../scripts/pending_table.py"


rule theory_report:
    output:
        md=report(f"{TABLES_DIR}/theory.md", category="Theory"),
        json=f"{TABLES_DIR}/theory.json",
    benchmark:
        f"{RES}/benchmarks/theory_report/theory.tsv"
    log:
        f"{RES}/logs/theory.log",
    params:
        spec=declared(config.get("theory")),
        profile=config.get("theory", {}).get("profile", "ci"),
    conda:
        "../envs/caldera.yaml"
    script:
        "../scripts/theory_report.py"


rule claims:
    input:
        fig3=f"{RES}/figures/figure3.json",
        fig4=f"{RES}/figures/figure4.json",
        tables=[f"{TABLES_DIR}/{t}.json" for t in config["tables"]],
        summaries=matrix_claim_inputs(config, RES),  # the matrix-level claim at model scale
        selection=get_selection_json(),
        throughput=get_throughput_targets()[-1],  # Table 6's JSON (throughput.smk)
        lora=[f"{TABLES_DIR}/table5_finetune.json"] if config.get("lora_ft") else [],
    output:
        md=report(f"{TABLES_DIR}/claims.md", category="Claims"),
        json=f"{TABLES_DIR}/claims.json",
        spread_md=report(f"{TABLES_DIR}/spread.md", category="Claims"),
        spread_json=f"{TABLES_DIR}/spread.json",
    benchmark:
        f"{RES}/benchmarks/claims/claims.tsv"
    log:
        f"{RES}/logs/claims.log",
    params:
        matrix_variants=matrix_claim_variants(config),  # the CALDERA and QuIP# variants the matrix-level claim pairs
        run=RUN_CONTEXT,  # the models' labels
    conda:
        "../envs/caldera.yaml"
    script:
        "../scripts/claims.py"


rule timings:
    input:
        get_all_logs_inputs(),
    output:
        json=f"{TABLES_DIR}/timings.json",
        md=report(f"{TABLES_DIR}/timings.md", category="Timings"),
    log:
        f"{RES}/logs/timings.log",
    params:
        benchmarks=f"{RES}/benchmarks",
        run=RUN,
    conda:
        "../envs/caldera.yaml"
    script:
        "../scripts/timings.py"

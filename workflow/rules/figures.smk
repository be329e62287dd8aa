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
        spec=weight_spectra_spec(),
        run=run_context(FIG_MODEL),
        settings=SETTINGS.figures,
    conda:
        "../envs/caldera.yaml"
    script:
        "../scripts/weight_spectra.py"


# Figure 3: its curves split into jobs by figures.trace_jobs (caldera.experiments.planning.figure_plan.figure3_jobs: one job in
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
        spec=traces_spec(),
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
        spec=traces_spec(),
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
        png=report(f"{TABLES_DIR}/figure{{n}}.png", caption="../report/figure.rst", category="Figures"),
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
        png=report(f"{TABLES_DIR}/figure_ranks.png", caption="../report/figure_ranks.rst", category="Figures"),
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

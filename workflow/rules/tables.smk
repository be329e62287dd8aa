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
        step="spectra",
        spec=declared(config["models"][FIG_MODEL]),
    conda:
        "../envs/caldera.yaml"
    script:
        "../scripts/run_step.py"


rule ablation_traces:
    input:
        f"{RES}/hessians/{FIG_MODEL}/hessians.json",
    output:
        f"{RES}/figures/figure3.json",
    benchmark:
        f"{RES}/benchmarks/ablation_traces/figure3.tsv"
    log:
        f"{RES}/logs/figures/figure3.log",
    params:
        step="ablation_traces",
        spec=declared(config["figures"], config["stand_ins"], config["rank_multiple"], config["models"][FIG_MODEL]),
    resources:
        gpu=0,  # decompositions: CPU
    conda:
        "../envs/caldera.yaml"
    script:
        "../scripts/run_step.py"


rule lplr_traces:
    input:
        f"{RES}/hessians/{FIG_MODEL}/hessians.json",
    output:
        f"{RES}/figures/figure4.json",
    benchmark:
        f"{RES}/benchmarks/lplr_traces/figure4.tsv"
    log:
        f"{RES}/logs/figures/figure4.log",
    params:
        step="lplr_traces",
        spec=declared(config["figures"], config["stand_ins"], config["rank_multiple"], config["models"][FIG_MODEL]),
    conda:
        "../envs/caldera.yaml"
    script:
        "../scripts/run_step.py"


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
        step="plot",
    conda:
        "../envs/caldera.yaml"
    script:
        "../scripts/run_step.py"


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
        step="table",
        spec=declared(config),
    conda:
        "../envs/caldera.yaml"
    script:
        "../scripts/run_step.py"


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
        step="pending_table",
    conda:
        "../envs/caldera.yaml"
    script:
        "../scripts/run_step.py"


rule theory_report:
    output:
        md=report(f"{TABLES_DIR}/theory.md", category="Theory"),
        json=f"{TABLES_DIR}/theory.json",
    benchmark:
        f"{RES}/benchmarks/theory_report/theory.tsv"
    log:
        f"{RES}/logs/theory.log",
    params:
        step="theory",
        spec=declared(config.get("theory")),
    conda:
        "../envs/caldera.yaml"
    script:
        "../scripts/run_step.py"


rule claims:
    input:
        fig3=f"{RES}/figures/figure3.json",
        fig4=f"{RES}/figures/figure4.json",
        tables=[f"{TABLES_DIR}/{t}.json" for t in config["tables"]],
    output:
        md=report(f"{TABLES_DIR}/claims.md", category="Claims"),
        json=f"{TABLES_DIR}/claims.json",
    benchmark:
        f"{RES}/benchmarks/claims/claims.tsv"
    log:
        f"{RES}/logs/claims.log",
    params:
        step="claims",
    conda:
        "../envs/caldera.yaml"
    script:
        "../scripts/run_step.py"


rule timings:
    input:
        get_all_logs_inputs(),
    output:
        json=f"{RES}/timings.json",
        md=report(f"{TABLES_DIR}/timings.md", category="Timings"),
    log:
        f"{RES}/logs/timings.log",
    params:
        step="timings",
    conda:
        "../envs/caldera.yaml"
    script:
        "../scripts/run_step.py"

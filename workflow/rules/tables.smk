rule make_table:
    input:
        get_table_inputs,
    output:
        md=report(f"{TABLES_DIR}/{{table}}.md", caption="../report/table.rst", category="Tables"),
        tex=f"{TABLES_DIR}/{{table}}.tex",
        csv=f"{TABLES_DIR}/{{table}}.csv",
        json=f"{TABLES_DIR}/{{table}}.json",
    benchmark:
        f"{RES}/benchmarks/make_table/{{table}}.tsv"
    log:
        f"{RES}/logs/tables/{{table}}.log",
    params:
        spec=declared(effective_config()),
        results=get_results_dir,
        plan=get_table_plan,
    conda:
        "../envs/caldera.yaml"
    script:
        "../scripts/make_table.py"


rule pending_table:
    output:
        md=report(f"{TABLES_DIR}/{{ptable}}.md", caption="../report/pending_table.rst", category="Tables (pending)"),
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
        md=report(f"{TABLES_DIR}/theory.md", caption="../report/theory.rst", category="Theory"),
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
        regime=[f"{TABLES_DIR}/{t}.json" for t in REGIME_TABLES],  # the regime column (config regime.run)
    output:
        md=report(f"{TABLES_DIR}/claims.md", caption="../report/claims.rst", category="Claims"),
        json=f"{TABLES_DIR}/claims.json",
        spread_md=report(f"{TABLES_DIR}/spread.md", caption="../report/spread.rst", category="Claims"),
        spread_json=f"{TABLES_DIR}/spread.json",
    benchmark:
        f"{RES}/benchmarks/claims/claims.tsv"
    log:
        f"{RES}/logs/claims.log",
    params:
        matrix_variants=matrix_claim_variants(config),  # the CALDERA and QuIP# variants the matrix-level claim pairs
        run=RUN_CONTEXT,  # the models' labels
        declared=DECLARED_CLAIMS,  # the config's own claims (`claims:`)
        same_regime=SAME_REGIME_TABLES,  # tables whose stand-ins' regime is 2 bits: their own regime tables
    conda:
        "../envs/caldera.yaml"
    script:
        "../scripts/claims.py"


rule timings:
    input:
        get_all_logs_inputs(),
    output:
        json=f"{TABLES_DIR}/timings.json",
        md=report(f"{TABLES_DIR}/timings.md", caption="../report/timings.rst", category="Timings"),
    log:
        f"{RES}/logs/timings.log",
    params:
        benchmarks=f"{RES}/benchmarks",
        run=RUN,
        record=RECORD_DIR,  # the jobs of earlier sittings (workflow/rules/record.smk)
    conda:
        "../envs/caldera.yaml"
    script:
        "../scripts/timings.py"


# The verdicts at one screen and the forest plot of the claims' intervals (caldera.experiments.report.verdict_page):
# claims.json only.
rule verdict_page:
    input:
        f"{TABLES_DIR}/claims.json",
    output:
        md=report(f"{TABLES_DIR}/verdicts.md", caption="../report/verdicts.rst", category="Claims"),
        png=report(f"{TABLES_DIR}/verdicts_forest.png", caption="../report/verdicts_forest.rst", category="Claims"),
        pdf=f"{TABLES_DIR}/verdicts_forest.pdf",
    benchmark:
        f"{RES}/benchmarks/verdict_page/verdicts.tsv"
    log:
        f"{RES}/logs/verdict_page.log",
    params:
        run=RUN_CONTEXT,  # the models' keys (the prefixes of the variant ids) and labels
    conda:
        "../envs/caldera.yaml"
    script:
        "../scripts/verdict_page.py"


# Perplexity against bits per weight, every method of the run on each stand-in (caldera.experiments.report.pareto):
# the table JSONs only.
rule pareto:
    input:
        [f"{TABLES_DIR}/{t}.json" for t in config["tables"]],
    output:
        png=report(f"{TABLES_DIR}/figure_pareto.png", caption="../report/figure_pareto.rst", category="Figures"),
        pdf=f"{TABLES_DIR}/figure_pareto.pdf",
    benchmark:
        f"{RES}/benchmarks/pareto/figure_pareto.tsv"
    log:
        f"{RES}/logs/figures/plot_pareto.log",
    params:
        corpus=config["eval"]["ppl"]["wiki"]["source"] if "wiki" in config["eval"]["ppl"] else None,
    conda:
        "../envs/caldera.yaml"
    script:
        "../scripts/plot_pareto.py"

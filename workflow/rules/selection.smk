# The CALDERA rows' configuration, selected on the calibration Hessians (caldera.experiments.jobs.selection):
# reads the dense weights and Hessians only, never an evaluation result.
rule selection:
    input:
        hessians=[f"{RES}/hessians/{m}" for m in SELECTION_MODELS],
    output:
        json=f"{RES}/selection/selection.json",
        md=report(f"{TABLES_DIR}/selection.md", caption="../report/selection.rst", category="Selection"),
    benchmark:
        f"{RES}/benchmarks/selection/selection.tsv"
    log:
        f"{RES}/logs/selection.log",
    params:
        spec=selection_spec(),
        settings=SELECTION,
        plan=SelectionPlan.from_config(config) if SELECTION else None,
    resources:
        gpu=0,  # decompositions: CPU
    conda:
        "../envs/caldera.yaml"
    script:
        "../scripts/selection.py"

rule assets:
    output:
        f"{RES}/assets.json",
    benchmark:
        f"{RES}/benchmarks/assets/assets.tsv"
    log:
        f"{RES}/logs/assets.log",
    params:
        step="assets",
        spec=declared({m: spec["source"] for m, spec in config["models"].items()}),
    conda:
        "../envs/caldera.yaml"
    script:
        "../scripts/run_step.py"


rule hessians:
    input:
        f"{RES}/assets.json",
    output:
        f"{RES}/hessians/{{model}}/hessians.json",
    benchmark:
        f"{RES}/benchmarks/hessians/{{model}}.tsv"
    log:
        f"{RES}/logs/hessians/{{model}}.log",
    params:
        step="hessians",
        spec=lambda w: declared(config["models"][w.model], config["calibration"], config.get("layers")),
    resources:
        gpu=1,
    conda:
        "../envs/caldera.yaml"
    script:
        "../scripts/run_step.py"

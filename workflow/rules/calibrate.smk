rule assets:
    output:
        f"{RES}/assets.json",
    benchmark:
        f"{RES}/benchmarks/assets/assets.tsv"
    log:
        f"{RES}/logs/assets.log",
    params:
        spec=declared({m: spec["source"] for m, spec in config["models"].items()}),
        run=RUN_CONTEXT,
        settings=SETTINGS.eval,
    conda:
        "../envs/caldera.yaml"
    script:
        "../scripts/assets.py"


# The per-layer Hessians (layer_NNN.safetensors) and their summary (hessians.json), one folder per model.
rule hessians:
    input:
        f"{RES}/assets.json",
    output:
        directory(f"{RES}/hessians/{{model}}"),
    benchmark:
        f"{RES}/benchmarks/hessians/{{model}}.tsv"
    log:
        f"{RES}/logs/hessians/{{model}}.log",
    params:
        spec=hessians_spec,
        run=get_model_run,
    resources:
        gpu=1,
    conda:
        "../envs/caldera.yaml"
    script:
        "../scripts/hessians.py"

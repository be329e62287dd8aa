rule eval_ppl:
    # every perplexity corpus of one variant in one job: the model is loaded once
    input:
        get_eval_input,
    output:
        [f"{RES}/eval/{{variant}}/ppl_{c}.json" for c in config["eval"]["ppl"]],
    benchmark:
        f"{RES}/benchmarks/eval_ppl/{{variant}}.tsv"
    log:
        f"{RES}/logs/eval/{{variant}}/ppl.log",
    params:
        step="eval_ppl",
        spec=lambda w: declared(variant_spec(w), config["eval"]["ppl"], eval_weights()),
    resources:
        gpu=1,
    conda:
        "../envs/caldera.yaml"
    script:
        "../scripts/run_step.py"


rule eval_zeroshot:
    input:
        get_eval_input,
    output:
        f"{RES}/eval/{{variant}}/zeroshot.json",
    benchmark:
        f"{RES}/benchmarks/eval_zeroshot/{{variant}}.tsv"
    log:
        f"{RES}/logs/eval/{{variant}}/zeroshot.log",
    params:
        step="eval_zeroshot",
        spec=lambda w: declared(variant_spec(w), config["eval"]["zeroshot"], eval_weights()),
    resources:
        gpu=1,
    conda:
        "../envs/caldera.yaml"
    script:
        "../scripts/run_step.py"

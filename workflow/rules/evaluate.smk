rule eval_ppl:
    input:
        get_eval_input,
    output:
        f"{RES}/eval/{{variant}}/ppl_{{corpus}}.json",
    benchmark:
        f"{RES}/benchmarks/eval_ppl/{{variant}}_{{corpus}}.tsv"
    log:
        f"{RES}/logs/eval/{{variant}}/ppl_{{corpus}}.log",
    params:
        step="eval_ppl",
        spec=lambda w: declared(variant_spec(w), config["eval"]["ppl"][w.corpus]),
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
        spec=lambda w: declared(variant_spec(w), config["eval"]["zeroshot"]),
    resources:
        gpu=1,
    conda:
        "../envs/caldera.yaml"
    script:
        "../scripts/run_step.py"

rule evaluate:
    # every evaluation of one variant in one job (perplexity on each corpus, then zero-shot): the model is
    # loaded once
    input:
        get_eval_input,
    output:
        ppl=[f"{RES}/eval/{{variant}}/ppl_{c}.json" for c in config["eval"]["ppl"]],
        zeroshot=f"{RES}/eval/{{variant}}/zeroshot.json",
    benchmark:
        f"{RES}/benchmarks/evaluate/{{variant}}.tsv"
    log:
        f"{RES}/logs/eval/{{variant}}.log",
    params:
        step="evaluate",
        spec=lambda w: declared(variant_spec(w), config["eval"]),
    resources:
        gpu=1,
    conda:
        "../envs/caldera.yaml"
    script:
        "../scripts/run_step.py"

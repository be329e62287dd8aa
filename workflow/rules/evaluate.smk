rule evaluate:
    # every evaluation of one variant in one job (perplexity on each corpus, then zero-shot): the model is
    # loaded once
    input:
        unpack(get_eval_input),
    output:
        ppl=[f"{RES}/eval/{{variant}}/ppl_{c}.json" for c in SETTINGS.eval.ppl],
        zeroshot=f"{RES}/eval/{{variant}}/zeroshot.json",
    benchmark:
        f"{RES}/benchmarks/evaluate/{{variant}}.tsv"
    log:
        f"{RES}/logs/eval/{{variant}}.log",
    params:
        spec=eval_spec,
        variant=get_variant,
        settings=SETTINGS.eval,
        run=get_variant_run,
        replicate_zeroshot=replicate_zeroshot,
    resources:
        gpu=1,
    conda:
        "../envs/caldera.yaml"
    script:
        "../scripts/evaluate.py"

rule dense_reference:
    # the dense model's next-token distributions on eval.distribution's windows, read by every compressed
    # variant's evaluation for its paired metrics (KL, delta ln p, top-1: caldera.eval.distribution)
    input:
        f"{RES}/assets.json",
    output:
        directory(f"{RES}/reference/{{model}}"),
    benchmark:
        f"{RES}/benchmarks/dense_reference/{{model}}.tsv"
    log:
        f"{RES}/logs/reference/{{model}}.log",
    params:
        spec=reference_spec,
        settings=SETTINGS.eval,
        run=get_model_run,
    resources:
        gpu=1,
    conda:
        "../envs/caldera.yaml"
    script:
        "../scripts/dense_reference.py"


rule evaluate:
    # every evaluation of one variant in one job (perplexity on each corpus, then zero-shot): the model is
    # loaded once
    input:
        unpack(get_eval_input),
    output:
        ppl=[f"{RES}/eval/{{variant}}/ppl_{c}.json" for c in SETTINGS.eval.ppl],
        zeroshot=f"{RES}/eval/{{variant}}/zeroshot.json",
    wildcard_constraints:
        variant=id_pattern(set(VARIANTS) - set(REPLICATE_JOBS)),  # rule replicate evaluates those
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
        replicate_corpora=replicate_corpora,
        zeroshot_limit=zeroshot_limit,  # a regime row's zero-shot documents (regime.run.zeroshot)
    resources:
        gpu=1,
    conda:
        "../envs/caldera.yaml"
    script:
        "../scripts/evaluate.py"

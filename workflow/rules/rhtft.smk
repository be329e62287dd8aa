# RHT fine-tuning (paper §5.2, Tables 3-4): the signs of a variant's checkpoint trained against its dense model.
# The fine-tuned checkpoint is evaluated by rule `evaluate` under the id <variant>+rhtft (common.smk FT_VARIANTS).
# state.safetensors (not an output: Snakemake keeps it when a job fails) lets a killed job resume after its last
# finished epoch; the job removes it once its summary is written.
rule rht_finetune:
    input:
        checkpoint=f"{RES}/compressed/{{variant}}/checkpoint",
        assets=f"{RES}/assets.json",
    output:
        checkpoint=directory(f"{RES}/rhtft/{{variant}}/checkpoint"),
        summary=f"{RES}/rhtft/{{variant}}/rhtft.json",
    benchmark:
        f"{RES}/benchmarks/rht_finetune/{{variant}}.tsv"
    log:
        f"{RES}/logs/rhtft/{{variant}}.log",
    params:
        spec=rhtft_spec,
        variant=get_variant,
        settings=SETTINGS.rht_ft,
        run=get_variant_run,
        source=config["calibration"]["source"],
        state=get_rhtft_state,
    resources:
        gpu=1,
    conda:
        "../envs/caldera.yaml"
    script:
        "../scripts/rht_finetune.py"

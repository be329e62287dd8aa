# One job per (variant, chunk of `layers_per_job` decoder layers): with layers_per_job = 1 (paper scale) the
# compression fans out across GPUs or cluster nodes one layer per job.
rule compress_layers:
    input:
        get_hessian_summary,
    output:
        f"{RES}/compressed/{{variant}}/layers/chunk_{{chunk}}.json",
    benchmark:
        f"{RES}/benchmarks/compress_layers/{{variant}}_{{chunk}}.tsv"
    log:
        f"{RES}/logs/compress/{{variant}}/chunk_{{chunk}}.log",
    params:
        step="compress_layers",
        spec=compress_spec,
    resources:
        gpu=0,  # caldera_decompose runs on the CPU (its E8P search is a CPU kernel)
    conda:
        "../envs/caldera.yaml"
    script:
        "../scripts/run_step.py"


rule assemble_checkpoint:
    input:
        get_chunk_jsons,
    output:
        summary=f"{RES}/compressed/{{variant}}/summary.json",
    benchmark:
        f"{RES}/benchmarks/assemble_checkpoint/{{variant}}.tsv"
    log:
        f"{RES}/logs/compress/{{variant}}/assemble.log",
    params:
        step="assemble",
        spec=variant_spec,
    conda:
        "../envs/caldera.yaml"
    script:
        "../scripts/run_step.py"

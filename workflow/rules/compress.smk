# One job per (variant, chunk of `layers_per_job` decoder layers): with layers_per_job = 1 (paper scale) the
# compression fans out across GPUs or cluster nodes one layer per job. Each job's folder holds its layers'
# files (layer_NNN.safetensors + layer_NNN.json) and chunk.json. A variant whose layers fit one chunk is
# compressed and assembled by one job (rule compress_variant), in the same folders; a seed replicate of such a
# variant is compressed, assembled and evaluated by one job (rule replicate).
rule compress_variant:
    # a variant of one chunk: its per-layer files (kept in chunks/000 across a failed or killed job, so a rerun
    # resumes from them) and its checkpoint, in one job
    input:
        hessians=get_hessian_dir,
        allocation=get_allocation,
    output:
        checkpoint=directory(f"{RES}/compressed/{{variant}}/checkpoint"),
        summary=f"{RES}/compressed/{{variant}}/summary.json",
    wildcard_constraints:
        variant=id_pattern(set(ONE_CHUNK) - set(REPLICATE_JOBS)),
    benchmark:
        f"{RES}/benchmarks/compress_variant/{{variant}}.tsv"
    log:
        f"{RES}/logs/compress/{{variant}}/compress.log",
    params:
        spec=variant_spec,
        variant=get_variant,
        run=get_variant_run,
        layers=get_variant_layer_dir,
    resources:
        gpu=0,  # as compress_layers
    conda:
        "../envs/caldera.yaml"
    script:
        "../scripts/compress_variant.py"


rule replicate:
    # a seed replicate of a variant of one chunk: what compress_variant and evaluate do for it, in one process (the
    # checkpoint is written, then read back and evaluated as stored); its per-layer files stay in chunks/000
    input:
        unpack(get_replicate_input),
    output:
        checkpoint=directory(f"{RES}/compressed/{{variant}}/checkpoint"),
        summary=f"{RES}/compressed/{{variant}}/summary.json",
        ppl=[f"{RES}/eval/{{variant}}/ppl_{c}.json" for c in SETTINGS.eval.ppl],
        zeroshot=f"{RES}/eval/{{variant}}/zeroshot.json",
    wildcard_constraints:
        variant=id_pattern(REPLICATE_JOBS),
    benchmark:
        f"{RES}/benchmarks/replicate/{{variant}}.tsv"
    log:
        f"{RES}/logs/replicate/{{variant}}.log",
    params:
        spec=replicate_spec,
        variant=get_variant,
        settings=SETTINGS.eval,
        run=get_variant_run,
        layers=get_variant_layer_dir,
        replicate_zeroshot=replicate_zeroshot,
        replicate_corpora=replicate_corpora,
        zeroshot_limit=zeroshot_limit,  # a regime row's zero-shot documents (regime.run.zeroshot)
    resources:
        gpu=1,  # as evaluate (the compression runs on config `device` too)
    conda:
        "../envs/caldera.yaml"
    script:
        "../scripts/replicate.py"


rule compress_layers:
    input:
        hessians=get_hessian_dir,
        allocation=get_allocation,  # a method that chooses settings per matrix (rule allocate); else none
    output:
        layers=directory(f"{RES}/compressed/{{variant}}/chunks/{{chunk}}"),
    wildcard_constraints:
        variant=id_pattern(set(COMPRESSED) - set(ONE_CHUNK)),
    benchmark:
        f"{RES}/benchmarks/compress_layers/{{variant}}_{{chunk}}.tsv"
    log:
        f"{RES}/logs/compress/{{variant}}/chunk_{{chunk}}.log",
    params:
        spec=compress_spec,
        variant=get_variant,
        run=get_variant_run,
    resources:
        gpu=0,  # none locally; the SLURM profile requests one (the decomposition runs on config `device`)
    conda:
        "../envs/caldera.yaml"
    script:
        "../scripts/compress_layers.py"


rule assemble_checkpoint:
    input:
        chunks=get_chunk_dirs,
        hessians=get_hessian_dir,  # the calibration the checkpoint's provenance records
    output:
        checkpoint=directory(f"{RES}/compressed/{{variant}}/checkpoint"),
        summary=f"{RES}/compressed/{{variant}}/summary.json",
    wildcard_constraints:
        variant=id_pattern(set(COMPRESSED) - set(ONE_CHUNK)),
    benchmark:
        f"{RES}/benchmarks/assemble_checkpoint/{{variant}}.tsv"
    log:
        f"{RES}/logs/compress/{{variant}}/assemble.log",
    params:
        spec=variant_spec,
        variant=get_variant,
        run=get_variant_run,
    conda:
        "../envs/caldera.yaml"
    script:
        "../scripts/assemble_checkpoint.py"


# A method that chooses settings per matrix from the whole model (caldera.methods.registry.ModelPlan, e.g.
# caldera-rank-per-layer): its profiles per chunk of layers (where the compression runs), then one allocation per
# variant, which every compress_layers job of the variant reads. Both read calibration data only.
rule profile_layers:
    input:
        hessians=get_hessian_dir,
    output:
        f"{RES}/compressed/{{variant}}/profiles/{{chunk}}.json",
    benchmark:
        f"{RES}/benchmarks/profile_layers/{{variant}}_{{chunk}}.tsv"
    log:
        f"{RES}/logs/compress/{{variant}}/profile_{{chunk}}.log",
    params:
        spec=compress_spec,
        variant=get_variant,
        run=get_variant_run,
    resources:
        gpu=0,  # as compress_layers
    conda:
        "../envs/caldera.yaml"
    script:
        "../scripts/profile_layers.py"


rule allocate:
    input:
        profiles=get_profile_chunks,
    output:
        f"{RES}/compressed/{{variant}}/allocation.json",
    benchmark:
        f"{RES}/benchmarks/allocate/{{variant}}.tsv"
    log:
        f"{RES}/logs/compress/{{variant}}/allocate.log",
    params:
        spec=variant_spec,
        variant=get_variant,
    conda:
        "../envs/caldera.yaml"
    script:
        "../scripts/allocate.py"

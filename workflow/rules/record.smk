# The run's record (config `record`: a folder, committed for runs longer than a sitting). Rule `record` keeps the
# small outputs of every finished job there; a later run in a fresh folder adopts the jobs whose configuration is
# unchanged (rule restore_record copies their files in) and rebuilds only the large files that the jobs it still
# has to run read (caldera.experiments.planning.record, caldera.experiments.jobs.record).
from caldera.experiments.jobs.record import restore_file, step_record
from caldera.experiments.planning.record import adopted_files

try:
    ADOPTED = adopted_files(record_candidates(), RECORD_DIR) if RECORD_DIR else {}
except ValueError as e:
    raise WorkflowError(f"config record: {e}") from None
if ADOPTED:
    print(f"CALDERA workflow {RUN}: {len(set(ADOPTED.values()))} finished jobs adopted from the record "
          f"{RECORD_DIR}", file=sys.stderr)
if RECORD_DIR and str(config.get("device", "auto")) != "cuda":
    _plan = plan_line(config, workflow.cores, done=set(ADOPTED.values()))
    if _plan:
        print(f"CALDERA workflow {RUN}: {_plan}", file=sys.stderr)


rule restore_record:
    # one adopted file (its job's benchmark and timing files come with it)
    input:
        f"{RECORD_DIR}/files/{{recorded}}",
    output:
        "{recorded}",
    wildcard_constraints:
        recorded=id_pattern(ADOPTED),
    log:
        f"{RES}/logs/record/{{recorded}}.log",
    params:
        record=RECORD_DIR,
    run:
        restore_file(params.record, wildcards.recorded)


ruleorder: restore_record > evaluate
ruleorder: restore_record > replicate
ruleorder: restore_record > compress_variant
ruleorder: restore_record > assemble_checkpoint
ruleorder: restore_record > allocate
ruleorder: restore_record > rht_finetune
ruleorder: restore_record > lora_finetune
ruleorder: restore_record > throughput
ruleorder: restore_record > weight_spectra
ruleorder: restore_record > ablation_traces
ruleorder: restore_record > lplr_traces
ruleorder: restore_record > selection


rule record:
    # `snakemake --cores 1 --configfile C -- record`: add every finished job of this run to the record (run it at the end of a
    # sitting, with the code and config that ran the jobs)
    log:
        f"{RES}/logs/record.log",
    params:
        record=RECORD_DIR,
        jobs=get_record_candidates,  # a function: built only when the rule runs, not at every parse
        benchmarks=f"{RES}/benchmarks",
    run:
        step_record(params.jobs, params.record, log[0], params.benchmarks)

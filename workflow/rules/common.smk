import dataclasses
import json
import re
import sys
from pathlib import Path
from types import SimpleNamespace

from snakemake.exceptions import WorkflowError
from snakemake.utils import validate

from caldera.atomic import write_atomic
from caldera.experiments.planning.config_guard import check_config_files, device_errors, schema_errors
from caldera.experiments.jobs.figures import figure3_jobs
from caldera.experiments.report.table5 import Table5Plan, lora_inputs
from caldera.experiments.planning.plan import (
    check_config,
    effective_settings,
    has_model_plan,
    pending_tables,
    replicate_variants,
    rhtft_variants,
)
from caldera.experiments.planning.selection_plan import (
    SelectionPlan,
    matrix_claim_inputs,
    matrix_claim_variants,
    selection_models,
)
from caldera.experiments.planning.job_report import plan_line
from caldera.experiments.planning.regime_rows import regime_tables, regime_zeroshot_limit, same_regime_tables
from caldera.experiments.planning.settings import BLOCKS, RunContext, block_settings, declared_claims
from caldera.experiments.jobs.compress import layer_chunks
from caldera.experiments.report.tables import TablePlan
from caldera.experiments.planning.throughput_rows import (
    TABLE as THROUGHPUT_TABLE,
    moved_settings,
    throughput_models,
    throughput_variants,
)
from caldera.experiments.report.table6 import ThroughputTablePlan

CONFIG_FILES = list(workflow.overwrite_configfiles) or ["config/mini.yaml"]
try:
    check_config_files(CONFIG_FILES)  # re-read strictly: Snakemake's loader lets a repeated key's last value win
except ValueError as e:
    raise WorkflowError(f"config: {e}") from None
# machine settings that moved to the profiles: said before the schema's bare "unknown key"
_moved = moved_settings(config)
if _moved:
    raise WorkflowError("\n".join(_moved) + f"\n(config {', '.join(map(str, CONFIG_FILES))}: remove the key; "
                        "workflow/rules/throughput.smk and config/README.md describe the profile settings and the "
                        "throughput block)")
# schema violations one a line, each starting with the key's path (jsonschema's own error dumps the whole schema
# and config: hundreds of lines for one typo); an unknown key names the closest allowed one
_errors = schema_errors(config, Path(workflow.basedir) / "workflow/schemas/config.schema.yaml")
if _errors:
    raise WorkflowError("\n".join(_errors) + f"\n(config {', '.join(map(str, CONFIG_FILES))}: "
                        "workflow/schemas/config.schema.yaml and config/README.md list the keys)")
validate(config, "../schemas/config.schema.yaml")  # fills the top-level defaults (the typed blocks': SETTINGS)


def _cuda_devices():
    import torch  # only when the config asks for CUDA

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


_errors = device_errors(config, local=workflow.local_exec, cuda_devices=_cuda_devices)
if _errors:
    raise WorkflowError("\n".join(_errors) + f"\n(config {', '.join(map(str, CONFIG_FILES))})")
try:
    VARIANTS = check_config(config)  # every method config built through the registry: fails here, not in a job
except ValueError as e:
    raise WorkflowError(f"{e}\n(config {', '.join(map(str, CONFIG_FILES))})") from None
# the typed settings of the blocks calibration, selection, rht_ft, lora_ft, throughput, eval, figures (check_config
# built them once already: a bad block has failed above); each job gets its block's object as its `settings` param
SETTINGS = block_settings(config)
# the run-level settings (name, device, dtype, models, stand-ins, layers, calibration): jobs get it, or the part of
# it for the model they load (run_context), as their `run` param; never the whole config
RUN_CONTEXT = RunContext.from_config(config)
# the claims the config declares (`claims:`), stated in claims.md after the paper's
DECLARED_CLAIMS = declared_claims(config)

RUN = config["name"]
RES = f"results/{RUN}"
TABLES_DIR = config["tables_dir"]
RECORD_DIR = config.get("record")  # the run's record (workflow/rules/record.smk)
# the effective settings (every default filled in) of the configured variants: written to a file below
_settings_text = json.dumps(effective_settings(config, VARIANTS), indent=1, sort_keys=True, default=str) + "\n"
# seed replicates (config `replicates`): the same variants compressed again with other seeds, evaluated like any
REPLICATES = replicate_variants(config, VARIANTS)
VARIANTS.update({r.id: r for reps in REPLICATES.values() for r in reps[1:]})
COMPRESSED = sorted(v for v, spec in VARIANTS.items() if spec.method != "dense")
# a variant whose layers are one chunk is compressed and assembled in one job (rule compress_variant); the others
# get a compress_layers job per chunk and an assemble_checkpoint job (workflow/rules/compress.smk)
ONE_CHUNK = [v for v in COMPRESSED if len(layer_chunks(RUN_CONTEXT, VARIANTS[v].model)) == 1]
# a seed replicate of one chunk is compressed and evaluated in one job (rule replicate, compress.smk)
REPLICATE_JOBS = [v for v in ONE_CHUNK if VARIANTS[v].replicate_of is not None]


def id_pattern(ids):
    """A wildcard constraint matching exactly these ids (none: a pattern that matches nothing)."""
    return "|".join(re.escape(i) for i in sorted(ids)) or "(?!)"


# RHT-FT models (Tables 3-4): made by rule rht_finetune from their base variant, then evaluated like any variant
FT_VARIANTS = rhtft_variants(config)
VARIANTS.update({k: ft for k, (ft, _) in FT_VARIANTS.items()})
PENDING = pending_tables(config)
# rows compressed again at each stand-in's regime bits (config regime.run): their tables, and the run's own tables
# whose stand-ins' regime is 2 bits; the claims are decided again on both (the regime column of claims.md)
REGIME_TABLES = regime_tables(config)
SAME_REGIME_TABLES = same_regime_tables(config)
# the log opens with what the run does; the effective settings (every default filled in) go to a file
SETTINGS_FILE = Path(RES) / "settings.json"
if not SETTINGS_FILE.is_file() or SETTINGS_FILE.read_text() != _settings_text:
    write_atomic(SETTINGS_FILE, _settings_text)
print(f"CALDERA workflow {RUN} (config {', '.join(map(str, CONFIG_FILES))}): {len(config['models'])} models, "
      f"{len(COMPRESSED)} compressed variants ({sum(len(r) - 1 for r in REPLICATES.values())} of them seed "
      f"replicates), {len(FT_VARIANTS)} RHT-fine-tuned; tables in {TABLES_DIR}/; effective settings in "
      f"{SETTINGS_FILE}", file=sys.stderr)
if str(config.get("device", "auto")) != "cuda" and not RECORD_DIR:  # with a record: after adoption (record.smk)
    _plan = plan_line(config, workflow.cores)
    if _plan:
        print(f"CALDERA workflow {RUN}: {_plan}", file=sys.stderr)
FIG_MODEL = SETTINGS.figures.model
SELECTION = SETTINGS.selection
# stand-ins swept by the selection rule, plus the figures' model for the Figure 3 comparisons it re-runs
SELECTION_MODELS = (
    sorted(set(selection_models(config)) | ({FIG_MODEL} if SELECTION.ablations else set()))
    if SELECTION
    else []
)


wildcard_constraints:
    chunk=r"\d{3}",
    variant=r"[^/]+",
    table="|".join([*config["tables"], *REGIME_TABLES]),  # so claims.md / theory.md never match make_table
    n="1|3|4",
    ptable="|".join(PENDING) or "(?!)",  # no pending table: match nothing (an empty pattern would match all)


def declared(*parts):
    """A rule's declared configuration, as its `spec` param: Snakemake reruns a finished job when this
    string changes (rerun trigger "params"), so editing a config redoes exactly the jobs that read the edit."""
    return json.dumps(parts, sort_keys=True, default=str)


#: config blocks no table reads (the regime measurement, caldera.experiments.jobs.regime, is not a rule): left out
#: of what rule make_table declares, so editing them reruns no table
NOT_TABLE_BLOCKS = ("regime",)


def effective_config():
    """The config with each typed block it has replaced by its settings' effective block (defaults filled in),
    without :data:`NOT_TABLE_BLOCKS`: what rule make_table declares."""
    out = {**config, **{k: getattr(SETTINGS, k).as_block() for k in BLOCKS if config.get(k)}}
    return {k: v for k, v in out.items() if k not in NOT_TABLE_BLOCKS}


def get_results_dir(wildcards):
    """The run's results folder (results/<name>), as the `results` param of the table rules: a function, since the
    tables folder may lie inside it (results/mini/tables) and a plain string that prefixes an output is a lint."""
    return RES


def get_variant(wildcards):
    """The variant (a VariantSpec) named by the `variant` wildcard: the `variant` param of the rules that
    compress, assemble, evaluate or fine-tune it."""
    return VARIANTS[wildcards.variant]


def run_context(model):
    """The top-level settings a job that loads ``model`` needs (caldera.experiments.planning.settings.RunContext: the
    run's name, device, dtype and that model's entry): its `run` param, beside its block's `settings`."""
    return RunContext.from_config(config, [model])


def get_model_run(wildcards):
    """The `run` param of a job on the model named by the `model` wildcard (run_context of that model)."""
    return run_context(wildcards.model)


def get_variant_run(wildcards):
    """The `run` param of a job on the variant named by the `variant` wildcard (run_context of its model)."""
    return run_context(VARIANTS[wildcards.variant].model)


def hessians_spec(wildcards):
    """Rule hessians' declared configuration: the model's config entry, the calibration settings, the layers."""
    return declared(config["models"][wildcards.model], SETTINGS.calibration.as_block(), config.get("layers"))


def variant_spec(wildcards):
    v = VARIANTS[wildcards.variant]
    return declared(dataclasses.asdict(v), config["models"][v.model]["source"], config.get("layers"))


def eval_spec(wildcards):
    v = VARIANTS[wildcards.variant]
    rep = (replicate_zeroshot(wildcards), replicate_corpora(wildcards)) if v.replicate_of else None
    limit = zeroshot_limit(wildcards)  # a regime row's own zero-shot documents: declared only where set
    return declared(variant_spec(wildcards), SETTINGS.eval.as_block(), rep, *([limit] if limit else []))


def replicate_zeroshot(wildcards):
    """Rule evaluate's `replicate_zeroshot` param: whether a seed replicate is scored on zero-shot too (config
    `replicates.zeroshot`, or for a regime row's replicate `regime.run.zeroshot.replicates`)."""
    return bool((config.get("replicates") or {}).get("zeroshot", False)) or zeroshot_limit(wildcards) is not None


def zeroshot_limit(wildcards):
    """Rules evaluate's and replicate's `zeroshot_limit` param: a regime row's zero-shot documents per task
    (config `regime.run.zeroshot`), None for every other variant (`eval.zeroshot.limit`)."""
    return regime_zeroshot_limit(config, VARIANTS[wildcards.variant])


def replicate_corpora(wildcards):
    """Rule evaluate's `replicate_corpora` param: the perplexity corpora a seed replicate is scored on (config
    `replicates.corpora`; None: every corpus)."""
    corpora = (config.get("replicates") or {}).get("corpora")
    return None if corpora is None else list(corpora)


def replicate_spec(wildcards):
    """Rule replicate's declared configuration: its compression's and its evaluation's."""
    return declared(variant_spec(wildcards), eval_spec(wildcards))


def get_replicate_input(wildcards):
    """Rule replicate's inputs: its compression's (the Hessians, an allocation) and its evaluation's (the dense
    reference)."""
    out = {"hessians": get_hessian_dir(wildcards), "allocation": get_allocation(wildcards)}
    out.update({k: v for k, v in get_eval_input(wildcards).items() if k != "checkpoint"})
    return out


def compress_spec(wildcards):
    v = VARIANTS[wildcards.variant]
    return declared(variant_spec(wildcards), layer_chunks(RUN_CONTEXT, v.model)[int(wildcards.chunk)])


def get_variant_layer_dir(wildcards):
    """Rule compress_variant's `layers` param: the per-layer folder of a variant of one chunk (its chunk 000, where
    compress_layers would write it)."""
    return f"{RES}/compressed/{wildcards.variant}/chunks/000"


def get_chunk_dirs(wildcards):
    v = VARIANTS[wildcards.variant]
    n = len(layer_chunks(RUN_CONTEXT, v.model))
    return [f"{RES}/compressed/{v.id}/chunks/{c:03d}" for c in range(n)]


def get_allocation(wildcards):
    """The per-matrix settings (rule allocate) that compress_layers reads for a method with a model-level step
    (caldera.methods.registry.ModelPlan); none for the others."""
    v = VARIANTS[wildcards.variant]
    return [f"{RES}/compressed/{v.id}/allocation.json"] if has_model_plan(v) else []


def get_profile_chunks(wildcards):
    """Every chunk's profiles (rule profile_layers) of a variant whose method has a model-level step."""
    v = VARIANTS[wildcards.variant]
    return [f"{RES}/compressed/{v.id}/profiles/{c:03d}.json" for c in range(len(layer_chunks(RUN_CONTEXT, v.model)))]


def rhtft_spec(wildcards):
    """Rule rht_finetune's declared configuration: the variant's, the rht_ft settings (not its rows), the
    calibration source."""
    return declared(variant_spec(wildcards), SETTINGS.rht_ft.training(), config["calibration"]["source"])


def get_rhtft_state(wildcards):
    """The file where rule rht_finetune keeps its state between epochs (so a killed job resumes)."""
    return f"{RES}/rhtft/{wildcards.variant}/state.safetensors"


# Table 5 (loraft.smk): LORA_ROWS, the rows by id, is defined there
def get_lora_row(wildcards):
    """The Table 5 row named by the `lora_row` wildcard (caldera.experiments.planning.loraft_rows.LoraRow)."""
    return LORA_ROWS[wildcards.lora_row]


def get_lora_run(wildcards):
    """The `run` param of a LoRA job: run_context of its row's model."""
    return run_context(LORA_ROWS[wildcards.lora_row].variant.model)


def get_lora_checkpoint(wildcards):
    """The checkpoint a LoRA row starts from: its compressed variant's, or rule rht_finetune's (RHT FT Yes)."""
    return LORA_ROWS[wildcards.lora_row].checkpoint(RES)


def lora_spec(wildcards):
    """Rule lora_finetune's declared configuration: the row's variant's, the lora_ft settings that change its
    result (not its rows), the evaluation settings."""
    base = variant_spec(SimpleNamespace(variant=LORA_ROWS[wildcards.lora_row].variant.id))
    ft = {k: v for k, v in SETTINGS.lora_ft.measurement_block().items() if k != "rows"}
    return declared(base, ft, SETTINGS.eval.as_block())


def get_lora_work_dir(wildcards):
    """The working folder of one LoRA job (row, task): its training state while it runs, and its best model
    with lora_ft.save_model."""
    return f"{RES}/lora/{wildcards.lora_row}/{wildcards.lora_task}_work"


def get_table5_plan(wildcards):
    """Rule lora_table's `plan` param (caldera.experiments.report.table5.Table5Plan), made here from the config (None
    without a lora_ft block: Table 5 is then pending_table's, but Snakemake still evaluates this rule's params
    while it resolves which rule makes the file)."""
    return Table5Plan.from_config(config) if config.get("lora_ft") else None


def get_lora_table_inputs(wildcards):
    """Every measurement Table 5 reads (caldera.experiments.report.table5.lora_inputs)."""
    return lora_inputs(config, RES)


def get_hessian_dir(wildcards):
    return f"{RES}/hessians/{VARIANTS[wildcards.variant].model}"


def get_eval_input(wildcards):
    v = VARIANTS[wildcards.variant]
    if v.method == "dense":
        return {"assets": f"{RES}/assets.json"}
    out = {"checkpoint": f"{RES}/rhtft/{FT_VARIANTS[wildcards.variant][1].id}/checkpoint"
           if wildcards.variant in FT_VARIANTS else f"{RES}/compressed/{wildcards.variant}/checkpoint"}
    if SETTINGS.eval.distribution is not None:  # the dense model's distributions, for the paired metrics
        out["reference"] = f"{RES}/reference/{v.model}"
    return out


def reference_spec(wildcards):
    """Rule dense_reference's declared configuration: the model's entry and the compared corpus's settings."""
    corpus = SETTINGS.eval.distribution
    return declared(config["models"][wildcards.model], corpus, SETTINGS.eval.ppl[corpus].as_block())


def get_table_targets():
    return [f"{TABLES_DIR}/{t}.{ext}" for t in [*config["tables"], *REGIME_TABLES] for ext in ("md", "tex", "csv", "json")]


def get_pending_table_targets():
    # Tables 3-6 where this run does not measure them (RHT-FT, LoRA, throughput): the paper's numbers alone.
    return [f"{TABLES_DIR}/{t}.{ext}" for t in PENDING for ext in ("md", "tex", "csv")]


def get_figure3_parts(wildcards):
    """Figure 3's parts, one per job of rule ablation_traces (caldera.experiments.jobs.figures.figure3_jobs)."""
    return [f"{RES}/figures/figure3/{job}.json" for job in figure3_jobs(SETTINGS.figures)]


def get_rank_allocations(wildcards=None):
    """The allocation files of the variants whose method chooses ranks per matrix (not their seed replicates)."""
    return [f"{RES}/compressed/{v}/allocation.json" for v, s in sorted(VARIANTS.items())
            if s.replicate_of is None and has_model_plan(s)]


def get_figure_targets():
    ranks = [f"{TABLES_DIR}/figure_ranks.{ext}" for ext in ("png", "pdf")] if get_rank_allocations() else []
    return [f"{TABLES_DIR}/figure{n}.{ext}" for n in (1, 3, 4) for ext in ("png", "pdf")] + ranks


def get_selection_json():
    return [f"{RES}/selection/selection.json"] if SELECTION else []


def get_selection_targets():
    return [f"{TABLES_DIR}/selection.md"] if SELECTION else []


def get_lora_targets():
    # Table 5, measured when the config has a lora_ft section (workflow/rules/loraft.smk); else pending
    return [f"{TABLES_DIR}/table5_finetune.{ext}" for ext in ("md", "tex", "csv", "json")] if config.get("lora_ft") else []


def get_final_targets():
    return (
        get_table_targets()
        + get_lora_targets()
        + get_selection_targets()
        + get_pending_table_targets()
        + get_figure_targets()
        + get_throughput_targets()  # Table 6 (throughput.smk)
        + [f"{TABLES_DIR}/theory.md", f"{TABLES_DIR}/claims.md", f"{TABLES_DIR}/timings.json", f"{TABLES_DIR}/timings.md"]
        + get_overview_targets()
    )


def get_overview_targets():
    """The verdict page with its forest plot (rule verdict_page) and the perplexity-vs-bits figure (rule pareto)."""
    return [f"{TABLES_DIR}/verdicts.md", *(f"{TABLES_DIR}/{f}.{ext}" for f in ("verdicts_forest", "figure_pareto")
                                           for ext in ("png", "pdf"))]


def get_table_plan(wildcards):
    """Rule make_table's `plan` param: the table's rows, replicates and settings
    (caldera.experiments.report.tables.TablePlan), made here from the config."""
    return TablePlan.from_config(config, wildcards.table)


def get_pending_reason(wildcards):
    """Rule pending_table's `reason` param: what will fill the table (caldera.experiments.planning.plan.pending_tables)."""
    return PENDING[wildcards.ptable]


def get_table_inputs(wildcards):
    from caldera.experiments.planning.plan import table_rows

    files = []
    for row in table_rows(config, wildcards.table):
        v = row["variant"]
        if v is None:
            continue
        files += [f"{RES}/eval/{v.id}/ppl_{c}.json" for c in config["eval"]["ppl"]]
        files.append(f"{RES}/eval/{v.id}/zeroshot.json")
        for r in REPLICATES.get(v.id, [])[1:]:  # its seed replicates (the table's values across seeds)
            files += [f"{RES}/eval/{r.id}/ppl_{c}.json" for c in config["eval"]["ppl"]]
            files.append(f"{RES}/eval/{r.id}/zeroshot.json")
        base = row.get("base")
        if base is not None:  # an RHT-FT row: its un-fine-tuned evaluation too (the before/after claim)
            files += [f"{RES}/eval/{base.id}/ppl_{c}.json" for c in config["eval"]["ppl"]]
            files += [f"{RES}/eval/{base.id}/zeroshot.json", f"{RES}/rhtft/{base.id}/rhtft.json"]
        elif v.method != "dense":
            files.append(f"{RES}/compressed/{v.id}/summary.json")
    return sorted(set(files))


def get_all_logs_inputs():
    # everything else of the run, so that every job's benchmark file exists when the timings are summed
    return (
        get_table_targets()
        + get_lora_targets()
        + get_selection_targets()
        + get_pending_table_targets()
        + get_figure_targets()
        + get_throughput_targets()  # Table 6 (throughput.smk)
        + [f"{TABLES_DIR}/theory.md", f"{TABLES_DIR}/claims.md"]
        + get_overview_targets()
    )


# Table 6 (throughput.smk): the variants its rows map to, one throughput job per model timing all of its variants
TP_VARIANTS = throughput_variants(config, VARIANTS)
TP_MODELS = throughput_models(config, VARIANTS)
TP = SETTINGS.throughput


def get_throughput_input(wildcards):
    """Rule throughput's inputs: the assets (the dense model) and the checkpoint of every compressed variant of
    the model."""
    out = {"assets": f"{RES}/assets.json"}
    out.update({v: f"{RES}/compressed/{v}/checkpoint" for v, spec in TP_MODELS[wildcards.tp_model].items()
                if spec.method != "dense"})
    return out


def get_throughput_checkpoints(wildcards):
    """The `checkpoints` param of a throughput job: each compressed variant's checkpoint folder, by id."""
    return {k: p for k, p in get_throughput_input(wildcards).items() if k != "assets"}


def throughput_spec(wildcards):
    """Rule throughput's declared configuration: its variants', the model's source, the throughput settings,
    the device."""
    m = wildcards.tp_model
    return declared([dataclasses.asdict(v) for v in TP_MODELS[m].values()], config["models"][m]["source"],
                    TP.measurement_block(), config.get("device"))


def get_throughput_variants(wildcards):
    """The variants of Table 6 of the `tp_model` wildcard's model (TP_MODELS), ids sorted."""
    return list(TP_MODELS[wildcards.tp_model].values())


def get_throughput_run(wildcards):
    """The `run` param of a throughput job: run_context of its model."""
    return run_context(wildcards.tp_model)


def get_throughput_results_dir(wildcards, input):
    """The run's results folder (results/<run>), from the first throughput measurement's path."""
    return input[0].rsplit("/", 2)[0]


def get_throughput_targets():
    return [f"{TABLES_DIR}/{THROUGHPUT_TABLE}.{ext}" for ext in ("md", "tex", "csv", "json")]


def weight_spectra_spec():
    """Rule weight_spectra's declared configuration: the figures' model's entry."""
    return declared(config["models"][FIG_MODEL])


def traces_spec():
    """Rules ablation_traces' and lplr_traces' declared configuration: the figure settings, the stand-ins, the rank
    multiple and the figures' model's entry."""
    return declared(SETTINGS.figures.as_block(), config["stand_ins"], config["rank_multiple"],
                    config["models"][FIG_MODEL])


def selection_spec():
    """Rule selection's declared configuration: the sweep, the QuIP# method, the figure settings (its ablations),
    the stand-ins, the swept models' entries, the tables and the layers."""
    return declared(SELECTION and SELECTION.as_block(), config["methods"]["quip#"], SETTINGS.figures.as_block(),
                    config["stand_ins"], config["rank_multiple"], {m: config["models"][m] for m in SELECTION_MODELS},
                    config["tables"], config.get("layers"))


# The run's record (config `record`; workflow/rules/record.smk): the jobs whose small outputs it can hold
def get_record_candidates(wildcards):
    """Rule record's `jobs` param: :func:`record_candidates`."""
    return record_candidates()


def record_candidates():
    """Every job of this run whose small outputs a record keeps
    (caldera.experiments.planning.record.RecordJob: rule, benchmark, small and large outputs, large inputs, spec)."""
    from caldera.experiments.planning.record import RecordJob

    jobs = []
    corpora = list(SETTINGS.eval.ppl)

    def evals(v):
        return (*[f"{RES}/eval/{v}/ppl_{c}.json" for c in corpora], f"{RES}/eval/{v}/zeroshot.json")

    def reference(v):
        return (f"{RES}/reference/{VARIANTS[v].model}",) if SETTINGS.eval.distribution is not None else ()

    for v, spec in sorted(VARIANTS.items()):
        wc = SimpleNamespace(variant=v)
        ckpt = f"{RES}/compressed/{v}/checkpoint"
        if v in REPLICATE_JOBS:
            jobs.append(RecordJob("replicate", f"{RES}/benchmarks/replicate/{v}.tsv",
                                  (f"{RES}/compressed/{v}/summary.json", *evals(v)), replicate_spec(wc),
                                  large_outputs=(ckpt,), reads=(get_hessian_dir(wc), *reference(v))))
            continue
        reads = () if spec.method == "dense" else (get_eval_input(wc)["checkpoint"], *reference(v))
        jobs.append(RecordJob("evaluate", f"{RES}/benchmarks/evaluate/{v}.tsv", evals(v), eval_spec(wc),
                              reads=reads))
        if v in FT_VARIANTS:
            base = FT_VARIANTS[v][1].id
            jobs.append(RecordJob("rht_finetune", f"{RES}/benchmarks/rht_finetune/{base}.tsv",
                                  (f"{RES}/rhtft/{base}/rhtft.json",),
                                  rhtft_spec(SimpleNamespace(variant=base)),
                                  large_outputs=(f"{RES}/rhtft/{base}/checkpoint",),
                                  reads=(f"{RES}/compressed/{base}/checkpoint",)))
            continue
        if spec.method == "dense":
            continue
        producer = "compress_variant" if v in ONE_CHUNK else "assemble_checkpoint"
        jobs.append(RecordJob(producer, f"{RES}/benchmarks/{producer}/{v}.tsv", (f"{RES}/compressed/{v}/summary.json",),
                              variant_spec(wc), large_outputs=(ckpt,),
                              reads=(get_hessian_dir(wc),) if v in ONE_CHUNK else tuple(get_chunk_dirs(wc))))
        if has_model_plan(spec):
            jobs.append(RecordJob("allocate", f"{RES}/benchmarks/allocate/{v}.tsv",
                                  (f"{RES}/compressed/{v}/allocation.json",), variant_spec(wc)))
    for m in TP_MODELS:
        wc = SimpleNamespace(tp_model=m)
        jobs.append(RecordJob("throughput", f"{RES}/benchmarks/throughput/{m}.tsv", (f"{RES}/throughput/{m}.json",),
                              throughput_spec(wc), reads=tuple(get_throughput_checkpoints(wc).values())))
    if config.get("lora_ft"):
        for path in lora_inputs(config, RES):
            if f"{RES}/lora/" not in path:
                continue
            row, task = path.removesuffix(".json").split("/")[-2:]
            wc = SimpleNamespace(lora_row=row, lora_task=task)
            jobs.append(RecordJob("lora_finetune", f"{RES}/benchmarks/lora_finetune/{row}_{task}.tsv", (path,),
                                  lora_spec(wc), reads=(get_lora_checkpoint(wc),)))
    jobs.append(RecordJob("weight_spectra", f"{RES}/benchmarks/weight_spectra/figure1.tsv",
                          (f"{RES}/figures/figure1.json",), weight_spectra_spec()))
    jobs.append(RecordJob("lplr_traces", f"{RES}/benchmarks/lplr_traces/figure4.tsv",
                          (f"{RES}/figures/figure4.json",), traces_spec()))
    for trace in figure3_jobs(SETTINGS.figures):
        jobs.append(RecordJob("ablation_traces", f"{RES}/benchmarks/ablation_traces/figure3_{trace}.tsv",
                              (f"{RES}/figures/figure3/{trace}.json",), traces_spec()))
    if SELECTION:
        jobs.append(RecordJob("selection", f"{RES}/benchmarks/selection/selection.tsv",
                              (f"{RES}/selection/selection.json", f"{TABLES_DIR}/selection.md"), selection_spec()))
    return list({job.benchmark: job for job in jobs}.values())  # RHT-FT rows that share a base: one job

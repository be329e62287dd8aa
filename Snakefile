# CALDERA reproduction: one command regenerates every table and figure of the paper.
#   snakemake --cores 2                      # default "mini" config: every table, offline, CPU (SmolLM2, Gemma-3)
#   snakemake --cores 2 --configfile config/mini-full.yaml  # the same at larger settings (hours)
#   snakemake --cores 2 --configfile config/smoke.yaml      # minutes; used by the test suite
#   snakemake --profile workflow/profiles/slurm --configfile config/paper.yaml   # paper scale, GPU cluster
from snakemake.utils import min_version

min_version("8.0")


# An explicit --configfile is the whole config; config/mini.yaml is read only when none is given (a `configfile:`
# directive would deep-merge every --configfile over it, so paper.yaml would run with mini's settings).
# --config KEY=VALUE still overrides either. The effective settings are written to results/<name>/settings.json
# when the workflow is parsed (the log's first line names the file).
if not workflow.overwrite_configfiles:
    workflow.configfile("config/mini.yaml")


report: "workflow/report/workflow.rst"  # report.html's description (each result's caption: workflow/report/)


include: "workflow/rules/common.smk"
include: "workflow/rules/calibrate.smk"
include: "workflow/rules/compress.smk"
include: "workflow/rules/evaluate.smk"
include: "workflow/rules/throughput.smk"
include: "workflow/rules/figures.smk"
include: "workflow/rules/tables.smk"
include: "workflow/rules/selection.smk"
include: "workflow/rules/loraft.smk"
include: "workflow/rules/rhtft.smk"
include: "workflow/rules/record.smk"


rule all:
    input:
        get_final_targets(),
    default_target: True

"""The workflow's rules as the library names them: what ``caldera cost`` plans and prices
(:mod:`caldera.experiments.planning.job_costs`, :mod:`caldera.experiments.planning.cost`), the stage of the run
each one's time counts in (``timings.md``), and which run under the config's ``numerics`` pin
(``workflow/scripts/caldera_job.py``). The rule files spell the same names (``rule hessians:``); a test checks
that the two sets are equal. Torch-free: the pin is decided before torch loads."""

from __future__ import annotations

from enum import StrEnum


class Rule(StrEnum):
    """One rule of the workflow (a ``str``: its name as the rule files and Snakemake's benchmarks spell it)."""

    ASSETS = "assets"
    HESSIANS = "hessians"
    SELECTION = "selection"
    PROFILE_LAYERS = "profile_layers"
    ALLOCATE = "allocate"
    COMPRESS_VARIANT = "compress_variant"
    COMPRESS_LAYERS = "compress_layers"
    ASSEMBLE_CHECKPOINT = "assemble_checkpoint"
    DENSE_REFERENCE = "dense_reference"
    EVALUATE = "evaluate"
    REPLICATE = "replicate"
    RHT_FINETUNE = "rht_finetune"
    LORA_FINETUNE = "lora_finetune"
    LORA_TABLE = "lora_table"
    THROUGHPUT = "throughput"
    THROUGHPUT_TABLE = "throughput_table"
    WEIGHT_SPECTRA = "weight_spectra"
    ABLATION_TRACES = "ablation_traces"
    FIGURE3_DATA = "figure3_data"
    LPLR_TRACES = "lplr_traces"
    PLOT_FIGURE = "plot_figure"
    PLOT_RANKS = "plot_ranks"
    MAKE_TABLE = "make_table"
    PENDING_TABLE = "pending_table"
    THEORY_REPORT = "theory_report"
    CLAIMS = "claims"
    VERDICT_PAGE = "verdict_page"
    PARETO = "pareto"
    TIMINGS = "timings"
    RESTORE_RECORD = "restore_record"
    RECORD = "record"
    ALL = "all"


#: rule -> stage of the run (``timings.md``); ``all`` runs nothing
STAGES: dict[Rule, str] = {
    Rule.ASSETS: "assets",
    Rule.HESSIANS: "calibration (Hessians)",
    Rule.COMPRESS_VARIANT: "compression",
    Rule.COMPRESS_LAYERS: "compression",
    Rule.ASSEMBLE_CHECKPOINT: "compression",
    Rule.PROFILE_LAYERS: "compression",
    Rule.ALLOCATE: "compression",
    Rule.EVALUATE: "evaluation",
    Rule.REPLICATE: "seed replicates (compression + evaluation)",
    Rule.DENSE_REFERENCE: "evaluation",
    Rule.WEIGHT_SPECTRA: "figures",
    Rule.ABLATION_TRACES: "figures",
    Rule.FIGURE3_DATA: "figures",
    Rule.LPLR_TRACES: "figures",
    Rule.PLOT_FIGURE: "figures",
    Rule.PLOT_RANKS: "figures",
    Rule.MAKE_TABLE: "tables and reports",
    Rule.PENDING_TABLE: "tables and reports",
    Rule.THEORY_REPORT: "tables and reports",
    Rule.CLAIMS: "tables and reports",
    Rule.VERDICT_PAGE: "tables and reports",
    Rule.PARETO: "figures",
    Rule.THROUGHPUT: "throughput (Table 6)",
    Rule.THROUGHPUT_TABLE: "tables and reports",
    Rule.LORA_FINETUNE: "LoRA fine-tuning (Table 5)",
    Rule.RHT_FINETUNE: "RHT fine-tuning (Tables 3-4)",
    Rule.LORA_TABLE: "tables and reports",
    Rule.SELECTION: "selection",
    Rule.TIMINGS: "tables and reports",
    Rule.RESTORE_RECORD: "record",
    Rule.RECORD: "record",
}

#: the rules whose result a CALDERA decomposition amplifies (an E8P code flipped by a last-bit difference changes
#: every code LDLQ rounds after it): the Hessians, the decompositions and the sweeps over them. They run under the
#: config's ``numerics`` (caldera.numerics); every other job (evaluation, fine-tuning, throughput) keeps the
#: machine's own code paths: its last-bit differences are not amplified, and Table 6 times the machine's own
#: kernels. A seed replicate's job compresses and then evaluates under the pin: its evaluation takes the pinned
#: code paths (on a CPU without AVX-512 they are its own).
PINNED: frozenset[Rule] = frozenset({Rule.HESSIANS, Rule.SELECTION, Rule.PROFILE_LAYERS, Rule.COMPRESS_LAYERS,
                                     Rule.COMPRESS_VARIANT, Rule.REPLICATE, Rule.ABLATION_TRACES,
                                     Rule.LPLR_TRACES})

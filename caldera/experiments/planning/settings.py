"""Typed, validated settings of the workflow config's blocks, built when the plan is made.

One frozen dataclass per block (``calibration``, ``selection``, ``rht_ft``, ``lora_ft``, ``throughput``, ``eval``,
``figures``, ``regime``; nested ones where a block nests; one per item of the ``claims`` list), each made by
:meth:`Settings.from_block` from the block's mapping (the check framework:
:mod:`caldera.experiments.planning.settings_checks`):

* an unknown key is refused, naming its full key path and the closest accepted name (``throughput.run: unknown
  key; did you mean 'runs'?``), never dropped;
* a missing required key and a value of the wrong type or range are refused the same way, each naming its key;
* the defaults of a block are the field defaults here and nowhere else (the JSON schema
  ``workflow/schemas/config.schema.yaml`` gives types only; the library reads the settings object).

:func:`block_settings` builds every block of a config; :func:`caldera.experiments.planning.plan.check_config` calls
it, so
``snakemake -n`` fails on a bad block, and the workflow rules hand each job its settings object (``params:
settings``) instead of the whole config. :meth:`Settings.as_block` gives the block back as a mapping with the
defaults filled in (what the results record as their configuration).

This module imports nothing of the library but its check framework,
:mod:`caldera.experiments.planning.config_guard`'s messages and the linear layers' short names.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, ClassVar

from caldera.experiments.planning.config_guard import DEFAULT_PROMPT
from caldera.experiments.planning.settings_checks import (
    Settings,
    boolean,
    either,
    integer,
    list_of,
    mapping,
    mapping_of,
    nested,
    number,
    one_of,
    optional,
    setting,
    text,
)
from caldera.pipeline.linears import SHORT_NAMES

# ---------------------------------------------------------------------------------------------- throughput


@dataclasses.dataclass(frozen=True, kw_only=True)
class ThroughputSettings(Settings):
    """``throughput:`` (Table 6, :mod:`caldera.experiments.jobs.throughput`; the block is optional)."""

    BLOCK: ClassVar[str] = "throughput"

    # randomized interleaved rounds: each times every variant of a model once per protocol, in an order shuffled
    # per round (caldera.eval.throughput.interleaved_throughput); the claims pair the variants round by round
    rounds: int = setting(12, integer(2))
    seed: int = setting(0, integer(0))  # the rounds' shuffled orders
    warmup: int = setting(1, integer(0))  # untimed calls first (builds the dequantized caches, JIT-compiles)
    new_tokens: int = setting(16, integer(1))  # decode protocol: tokens generated per round
    calls: int = setting(8, integer(1))  # single-token protocol: forwards per round
    kernel: str = setting("auto", one_of("auto", "kernel", "reference"))  # CompressedLinear path
    dtype: str = setting("float32", one_of("float32", "float16", "bfloat16"))  # activations and dense layers
    prompt: str = setting(DEFAULT_PROMPT, text)

    REMOVED: ClassVar[dict[str, str]] = {
        "separation_margin": "removed: a claim is decided on the paired interval of the per-round log ratio of "
                             "tokens/s (caldera.experiments.report.table6.compare_rounds), not on a margin between "
                             "repeat ranges",
        "runs": "removed: the variants of a model are timed together in `throughput.rounds` interleaved rounds "
                "(default 12); set `rounds` instead",
    }


# ---------------------------------------------------------------------------------------------- rht_ft


@dataclasses.dataclass(frozen=True, kw_only=True)
class PaperRow(Settings):
    """A paper row of a table by its method, rank and B_LR: an entry of ``rht_ft.rows`` (a row of Tables 3-4), a
    side of a ``claims`` item."""

    method: str = setting(check=one_of("CALDERA", "QuIP#"))
    rank: int = setting(check=integer(0))
    b_lr: int | None = setting(check=one_of(4, 16, None))


@dataclasses.dataclass(frozen=True, kw_only=True)
class RhtFtSettings(Settings):
    """``rht_ft:`` (RHT fine-tuning of Tables 3-4, :mod:`caldera.experiments.jobs.rhtft`)."""

    BLOCK: ClassVar[str] = "rht_ft"

    n_samples: int = setting(check=integer(2))  # sequences drawn from calibration.source (paper 256)
    held_out: int = setting(check=integer(1))  # the last ones, for choosing the epoch (paper 64)
    seq_len: int = setting(check=integer(2))  # tokens per sequence (paper 512)
    epochs: int = setting(check=integer(1))
    lr: float = setting(check=number(0, exclusive=True))
    batch_size: int = setting(check=integer(1))
    weight_decay: float = setting(0.01, number(0))  # AdamW default (authors' script)
    seed: int = setting(check=integer(0))  # sequences drawn and epoch order
    rows: list[PaperRow] | None = setting(check=optional(list_of(nested(PaperRow))))  # null: every row

    def validate(self, where: str) -> None:
        if self.held_out >= self.n_samples:
            raise ValueError(f"{where}.held_out: {self.held_out} must be below {where}.n_samples "
                             f"({self.n_samples}): the rest are the training sequences")

    def training(self) -> dict[str, Any]:
        """The block without ``rows`` (which rows are fine-tuned is the plan's business), keys sorted: what a
        fine-tuned checkpoint records and what its job's rerun trigger declares."""
        b = self.as_block()
        return {k: b[k] for k in sorted(b) if k != "rows"}

    def finetune_config(self):
        """The :class:`caldera.finetune.rht.RHTFTConfig` of these settings."""
        from caldera.finetune.rht import RHTFTConfig

        return RHTFTConfig(epochs=self.epochs, lr=self.lr, batch_size=self.batch_size,
                           weight_decay=self.weight_decay, seed=self.seed)


# ---------------------------------------------------------------------------------------------- lora_ft


@dataclasses.dataclass(frozen=True, kw_only=True)
class LoraFtRow(Settings):
    """One entry of ``lora_ft.rows``: a paper row of Table 5."""

    model: str = setting(check=text)
    method: str = setting(check=one_of("CALDERA", "LoftQ"))
    rank: int = setting(check=integer(1))
    b_lr: float | None = setting(None, optional(number(0)))
    b_q: float | None = setting(None, optional(number(0)))
    rht_ft: bool = setting(False, boolean)  # the CALDERA row with RHT-FT "Yes" (needs rht_ft)


@dataclasses.dataclass(frozen=True, kw_only=True)
class LoftqSettings(Settings):
    """``lora_ft.loftq``: LoftQ parameters of Table 5's LoftQ rows (the method's own defaults otherwise)."""

    iters: int | None = setting(None, optional(integer(1)))
    block: int | None = setting(None, optional(integer(1)))


@dataclasses.dataclass(frozen=True, kw_only=True)
class LoraTaskSettings(Settings):
    """``lora_ft.tasks.<task>``: one row of App. E.4's hyper-parameter table, and the task's data."""

    block_size: int = setting(check=integer(2))
    batch_size: int = setting(check=integer(1))
    grad_acc: int = setting(check=integer(1))
    epochs: int = setting(check=integer(1))
    lr: float = setting(check=number(0, exclusive=True))
    weight_decay: float = setting(check=number(0))
    warmup_steps: int = setting(check=integer(0))
    n_train: int | None = setting(check=optional(integer(1)))  # null: every block / document of the training data
    n_heldout: int = setting(check=integer(1))
    train_source: str | None = setting(None, optional(text))  # wiki at paper scale: a text source
    heldout_source: str | None = setting(None, optional(text))
    train_split: str | None = setting(None, optional(text))  # rte / winogrande at paper scale: a hub split

    def hyper(self):
        """The training hyper-parameters (:class:`caldera.finetune.lora.TaskHyper`)."""
        from caldera.finetune.lora import TaskHyper

        return TaskHyper(block_size=self.block_size, batch_size=self.batch_size, grad_acc=self.grad_acc,
                         epochs=self.epochs, lr=self.lr, weight_decay=self.weight_decay,
                         warmup_steps=self.warmup_steps)


LORA_TASKS = ("wiki", "rte", "winogrande")


@dataclasses.dataclass(frozen=True, kw_only=True)
class LoraTasks(Settings):
    """``lora_ft.tasks``: every task's settings."""

    wiki: LoraTaskSettings = setting(check=nested(LoraTaskSettings))
    rte: LoraTaskSettings = setting(check=nested(LoraTaskSettings))
    winogrande: LoraTaskSettings = setting(check=nested(LoraTaskSettings))

    def __getitem__(self, task: str) -> LoraTaskSettings:
        if task not in LORA_TASKS:
            raise ValueError(f"lora_ft task {task!r}; accepted: {list(LORA_TASKS)}")
        return getattr(self, task)

    def items(self):
        return [(t, getattr(self, t)) for t in LORA_TASKS]


@dataclasses.dataclass(frozen=True, kw_only=True)
class LoraFtSettings(Settings):
    """``lora_ft:`` (Table 5: the jobs :mod:`caldera.experiments.jobs.loraft`, the table
    :mod:`caldera.experiments.report.table5`)."""

    BLOCK: ClassVar[str] = "lora_ft"

    rows: str | list[LoraFtRow] = setting(check=either(one_of("all"), list_of(nested(LoraFtRow), min_items=1)))
    ft_dtype: str = setting("bfloat16", one_of("bfloat16", "float16", "float32"))
    seed: int = setting(0, integer(0))
    n_checkpoints: int = setting(check=integer(1))
    loftq: LoftqSettings | None = setting(None, optional(nested(LoftqSettings)))
    tasks: LoraTasks = setting(check=nested(LoraTasks))
    # keep each job's best fine-tuned model as a checkpoint (``<task>_work/model``); off, a job leaves its result
    # JSON only
    save_model: bool = setting(False, boolean)

    NOT_MEASURED: ClassVar[tuple[str, ...]] = ("save_model",)


# ---------------------------------------------------------------------------------------------- eval


@dataclasses.dataclass(frozen=True, kw_only=True)
class PplSettings(Settings):
    """``eval.ppl.<corpus>``: one perplexity corpus."""

    source: str = setting(check=text)
    protocol: str = setting(check=one_of("stream", "windows"))
    seq_len: int = setting(check=integer(8))
    n_windows: int | None = setting(None, optional(integer(1)))  # null / absent: the whole stream
    seed: int = setting(0, integer(0))  # windows protocol: which windows are drawn

    def as_block(self) -> dict[str, Any]:
        """As :meth:`Settings.as_block`, but ``seed`` only when given: a stream corpus draws no windows, and the
        evaluation jobs' rerun triggers (their declared ``eval`` block) have never carried a seed not given."""
        b = super().as_block()
        if "seed" not in self.given:
            b.pop("seed")
        return b


@dataclasses.dataclass(frozen=True, kw_only=True)
class ZeroshotSettings(Settings):
    """``eval.zeroshot``: the lm-eval zero-shot tasks."""

    tasks: list[str] = setting(check=list_of(text, min_items=1))
    limit: int | None = setting(None, optional(integer(1)))  # documents per task (null: all)
    batch_size: int = setting(8, integer(1))


@dataclasses.dataclass(frozen=True, kw_only=True)
class EvalSettings(Settings):
    """``eval:`` (perplexity and zero-shot of every variant,
    :func:`caldera.experiments.jobs.evaluate.step_evaluate`)."""

    BLOCK: ClassVar[str] = "eval"

    # compressed: the CompressedLinear forward; reconstructed: the dense Ŵ of every compressed layer
    weights: str = setting("compressed", one_of("compressed", "reconstructed"))
    ppl: dict[str, PplSettings] = setting(check=mapping_of(nested(PplSettings), min_items=1))
    zeroshot: ZeroshotSettings = setting(check=nested(ZeroshotSettings))
    #: evaluate the dense model one decoder layer at a time (caldera.eval.streamed): ``auto`` when its weights do
    #: not fit the device (more than 80 % of the free memory), ``always``, or ``never``; the numbers are the same
    stream_layers: str = setting("auto", one_of("auto", "always", "never"))
    #: the ``ppl`` corpus on which each compressed variant is compared with its dense model token by token (KL
    #: divergence, Δ ln p, top-1 agreement: caldera.eval.distribution); None: not compared
    distribution: str | None = setting(None, optional(text))

    def validate(self, where: str) -> None:
        if self.distribution is not None and self.distribution not in self.ppl:
            raise ValueError(f"{where}.distribution: {self.distribution!r} is not a corpus of {where}.ppl "
                             f"({sorted(self.ppl)}); name one of them, or remove the key")

    def as_block(self) -> dict[str, Any]:
        """As :meth:`Settings.as_block`, but ``stream_layers`` only when given: it changes how the numbers are
        computed, not what they are, and the evaluation jobs' rerun triggers (their declared ``eval`` block) and
        the plan's record of the block stay those of a config that does not name it."""
        b = super().as_block()
        if "stream_layers" not in self.given:
            b.pop("stream_layers")
        return b


# ---------------------------------------------------------------------------------------------- figures


@dataclasses.dataclass(frozen=True, kw_only=True)
class FiguresSettings(Settings):
    """``figures:`` (Figures 1, 3 and 4, :mod:`caldera.experiments.jobs.figures`)."""

    BLOCK: ClassVar[str] = "figures"

    model: str = setting(check=text)
    paper_model: str = setting(check=text)
    layer: int = setting(check=integer(0))
    matrices: list[str] = setting(check=list_of(one_of(*SHORT_NAMES), min_items=1))
    paper_ranks: list[int] = setting(check=list_of(integer(1), min_items=1))
    ablations: list[str] = setting(check=list_of(text, min_items=1))
    outer_iters: int = setting(check=integer(1))
    svd: str | None = setting(None, optional(one_of("exact", "randomized", "warm")))  # None: each preset's own
    lplr_matrices: list[str] = setting(check=list_of(one_of(*SHORT_NAMES), min_items=1))
    lplr_inner_iters: int = setting(check=integer(1))
    #: Figure 3's jobs: one job for the figure, or one decomposition trace per job (caldera.experiments.jobs.figures)
    trace_jobs: str = setting("one", one_of("one", "per-curve"))


# ---------------------------------------------------------------------------------------------- selection


@dataclasses.dataclass(frozen=True, kw_only=True)
class LongIters(Settings):
    """``selection.long_iters``: the candidates again with a longer iteration budget on a few matrices."""

    iters: list[int] = setting(check=list_of(integer(1), length=2))
    layers: int = setting(check=integer(1))
    matrices: list[str] = setting(check=list_of(one_of(*SHORT_NAMES)))


_BITS = one_of(2, 3, 4, 16)


@dataclasses.dataclass(frozen=True, kw_only=True)
class SelectionSettings(Settings):
    """``selection:`` (the CALDERA rows' configuration chosen on the Hessians, :mod:`caldera.experiments.
    selection`). ``base`` and ``candidates`` are CALDERA parameters, checked against the method's config class by
    :func:`caldera.experiments.planning.config_guard.unknown_param_errors`."""

    BLOCK: ClassVar[str] = "selection"

    layers: dict[str, list[int]] = setting(check=mapping_of(list_of(integer(0), min_items=1), min_items=1))
    matrices: list[str] | None = setting(None, optional(list_of(one_of(*SHORT_NAMES))))  # null: all seven
    bits: int | list[int] = setting(check=either(_BITS, list_of(_BITS, min_items=1, unique=True)))
    ranks: str = setting("extremes", one_of("all", "extremes"))
    iters: list[int] = setting(check=list_of(integer(1), length=2))
    long_iters: LongIters | None = setting(None, optional(nested(LongIters)))
    tie_tolerance: float = setting(0.0, number(0, below=1))
    ablations: bool = setting(True, boolean)  # the Figure 3 comparisons re-run with the selected configuration
    base: dict[str, Any] = setting(check=mapping)
    candidates: dict[str, dict[str, Any]] = setting(check=mapping_of(mapping, min_items=1))


# ---------------------------------------------------------------------------------------------- regime

#: the Q bits a regime may choose among: E8P (2), E8P-RVQ3 (3), E8P-RVQ4 (4)
REGIME_Q_BITS = (2, 3, 4)
#: the paper's perplexity columns a regime's target ratio may come from (Tables 1, 2 and 7)
REGIME_CORPORA = ("wiki2", "c4")


@dataclasses.dataclass(frozen=True, kw_only=True)
class RegimeModel(Settings):
    """``regime.models.<stand-in>``: the paper model whose 2-bit QuIP# perplexity ratio the stand-in is matched to,
    and the Q bits the measurement chose (``regime.md``; None: not measured yet)."""

    paper_model: str = setting(check=text)
    q_bits: int | None = setting(None, optional(one_of(*REGIME_Q_BITS)))


@dataclasses.dataclass(frozen=True, kw_only=True)
class RegimeZeroshot(Settings):
    """``regime.run.zeroshot``: the regime rows' zero-shot documents, set from the regime's measured per-document
    spreads at 80 % power (``benchmarks/results/zeroshot_design_regime.md``). ``limit``: documents per task for
    the tasks it names (the others keep ``eval.zeroshot.limit``); ``replicates``: the regime rows' seed replicates
    are scored zero-shot too (whatever ``replicates.zeroshot`` says), so the zero-shot claims pair on seeds."""

    limit: dict[str, int] = setting(check=mapping_of(integer(1), min_items=1))
    replicates: bool = setting(False, boolean)


@dataclasses.dataclass(frozen=True, kw_only=True)
class RegimeRun(Settings):
    """``regime.run``: rows of this run compressed again with Q at each stand-in's regime bits
    (``regime.models.<m>.q_bits``), beside the 2-bit rows. ``variants``: ids of this run's compressed variants
    (each gets the id ``<id>-q<bits>``); ``tables``: the zero-shot tables shown again with those rows
    (``<table>_regime``); ``params``: per registered method, parameters set on top of the method's own (the
    configuration a selection at the regime's bits chose on the calibration Hessians)."""

    tables: list[str] = setting(check=list_of(text, min_items=1, unique=True))
    variants: list[str] = setting(check=list_of(text, min_items=1, unique=True))
    params: dict[str, dict[str, Any]] = setting({}, mapping_of(mapping))
    zeroshot: RegimeZeroshot | None = setting(None, optional(nested(RegimeZeroshot)))


@dataclasses.dataclass(frozen=True, kw_only=True)
class RegimeSettings(Settings):
    """``regime:`` (the stand-ins' compression regime: the Q bits at which QuIP#'s perplexity on held-out
    calibration text, relative to the dense model's, comes nearest the paper's own 2-bit QuIP# ratio;
    :mod:`caldera.experiments.jobs.regime` measures, :mod:`caldera.experiments.report.regime_report` selects).
    The workflow reads ``models.<m>.q_bits`` and ``run`` only: the rows it compresses again at those bits."""

    BLOCK: ClassVar[str] = "regime"

    models: dict[str, RegimeModel] = setting(check=mapping_of(nested(RegimeModel), min_items=1))
    q_bits: list[int] = setting([2, 3, 4], list_of(one_of(*REGIME_Q_BITS), min_items=1, unique=True))
    corpus: str = setting("wiki2", one_of(*REGIME_CORPORA))  # the paper's column the target ratio is read from
    seeds: list[int] = setting([0], list_of(integer(0), min_items=1, unique=True))  # QuIP#'s compression seeds
    #: held-out windows: the calibration sampler's rows after the Hessians' ``calibration.n_samples`` (same source,
    #: seed and ``calibration.seq_len``), so no window shares a document with the Hessians' sequences
    n_windows: int = setting(4, integer(1))
    run: RegimeRun | None = setting(None, optional(nested(RegimeRun)))  # rows of the run again at the regime bits

    def validate(self, where: str) -> None:
        for m, entry in self.models.items():
            if entry.q_bits is not None and entry.q_bits not in self.q_bits:
                raise ValueError(f"{where}.models.{m}.q_bits: {entry.q_bits} is not a candidate of {where}.q_bits "
                                 f"({self.q_bits}); add it there or set the chosen bits from regime.md")


# ---------------------------------------------------------------------------------------------- run context


@dataclasses.dataclass(frozen=True, kw_only=True)
class CalibrationSettings(Settings):
    """``calibration:`` (the calibration sequences the Hessians are collected on, rule hessians: App. G.1's
    RedPajama samples at paper scale)."""

    BLOCK: ClassVar[str] = "calibration"

    source: str = setting(check=text)  # a text source (caldera.pipeline.text): redpajama, wiki, ...
    n_samples: int = setting(check=integer(1))  # sequences
    seq_len: int = setting(check=integer(8))  # tokens per sequence
    seed: int = setting(check=integer(0))  # which sequences are drawn
    batch_size: int = setting(8, integer(1))  # sequences per forward while collecting


@dataclasses.dataclass(frozen=True, kw_only=True)
class ModelEntry:
    """One ``models:`` entry (its keys as the JSON schema requires them): the checkpoint's ``source`` (a folder, a
    hub id or an ``asset:`` name, :func:`caldera.pipeline.models.resolve_source`), its display ``label``, its
    ``shapes`` (a key of :data:`caldera.bits.CONFIG_SHAPES`) and its decoder layer count ``num_layers``."""

    source: str
    label: str
    shapes: str
    num_layers: int

    @classmethod
    def from_entry(cls, entry: Mapping[str, Any], name: str = "?") -> ModelEntry:
        """The entry ``models.<name>`` of a config. Raises ``ValueError`` naming the model and the missing keys
        when the mapping lacks one (the workflow's schema refuses such a config first)."""
        missing = [k for k in ("source", "label", "shapes", "num_layers") if k not in entry]
        if missing:
            raise ValueError(f"models.{name}: missing {', '.join(missing)}; each model entry needs source, label, "
                             "shapes and num_layers (config/README.md)")
        return cls(source=entry["source"], label=entry["label"], shapes=entry["shapes"],
                   num_layers=int(entry["num_layers"]))


@dataclasses.dataclass(frozen=True)
class RunContext:
    """The run-level settings a job needs beside its block's settings, typed when the plan is made
    (:meth:`from_config`): the run's ``name``; ``device`` and ``dtype`` (where and in which dtype dense models run);
    the :class:`ModelEntry` of each of the ``models`` it loads; the paper-model ``stand_ins``; the decoder
    ``layers`` compressed (None: all) and ``layers_per_job``; ``rank_multiple`` (paper ranks mapped to a stand-in);
    the ``calibration`` settings; ``local_data`` (local copies of the hub's datasets, or None). The jobs' model
    loaders and rank mapping (:mod:`caldera.experiments.jobs.models`) read it."""

    name: str
    device: str
    dtype: str
    models: dict[str, ModelEntry]
    stand_ins: dict[str, str] = dataclasses.field(default_factory=dict)
    layers: tuple[int, ...] | None = None
    layers_per_job: int = 1
    rank_multiple: int = 8
    calibration: CalibrationSettings | None = None
    local_data: str | None = None

    @classmethod
    def from_config(cls, config: Mapping[str, Any], models: list[str] | None = None) -> RunContext:
        """``config``'s context; ``models``: only these entries (default: every model)."""
        entries = config["models"]
        keep = list(entries) if models is None else models
        layers = config.get("layers")
        cal = config.get("calibration")
        return cls(name=config["name"], device=config.get("device", "auto"), dtype=config.get("dtype", "auto"),
                   models={m: ModelEntry.from_entry(entries[m], m) for m in keep},
                   stand_ins=dict(config.get("stand_ins") or {}),
                   layers=None if layers is None else tuple(int(x) for x in layers),
                   layers_per_job=int(config.get("layers_per_job", 1)),
                   rank_multiple=int(config.get("rank_multiple", 8)),
                   calibration=None if cal is None else CalibrationSettings.from_block(cal),
                   local_data=config.get("local_data"))

    def labels(self) -> dict[str, str]:
        """Each model's display label (``models.<m>.label``)."""
        return {m: e.label for m, e in self.models.items()}


# ---------------------------------------------------------------------------------------------- zero-shot claims


@dataclasses.dataclass(frozen=True, kw_only=True)
class ZeroshotClaimsSettings(Settings):
    """``zeroshot_claims:`` the zero-shot tasks each stand-in's claims pool (``tasks``: model key → tasks of
    ``eval.zeroshot.tasks``; a model it leaves out pools every task). The tables show every task; a claim compares
    two compressions of a model only on the tasks its dense model scores above chance (set from a committed record
    of the dense model alone, ``benchmarks/results/zeroshot_design_regime.md``), since where the dense model guesses no
    compression of it can show the paper's differences."""

    BLOCK: ClassVar[str] = "zeroshot_claims"

    tasks: dict[str, list[str]] = setting(check=mapping_of(list_of(text, min_items=1, unique=True), min_items=1))


# ---------------------------------------------------------------------------------------------- claims

#: what a ``claims`` item may compare its rows on: the Wiki2 perplexity ratio a / b, or the zero-shot correct-choice
#: margin a − b (all tasks pooled)
CLAIM_STATISTICS = ("wiki2_ppl", "zeroshot_margin")
#: its decision rules: "lower" holds when the interval lies below no difference, "higher" when above
CLAIM_RULES = ("lower", "higher")


@dataclasses.dataclass(frozen=True, kw_only=True)
class ClaimSettings(Settings):
    """One item of ``claims:``, a claim this run states after the paper's in claims.md: paper row ``a`` against
    paper row ``b`` of one block of a zero-shot table (``table``, ``paper_model``), on ``statistic``
    (:data:`CLAIM_STATISTICS`) by ``rule`` (:data:`CLAIM_RULES`); ``claim`` its text, ``source`` where the paper
    makes it. Decided as the paper's table claims are (:mod:`caldera.experiments.report.claim_registry`)."""

    BLOCK: ClassVar[str] = "claims"

    claim: str = setting(check=text)
    source: str = setting(check=text)
    table: str = setting(check=text)
    paper_model: str = setting(check=text)
    a: PaperRow = setting(check=nested(PaperRow))
    b: PaperRow = setting(check=nested(PaperRow))
    statistic: str = setting(check=one_of(*CLAIM_STATISTICS))
    rule: str = setting(check=one_of(*CLAIM_RULES))


def declared_claims(config: Mapping[str, Any]) -> list[ClaimSettings]:
    """Every item of ``config["claims"]`` (absent or null: none) as its settings, in order. Raises ``ValueError``
    listing every item's problems, one a line, each starting with its key path (``claims[0].rule: ...``)."""
    items = config.get("claims") or []
    if not isinstance(items, list):
        raise ValueError(f"claims: expected a list, got {items!r}")
    out, errors = [], []
    for i, item in enumerate(items):
        try:
            out.append(ClaimSettings.from_block(item, f"claims[{i}]"))
        except ValueError as e:
            errors.append(str(e))
    if errors:
        raise ValueError("\n".join(errors))
    return out


# ---------------------------------------------------------------------------------------------- all blocks

#: every typed block: config key -> settings class
BLOCKS: dict[str, type[Settings]] = {
    "calibration": CalibrationSettings,
    "selection": SelectionSettings,
    "rht_ft": RhtFtSettings,
    "lora_ft": LoraFtSettings,
    "throughput": ThroughputSettings,
    "eval": EvalSettings,
    "figures": FiguresSettings,
    "regime": RegimeSettings,
    "zeroshot_claims": ZeroshotClaimsSettings,
}
#: blocks a config may leave out (None in :class:`BlockSettings`); ``throughput`` left out means its defaults
OPTIONAL = ("selection", "rht_ft", "lora_ft", "regime", "zeroshot_claims")


@dataclasses.dataclass(frozen=True)
class BlockSettings:
    """Every typed block of one config (:func:`block_settings`); an optional block the config leaves out (or
    sets empty) is None."""

    calibration: CalibrationSettings
    selection: SelectionSettings | None
    rht_ft: RhtFtSettings | None
    lora_ft: LoraFtSettings | None
    throughput: ThroughputSettings
    eval: EvalSettings
    figures: FiguresSettings
    regime: RegimeSettings | None = None
    zeroshot_claims: ZeroshotClaimsSettings | None = None


def block_settings(config: Mapping[str, Any]) -> BlockSettings:
    """Every block of ``config`` as its settings object. Raises ``ValueError`` listing every problem of every
    block, one a line, each starting with its key path."""
    out, errors = {}, []
    for key, cls in BLOCKS.items():
        block = config.get(key)
        if key in OPTIONAL and not block:
            out[key] = None
            continue
        try:
            out[key] = cls.from_block(block, key)
        except ValueError as e:
            errors.append(str(e))
    if errors:
        raise ValueError("\n".join(errors))
    return BlockSettings(**out)


__all__ = ["BLOCKS", "BlockSettings", "CLAIM_RULES", "CLAIM_STATISTICS", "CalibrationSettings", "ClaimSettings",
           "EvalSettings", "FiguresSettings", "LoftqSettings", "LongIters",
           "LoraFtSettings", "LoraFtRow", "LoraTaskSettings", "LoraTasks", "ModelEntry", "PaperRow", "PplSettings",
           "RegimeModel", "RegimeSettings", "RegimeZeroshot", "RhtFtSettings",
           "RunContext", "SelectionSettings", "Settings", "ThroughputSettings", "ZeroshotClaimsSettings",
           "ZeroshotSettings", "block_settings",
           "declared_claims"]

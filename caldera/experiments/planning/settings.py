"""Typed, validated settings of the workflow config's blocks, built when the plan is made.

One frozen dataclass per block (``calibration``, ``selection``, ``rht_ft``, ``lora_ft``, ``throughput``, ``eval``,
``figures``, ``regime``; nested ones where a block nests; one per item of the ``claims`` list), each made by
:meth:`Settings.from_block` from the block's mapping:

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

This module imports nothing of the library but :mod:`caldera.experiments.planning.config_guard`'s messages.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping
from typing import Any, ClassVar

from caldera.experiments.planning.config_guard import DEFAULT_PROMPT, did_you_mean, non_finite_error
from caldera.pipeline.linears import SHORT_NAMES

# ---------------------------------------------------------------------------------------------- value checks
#: A check takes (value, key path) and returns the value to store, or raises ValueError naming the key path.
Check = Callable[[Any, str], Any]


def _fail(where: str, want: str, got: Any) -> None:
    raise ValueError(f"{where}: expected {want}, got {got!r}")


def integer(minimum: int | None = None) -> Check:
    def check(x: Any, where: str) -> int:
        if isinstance(x, bool) or not isinstance(x, int) or (minimum is not None and x < minimum):
            _fail(where, "an integer" + ("" if minimum is None else f" >= {minimum}"), x)
        return x

    return check


def number(minimum: float = 0.0, exclusive: bool = False, below: float | None = None) -> Check:
    def check(x: Any, where: str) -> float | int:
        if isinstance(x, float) and not math.isfinite(x):
            raise ValueError(non_finite_error(where, x))
        ok = not isinstance(x, bool) and isinstance(x, (int, float))
        ok = ok and (x > minimum if exclusive else x >= minimum) and (below is None or x < below)
        if not ok:
            rng = f"{'>' if exclusive else '>='} {minimum}" + ("" if below is None else f" and < {below}")
            _fail(where, f"a finite number {rng}", x)
        return x

    return check


def one_of(*values: Any) -> Check:
    def check(x: Any, where: str) -> Any:
        if isinstance(x, bool) and not any(isinstance(v, bool) for v in values) or x not in values:
            raise ValueError(f"{where}: expected one of {list(values)}, got {x!r}{did_you_mean(x, values)}")
        return x

    return check


def text(x: Any, where: str) -> str:
    if not isinstance(x, str) or not x:
        _fail(where, "a non-empty string", x)
    return x


def boolean(x: Any, where: str) -> bool:
    if not isinstance(x, bool):
        _fail(where, "true or false", x)
    return x


def mapping(x: Any, where: str) -> dict[str, Any]:
    if not isinstance(x, Mapping):
        _fail(where, "a mapping", x)
    return dict(x)


def optional(check: Check) -> Check:
    def opt(x: Any, where: str) -> Any:
        return None if x is None else check(x, where)

    return opt


def list_of(check: Check, min_items: int = 0, length: int | None = None, unique: bool = False) -> Check:
    def lst(x: Any, where: str) -> list[Any]:
        if not isinstance(x, (list, tuple)) or len(x) < min_items or (length is not None and len(x) != length):
            n = f"exactly {length}" if length is not None else f"at least {min_items}"
            _fail(where, f"a list of {n} items", x)
        out = [check(v, f"{where}[{i}]") for i, v in enumerate(x)]
        if unique and len({repr(v) for v in out}) != len(out):
            raise ValueError(f"{where}: {out} repeats an item")
        return out

    return lst


def mapping_of(check: Check, min_items: int = 0) -> Check:
    def mp(x: Any, where: str) -> dict[str, Any]:
        x = mapping(x, where)
        if len(x) < min_items:
            _fail(where, f"a mapping of at least {min_items} entries", x)
        return {str(k): check(v, f"{where}.{k}") for k, v in x.items()}

    return mp


def either(*checks: Check) -> Check:
    def any_of(x: Any, where: str) -> Any:
        errors = []
        for c in checks:
            try:
                return c(x, where)
            except ValueError as e:
                errors.append(str(e).split(": ", 1)[-1])
        raise ValueError(f"{where}: {' or '.join(dict.fromkeys(errors))}")

    return any_of


def setting(default: Any = dataclasses.MISSING, check: Check | None = None) -> Any:
    """A settings field: its default (none: a required key) and its check. A mutable default is copied."""
    meta = {"check": check}
    if isinstance(default, (list, dict)):
        return dataclasses.field(default_factory=lambda: type(default)(default), metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


# ---------------------------------------------------------------------------------------------- base class


@dataclasses.dataclass(frozen=True, kw_only=True)
class Settings:
    """Base of every block's settings: :meth:`from_block` (unknown keys refused, values checked, defaults
    filled), :meth:`as_block` (the effective block as a mapping)."""

    #: keys the block gave (an optional key given as null is kept by :meth:`as_block`; an absent one is not)
    given: frozenset[str] = dataclasses.field(default=frozenset(), repr=False, compare=False)

    BLOCK: ClassVar[str] = ""
    #: keys the block no longer accepts, each with why and what replaces it (refused with that message, not as
    #: an unknown key)
    REMOVED: ClassVar[dict[str, str]] = {}
    #: keys that change no job's result (a report reads them, or they say what is kept beside the result): left
    #: out of :meth:`measurement_block`, so changing one reruns no job
    NOT_MEASURED: ClassVar[tuple[str, ...]] = ()

    def measurement_block(self) -> dict[str, Any]:
        """:meth:`as_block` without :data:`NOT_MEASURED`: what a job computes its result with (its rerun trigger
        and what its result records)."""
        return {k: v for k, v in self.as_block().items() if k not in self.NOT_MEASURED}

    @classmethod
    def keys(cls) -> list[str]:
        return [f.name for f in dataclasses.fields(cls) if f.name != "given"]

    @classmethod
    def from_block(cls, block: Mapping[str, Any] | None, where: str | None = None):
        """The settings of ``block`` (None: an empty block) at key path ``where`` (default: the block's name).
        Raises ``ValueError`` listing every unknown or missing key and bad value, one a line, each starting
        with its key path."""
        where = where or cls.BLOCK
        if block is None:
            block = {}
        if isinstance(block, Settings):
            return block
        if not isinstance(block, Mapping):
            raise ValueError(f"{where}: expected a mapping, got {block!r}")
        known = cls.keys()
        errors = [f"{where}.{k}: {cls.REMOVED[k]}" if k in cls.REMOVED else
                  f"{where}.{k}: unknown key{did_you_mean(k, known)} (accepted: {', '.join(sorted(known))})"
                  for k in block if k not in known]
        fields = {f.name: f for f in dataclasses.fields(cls) if f.name != "given"}
        errors += [f"{where}.{k}: required key missing" for k, f in fields.items() if k not in block
                   and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]
        values = {}
        for k, v in block.items():
            if k not in fields:
                continue
            check = fields[k].metadata.get("check")
            try:
                values[k] = check(v, f"{where}.{k}") if check else v
            except ValueError as e:
                errors.append(str(e))
        if not errors:
            try:
                obj = cls(**values, given=frozenset(block))
                obj.validate(where)
                return obj
            except ValueError as e:
                errors.append(str(e))
        raise ValueError("\n".join(dict.fromkeys(errors)))

    def validate(self, where: str) -> None:
        """Checks across keys (a subclass's); raises ``ValueError`` naming the key."""

    def as_block(self) -> dict[str, Any]:
        """The block as a mapping with every default filled in; an optional key with no value (None) appears
        only when the block gave it. Nested settings become mappings too."""
        out = {}
        for f in dataclasses.fields(self):
            if f.name == "given":
                continue
            v = getattr(self, f.name)
            required = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
            if v is None and not required and f.name not in self.given:
                continue
            out[f.name] = _plain(v)
        return out


def _plain(v: Any) -> Any:
    if isinstance(v, Settings):
        return v.as_block()
    if isinstance(v, dict):
        return {k: _plain(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_plain(x) for x in v]
    return v


def nested(cls: type[Settings]) -> Check:
    """The check of a key whose value is a nested block."""
    return lambda x, where: cls.from_block(x, where)


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
class RegimeSettings(Settings):
    """``regime:`` (the stand-ins' compression regime: the Q bits at which QuIP#'s perplexity on held-out
    calibration text, relative to the dense model's, comes nearest the paper's own 2-bit QuIP# ratio;
    :mod:`caldera.experiments.jobs.regime` measures, :mod:`caldera.experiments.report.regime_report` selects).
    No rule of the default workflow reads it."""

    BLOCK: ClassVar[str] = "regime"

    models: dict[str, RegimeModel] = setting(check=mapping_of(nested(RegimeModel), min_items=1))
    q_bits: list[int] = setting([2, 3, 4], list_of(one_of(*REGIME_Q_BITS), min_items=1, unique=True))
    corpus: str = setting("wiki2", one_of(*REGIME_CORPORA))  # the paper's column the target ratio is read from
    seeds: list[int] = setting([0], list_of(integer(0), min_items=1, unique=True))  # QuIP#'s compression seeds
    #: held-out windows: the calibration sampler's rows after the Hessians' ``calibration.n_samples`` (same source,
    #: seed and ``calibration.seq_len``), so no window shares a document with the Hessians' sequences
    n_windows: int = setting(4, integer(1))

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
    def from_entry(cls, entry: Mapping[str, Any]) -> ModelEntry:
        """The entry of a schema-checked ``models.<m>`` mapping."""
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
                   models={m: ModelEntry.from_entry(entries[m]) for m in keep},
                   stand_ins=dict(config.get("stand_ins") or {}),
                   layers=None if layers is None else tuple(int(x) for x in layers),
                   layers_per_job=int(config.get("layers_per_job", 1)),
                   rank_multiple=int(config.get("rank_multiple", 8)),
                   calibration=None if cal is None else CalibrationSettings.from_block(cal),
                   local_data=config.get("local_data"))

    def labels(self) -> dict[str, str]:
        """Each model's display label (``models.<m>.label``)."""
        return {m: e.label for m, e in self.models.items()}


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
}
#: blocks a config may leave out (None in :class:`BlockSettings`); ``throughput`` left out means its defaults
OPTIONAL = ("selection", "rht_ft", "lora_ft", "regime")


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
           "RegimeModel", "RegimeSettings", "RhtFtSettings",
           "RunContext", "SelectionSettings", "Settings", "ThroughputSettings", "ZeroshotSettings", "block_settings",
           "declared_claims"]

"""The check framework of the typed settings (:mod:`caldera.experiments.planning.settings`): value checks that
refuse a wrong type or range naming the key path (:func:`integer`, :func:`number`, :func:`one_of`, ...), the
:func:`setting` field that carries a default and a check, and the :class:`Settings` base class, whose
:meth:`Settings.from_block` builds a block's frozen settings from its mapping:

* an unknown key is refused, naming its full key path and the closest accepted name (``throughput.run: unknown
  key; did you mean 'runs'?``), never dropped;
* a missing required key and a value of the wrong type or range are refused the same way, each naming its key;
* every problem of a block is listed at once, one a line.

:meth:`Settings.as_block` gives the block back as a mapping with the defaults filled in.

This module imports nothing of the library but :mod:`caldera.experiments.planning.config_guard`'s messages.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping
from typing import Any, ClassVar

from caldera.experiments.planning.config_guard import did_you_mean, non_finite_error

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

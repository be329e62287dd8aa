"""caldera.experiments.planning.settings_checks: the value checks, the ``setting`` field and the ``Settings`` base
class, on a toy block: every problem refused naming its key path, all of them at once; defaults filled in and
given back by ``as_block``."""

from __future__ import annotations

import dataclasses
import pickle
from typing import ClassVar

import pytest

from caldera.experiments.planning import settings_checks as C


@dataclasses.dataclass(frozen=True, kw_only=True)
class Inner(C.Settings):
    rank: int = C.setting(8, C.integer(1))


@dataclasses.dataclass(frozen=True, kw_only=True)
class Toy(C.Settings):
    BLOCK: ClassVar[str] = "toy"
    REMOVED: ClassVar[dict[str, str]] = {"old": "replaced by 'runs'"}
    NOT_MEASURED: ClassVar[tuple[str, ...]] = ("label",)

    runs: int = C.setting(check=C.integer(1))
    lr: float = C.setting(0.5, C.number(0.0, exclusive=True, below=1.0))
    mode: str = C.setting("fast", C.one_of("fast", "exact"))
    label: str | None = C.setting(None, C.optional(C.text))
    flags: list = C.setting([], C.list_of(C.boolean, unique=True))
    layers: dict = C.setting({}, C.mapping_of(C.list_of(C.integer(0), min_items=1)))
    inner: Inner = C.setting(Inner(), C.nested(Inner))
    size: object = C.setting("auto", C.either(C.one_of("auto"), C.integer(1)))

    def validate(self, where: str) -> None:
        if self.mode == "exact" and self.lr > 0.1:
            raise ValueError(f"{where}.lr: at most 0.1 with mode 'exact', got {self.lr}")


def test_defaults_are_filled_and_the_block_is_given_back():
    t = Toy.from_block({"runs": 3, "inner": {"rank": 2}, "layers": {"m": [0, 1]}})
    assert (t.runs, t.lr, t.mode, t.label, t.flags, t.inner, t.size) == (3, 0.5, "fast", None, [], Inner(rank=2),
                                                                         "auto")
    assert t.as_block() == {"runs": 3, "lr": 0.5, "mode": "fast", "flags": [], "layers": {"m": [0, 1]},
                            "inner": {"rank": 2}, "size": "auto"}
    assert Toy.from_block({"runs": 3, "label": None}).as_block()["label"] is None  # given as null: kept
    assert "label" not in Toy.from_block({"runs": 3, "label": "x"}).measurement_block()
    assert Toy.from_block(t) is t  # settings already built pass through
    assert pickle.loads(pickle.dumps(t)) == t
    with pytest.raises(dataclasses.FrozenInstanceError):
        t.runs = 4


def test_a_mutable_default_is_a_fresh_copy():
    a, b = Toy.from_block({"runs": 1}), Toy.from_block({"runs": 1})
    assert a.flags == [] and a.flags is not b.flags


@pytest.mark.parametrize("block, words", [
    ({"runs": 1, "rnus": 2}, "toy.rnus: unknown key; did you mean 'runs'?"),
    ({"runs": 1, "old": 2}, "toy.old: replaced by 'runs'"),
    ({}, "toy.runs: required key missing"),
    ({"runs": 0}, "toy.runs: expected an integer >= 1, got 0"),
    ({"runs": True}, "toy.runs: expected an integer >= 1, got True"),
    ({"runs": 1, "lr": 1.0}, "toy.lr: expected a finite number > 0.0 and < 1.0, got 1.0"),
    ({"runs": 1, "lr": float("nan")}, "toy.lr"),
    ({"runs": 1, "mode": "fats"}, "toy.mode: expected one of ['fast', 'exact'], got 'fats'"),
    ({"runs": 1, "label": ""}, "toy.label: expected a non-empty string"),
    ({"runs": 1, "flags": [True, True]}, "toy.flags: [True, True] repeats an item"),
    ({"runs": 1, "flags": [1]}, "toy.flags[0]: expected true or false, got 1"),
    ({"runs": 1, "layers": {"m": []}}, "toy.layers.m: expected a list of at least 1 items"),
    ({"runs": 1, "layers": [1]}, "toy.layers: expected a mapping"),
    ({"runs": 1, "inner": {"rank": 0}}, "toy.inner.rank: expected an integer >= 1, got 0"),
    ({"runs": 1, "inner": {"rnak": 2}}, "toy.inner.rnak: unknown key; did you mean 'rank'?"),
    ({"runs": 1, "size": "big"}, "toy.size: expected one of ['auto'], got 'big' or expected an integer >= 1"),
    ({"runs": 1, "mode": "exact"}, "toy.lr: at most 0.1 with mode 'exact', got 0.5"),
])
def test_every_problem_is_refused_naming_its_key_path(block, words):
    with pytest.raises(ValueError) as e:
        Toy.from_block(block)
    assert words in str(e.value)


def test_every_problem_of_a_block_is_listed_at_once_one_a_line():
    with pytest.raises(ValueError) as e:
        Toy.from_block({"rnus": 1, "lr": 2.0, "mode": "x"})
    lines = str(e.value).splitlines()
    assert [line.split(":")[0] for line in lines] == ["toy.rnus", "toy.runs", "toy.lr", "toy.mode"]
    with pytest.raises(ValueError, match=r"^where: expected a mapping, got \[1\]$"):
        Toy.from_block([1], "where")

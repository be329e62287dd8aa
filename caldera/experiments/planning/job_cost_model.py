"""What a workflow rule's cost model is: how a job of the rule is priced from the job profile
(:meth:`RuleCost.predict`) and how the profile's fixed parts and rates for it are fitted from one finished run
(:meth:`RuleCost.fit`, reading it as a :class:`FinishedRun`), with the pieces the rules' models share.

A job is modelled as

    fixed part (start-up, model load) + Σ rate × work,

with its work read from the config (:mod:`caldera.experiments.planning.job_plan`) and its fixed part and rates
from the job profile, a dict of three sections: ``models`` (per model, the fixed seconds of each kind of job and
the rates of its work), ``engine`` (the selection sweep and the figure traces) and ``constants`` (per rule priced
by a constant, the calibration run's median job). Every rule's model is listed in
:mod:`caldera.experiments.planning.rule_costs`.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from caldera.experiments.planning.job_plan import PlannedJob
from caldera.experiments.planning.rules import Rule

#: what a job that the calibration run did not have costs: the median of its small report jobs
SMALL_JOB = Rule.MAKE_TABLE


class MissingCalibration(KeyError):
    """The profile has no measurement for what a job needs (a model or a kind of job it never ran)."""


def calibrated(prof: dict[str, Any], key: str, model: str) -> Any:
    """``prof[key]``; ``MissingCalibration`` naming ``key`` and ``model`` when the profile has none."""
    if key not in prof:
        raise MissingCalibration(f"the profile has no {key!r} for model {model!r}")
    return prof[key]


def dense_fixed(prof: dict[str, Any], model: str) -> float:
    """The fixed part of a job that loads the dense model alone (Hessians, the dense reference)."""
    return prof["dense_fixed_s"] if "dense_fixed_s" in prof else calibrated(prof, "compress_fixed_s", model)


def median_of(xs: Iterable[float], default: float | None = None) -> float | None:
    """The median of ``xs`` with NaNs left out; ``default`` when none is left."""
    xs = [x for x in xs if x == x]
    return statistics.median(xs) if xs else default


def read_result(path: Path) -> dict[str, Any] | None:
    """The JSON value in ``path``; None when it cannot be read or parsed."""
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


@dataclass(frozen=True)
class FinishedRun:
    """A finished run of ``config`` as the fits read it: its results folder, the component costs the engine laws
    use, its benchmark records by ``(rule, job)`` and the config's planned jobs by the same key."""

    results: Path
    config: dict[str, Any]
    costs: dict[str, Any]
    jobs: dict[tuple[str, str], dict[str, Any]]
    planned: dict[tuple[str, str], PlannedJob]

    def by_model(self, rule: str) -> dict[str, list[tuple[PlannedJob, dict[str, Any]]]]:
        """The run's jobs of ``rule`` per model: (planned job, benchmark record) pairs."""
        out: dict[str, list] = {}
        for key, j in self.jobs.items():
            p = self.planned.get(key)
            if key[0] == rule and p is not None and p.model is not None:
                out.setdefault(p.model, []).append((p, j))
        return out

    def seconds(self, rule: str) -> list[float]:
        """Wall seconds of each of the run's jobs of ``rule``."""
        return [j["s"] for (r, _), j in self.jobs.items() if r == rule]

    def layer_walls(self, vid: str) -> tuple[int, float, float]:
        """(layers, summed per-layer wall seconds, summed per-matrix seconds) of a compressed variant's timing
        files."""
        n, layer_s, mat_s = 0, 0.0, 0.0
        for f in sorted((self.results / "compressed" / vid).glob("chunks/*/layer_*.timing.json")):
            t = read_result(f) or {}
            n += 1
            layer_s += float(t.get("wall_s", 0.0))
            mat_s += sum(float(m.get("wall_s", 0.0)) for m in (t.get("matrices") or {}).values())
        return n, layer_s, mat_s

    def eval_steps(self, vid: str) -> dict[str, float]:
        """Seconds of each evaluation step of ``vid`` (``ppl_<corpus>``, ``zeroshot``) from its timing files."""
        out = {}
        for f in (self.results / "eval" / vid).glob("*.timing.json"):
            t = read_result(f)
            if t and "wall_s" in t:
                out[f.name.split(".")[0]] = float(t["wall_s"])
        return out


class RuleCost:
    """The cost model of the jobs of ``rules``. ``predict``: a job's wall seconds from the profile
    (``MissingCalibration`` when the profile lacks what it needs); ``fit``: what a finished run says about the
    rules' jobs, as a partial profile (``{"models": {model: {key: value}}}``, ``{"engine": {...}}`` or
    ``{"constants": {...}}``), given the profile fitted so far."""

    rules: tuple[str, ...] = ()

    def predict(self, job: PlannedJob, config: dict[str, Any], profile: dict[str, Any],
                costs: dict[str, Any]) -> float:
        raise NotImplementedError

    def fit(self, run: FinishedRun, profile: dict[str, Any]) -> dict[str, Any]:
        return {}


class ConstantCost(RuleCost):
    """A job that reads small files and writes a report: the calibration run's median job of its rule, else the
    median small report job (:data:`SMALL_JOB`)."""

    def __init__(self, rule: str) -> None:
        self.rules = (rule,)

    def predict(self, job, config, profile, costs):
        consts = profile.get("constants", {})
        return float(consts.get(job.rule, consts.get(SMALL_JOB, 0.0)))

    def fit(self, run, profile):
        xs = run.seconds(self.rules[0])
        return {"constants": {self.rules[0]: statistics.median(xs)}} if xs else {}


class ModelCost(RuleCost):
    """A job of one model, priced from the model's section of the profile (:meth:`seconds`)."""

    def predict(self, job, config, profile, costs):
        prof = (profile.get("models") or {}).get(job.model)
        if prof is None:
            raise MissingCalibration(f"the profile has no model {job.model!r}")
        return self.seconds(job, config, prof, costs)

    def seconds(self, job: PlannedJob, config: dict[str, Any], prof: dict[str, Any], costs: dict[str, Any]) -> float:
        raise NotImplementedError

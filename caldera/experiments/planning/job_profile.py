"""The job profile of a machine type: the fixed seconds of each kind of job and the rates of its work, measured
from one finished run (:func:`calibrate`: its Snakemake benchmark files and the timing files its jobs write beside
their results), stored as ``benchmarks/results/jobs-cpu-<type>.json`` (:func:`machine_type`). On a type with no
profile of its own another type's is used, and the reports say so."""

from __future__ import annotations

import json
import math
import re
import time
from pathlib import Path
from typing import Any

from caldera.experiments.planning.job_plan import plan_jobs
from caldera.experiments.planning.rule_costs import FinishedRun, fit_profile
from caldera.experiments.planning.rules import STAGES

FORMAT = "caldera-job-costs/1"


def machine_type(cpuinfo: str | None = None) -> str:
    """This machine's type as job profiles name it: the CPU's vendor and family from ``/proc/cpuinfo``'s model name
    and the widest vector unit its flags announce (``amx``, ``avx512``, ``avx2`` or ``base``), e.g.
    ``intel-xeon-amx`` or ``amd-epyc-avx2``. The native kernels and oneDNN pick their code by that unit, so two
    machines of one type run a job at about the same speed; across types a stage differs by up to ×2.
    ``cpuinfo``: the file's text (read from the machine when None); without it, the OS and architecture."""
    import platform

    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text()
        except OSError:
            cpuinfo = ""
    model = re.search(r"^model name\s*:\s*(.+)$", cpuinfo, re.M)
    flags = re.search(r"^(?:flags|Features)\s*:\s*(.+)$", cpuinfo, re.M)
    if not model:
        return f"{platform.system()}-{platform.machine()}".lower() or "unknown"
    name = re.sub(r"\((?:r|tm)\)|\bprocessor\b|\bcpu\b|@.*$", " ", model.group(1), flags=re.I)
    family = "-".join(re.findall(r"[a-z0-9]+", name.lower())[:2]) or "cpu"
    have = set(flags.group(1).split()) if flags else set()
    unit = next((u for u, f in (("amx", "amx_tile"), ("avx512", "avx512f"), ("avx2", "avx2")) if f in have), "base")
    return f"{family}-{unit}"


def profile_file(device: str, machine: str | None = None) -> Path:
    """Where the job profile of ``device`` on a machine of type ``machine`` (:func:`machine_type`, this one's by
    default) lives, beside the component costs: ``jobs-cpu-<machine>.json``, ``jobs-<device>.json`` for a GPU."""
    from caldera.experiments.planning.cost import COSTS_DIR

    if device != "cpu":
        return COSTS_DIR / f"jobs-{device}.json"
    return COSTS_DIR / f"jobs-cpu-{machine or machine_type()}.json"


def load_profile(device: str, path: str | Path | None = None) -> dict[str, Any] | None:
    """The job profile (:func:`calibrate`) of ``device`` on this machine type, else one measured on another type
    (its ``machine`` then differs from :func:`machine_type`, and the reports say so), or None when none was
    measured; ``ValueError`` for a file of another format."""
    from caldera.experiments.planning.cost import COSTS_DIR

    if path:
        p = Path(path)
        if not p.is_file():
            raise ValueError(f"{p}: no such job profile")
    else:
        p = profile_file(device)
        if not p.is_file():
            others = sorted(COSTS_DIR.glob(f"jobs-{device}-*.json")) if device == "cpu" else []
            if not others:
                return None
            p = others[0]
    prof = json.loads(p.read_text())
    if prof.get("format") != FORMAT:
        raise ValueError(f"{p}: not a {FORMAT} file")
    return prof


def other_machine(profile: dict[str, Any]) -> str | None:
    """The machine type ``profile`` was measured on when it is not this one's (None when it is, or for a GPU
    profile, which names no type)."""
    theirs = profile.get("machine")
    return theirs if theirs and theirs != machine_type() else None


def covers(profile: dict[str, Any], config: dict[str, Any], costs: dict[str, Any]) -> str | None:
    """Why the profile cannot price ``config`` with ``costs`` (None when it can): it measured none of the
    config's models, or it was calibrated against other component costs (its engine scales are relative to
    them)."""
    if not any(m in (profile.get("models") or {}) for m in config["models"]):
        return f"the job profile ({profile.get('run')}) measured none of this config's models"
    if profile.get("costs_measured_at") != costs.get("measured_at"):
        return (f"the job profile was calibrated against the component costs of {profile.get('costs_measured_at')}, "
                f"not these ({costs.get('measured_at')}); recalibrate with --calibrate")
    return None


# ------------------------------------------------------------------------------------------ benchmarks


def read_benchmarks(bench_dir: str | Path) -> list[dict[str, Any]]:
    """One record per finished job from ``<bench_dir>/<rule>/<job>.tsv`` (the layout of the rules' ``benchmark:``):
    rule, job name, stage, wall seconds ``s``, CPU seconds, peak RSS (MB) and end time (the file's mtime)."""
    out = []
    for path in sorted(Path(bench_dir).glob("*/*.tsv")):
        lines = path.read_text().splitlines()
        if len(lines) < 2:
            continue
        row = dict(zip(lines[0].split("\t"), lines[1].split("\t")))
        try:
            s, rss = float(row["s"]), float(row.get("max_rss", "nan"))
        except (KeyError, ValueError):
            continue
        try:
            cpu = float(row.get("cpu_time", "nan"))
        except ValueError:
            cpu = math.nan
        rule = path.parent.name
        out.append({"stage": STAGES.get(rule, rule), "rule": rule, "job": path.stem, "s": s, "cpu_s": cpu,
                    "max_rss_mb": rss, "end": path.stat().st_mtime})
    return out


# ------------------------------------------------------------------------------------------ calibration


def finished_run(results_dir: str | Path, config: dict[str, Any], costs: dict[str, Any]) -> FinishedRun:
    """The finished run of ``config`` in ``results_dir`` (``results/<name>``) as the fits read it: its benchmark
    records (:func:`read_benchmarks`) and the config's planned jobs, both by ``(rule, job)``. ``ValueError`` when
    the run has no benchmark files."""
    results = Path(results_dir)
    bench = read_benchmarks(results / "benchmarks")
    if not bench:
        raise ValueError(f"{results}/benchmarks holds no benchmark files: calibrate on a finished run")
    return FinishedRun(results=results, config=config, costs=costs, jobs={(j["rule"], j["job"]): j for j in bench},
                       planned={(p.rule, p.name): p for p in plan_jobs(config)})


def calibrate(results_dir: str | Path, config: dict[str, Any], costs: dict[str, Any], *,
              source: str = "") -> dict[str, Any]:
    """The machine profile from one finished run of ``config`` in ``results_dir`` (:func:`finished_run`): per
    model, the fixed seconds of each kind of job and the rates of its work; per constant rule the median job; each
    fitted by its rule's cost model (:func:`caldera.experiments.planning.rule_costs.fit_profile`). ``costs``: the
    component costs the engine laws use (their relative scale is what is calibrated). ``ValueError`` when the run
    has no benchmark files."""
    results = Path(results_dir)
    fitted = fit_profile(finished_run(results, config, costs))
    return {"format": FORMAT, "source": source or str(results), "run": config.get("name"),
            "calibrated_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "machine": machine_type() if costs.get("device", "cpu") == "cpu" else None,
            "costs_measured_at": costs.get("measured_at"), "models": fitted["models"], "engine": fitted["engine"],
            "constants": fitted["constants"]}

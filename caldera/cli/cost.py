"""``caldera cost``: every job's predicted time (and memory) of a workflow config; ``--check`` against a run."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from caldera.cli.common import CLIError, _example, _print_json, _report, guard_output, is_records_file, require_path


def cmd_cost(args: argparse.Namespace) -> int:
    from caldera.experiments.planning.cost import load_costs, load_workflow_config
    from caldera.experiments.planning.slurm import slurm_resources, slurm_yaml

    _check_paths(args)
    config = load_workflow_config(args.configfile)
    device, why = _device(args, config)
    if args.slurm:  # memory needs no measured timings: without them the block has no runtime, and says so
        try:
            costs = load_costs(device, args.costs)
        except FileNotFoundError as e:
            print(f"# {e}\n# runtime left out: only mem_mb and gpu below", file=sys.stderr)
            costs = None
        resources = slurm_resources(config, costs, device=device)
        if args.json:
            _print_json({"device": device, "device_reason": why, "set-resources": resources})
            return 0
        print(f"# caldera cost --configfile {args.configfile} --device {device} --slurm\nset-resources:")
        print(slurm_yaml(resources))
        return 0
    costs = load_costs(device, args.costs)
    from caldera.experiments.planning import job_costs, job_profile, job_report

    if args.calibrate:
        from caldera.atomic import write_json

        out = args.profile or str(job_profile.profile_file(device))
        guard_output(out, option="--profile", kind=f"job profile ({job_profile.FORMAT})",
                     same_kind=is_records_file(format=job_profile.FORMAT),
                     inputs={"--configfile": args.configfile, "--costs file": args.costs,
                             "--calibrate run": args.calibrate}, resumable=True)
        try:
            profile = job_profile.calibrate(args.calibrate, config, costs, source=args.calibrate)
        except ValueError as e:
            raise CLIError(f"--calibrate {args.calibrate}: {e}") from None
        write_json(out, profile)
        return _report(args, {"profile": out, "run": profile["run"], "models": sorted(profile["models"])},
                       [f"wrote {out}: the job costs of run `{profile['run']}` ({', '.join(profile['models'])})"])
    profile = job_profile.load_profile(device, args.profile)
    why_not = job_profile.covers(profile, config, costs) if profile is not None else None
    if why_not:
        print(f"# {why_not}: the engine's component laws only", file=sys.stderr)
        profile = None
    if args.check:
        return _check(args, config, costs, profile)
    if profile is not None:
        if args.json:
            pred = job_costs.predict(config, profile, costs)
            _print_json({"config": config.get("name"), "device": device, "device_reason": why,
                         "priced_by": "job profile", "profile_run": profile.get("run"), "jobs": pred,
                         "total_s": sum(p["s"] for p in pred if p["s"] is not None)})
            return 0
        print(job_report.report(config, profile, costs))
        return 0
    return _laws_report(args, config, costs, device, why, why_not)


def _check_paths(args: argparse.Namespace) -> None:
    """Every input path of ``caldera cost`` exists (:func:`require_path`), before anything is read."""
    require_path(args.configfile, "--configfile", "file", "a workflow config, e.g. config/paper.yaml")
    if args.costs:
        require_path(args.costs, "--costs", "file", "a costs JSON of benchmarks/measure_costs.py, or leave --costs "
                     "out for benchmarks/results/costs-<device>.json")
    if args.profile and not args.calibrate:  # with --calibrate, --profile is the file written
        require_path(args.profile, "--profile", "file", "a job profile JSON (written by --calibrate)")
    if args.calibrate:
        require_path(args.calibrate, "--calibrate", "folder", "a finished run's results folder, e.g. results/mini")
    if args.check:
        require_path(args.check, "--check", "path", "a run's results folder or its timings.json")


def _device(args: argparse.Namespace, config: dict[str, Any]) -> tuple[str, str]:
    """``(device, why)``: ``--device`` when it names one; for ``auto`` the ``--costs`` file's device when one is
    given, else the config's (:func:`caldera.experiments.planning.cost.config_device`)."""
    import json
    from pathlib import Path

    from caldera.experiments.planning.cost import config_device

    if args.device != "auto":
        return args.device, f"--device {args.device}"
    if args.costs:
        try:
            dev = json.loads(Path(args.costs).read_text()).get("device")
        except (OSError, ValueError, AttributeError):
            dev = None
        if isinstance(dev, str) and dev:
            return ("cuda" if dev.startswith("cuda") else "cpu"), f"the device the --costs file was measured on ({dev})"
    return config_device(config)


def _check(args: argparse.Namespace, config: dict[str, Any], costs: dict[str, Any], profile: Any) -> int:
    """``--check RUN``: the prediction against a run, job by job with a profile, else per rule by the laws."""
    from caldera.experiments.planning import job_check, job_costs

    try:
        measured = job_check.measured_jobs(args.check)
    except ValueError as e:
        raise CLIError(f"--check {args.check}: {e}; pass a run's results folder or its timings.json") from None
    if profile is None:  # the engine's component laws, compared per rule
        from caldera.experiments.planning.cost import check, check_report

        rules: dict = {}
        for m in measured:
            r = rules.setdefault(m["rule"], {"jobs": 0, "job_s": 0.0})
            r["jobs"] += m.get("jobs", 1)
            r["job_s"] += m["s"]
        timings = {"rules": rules, "job_s": sum(r["job_s"] for r in rules.values())}
        res = check(config, costs, timings)
        if args.json:
            _print_json(res)
        else:
            print(check_report(res))
        return 0
    res = job_check.check_runs(job_costs.predict(config, profile, costs), measured)
    if args.json:
        _print_json(res)
    else:
        print(job_check.check_report(res))
    return 0


def _laws_report(args: argparse.Namespace, config: dict[str, Any], costs: dict[str, Any], device: str, why: str,
                 why_not: str | None) -> int:
    """The prediction by the engine's component laws (no job profile prices the config): every model's rules,
    the grand total, and a note that the prices are extrapolated, from what."""
    from caldera.experiments.planning import job_profile
    from caldera.experiments.planning.cost import coverage, estimate, extrapolation_note, report

    where = args.profile or job_profile.profile_file(device)
    note = extrapolation_note(costs, where) if not why_not else None
    other = "cpu" if device == "cuda" else "cuda"
    chosen = f"Priced on {device}: {why}" + (f"; --device {other} prices it on {other}." if args.device == "auto"
                                             else ".")
    notes = [chosen, *([note] if note else [])]
    if args.json:
        est = estimate(config, costs)
        _print_json({"config": config.get("name"), "device": device, "device_reason": why,
                     "priced_by": "component laws", "extrapolated": True, "note": note or why_not,
                     "costs": {k: costs.get(k) for k in ("device", "device_name", "measured_at", "command",
                                                         "threads", "torch")},
                     "models": est, "coverage": {m: coverage({**config, "models": {m: config["models"][m]}}, costs)
                                                 for m in config["models"]},
                     "total_hours": sum(e["hours"] for e in est.values())})
        return 0
    print(report(config, costs, notes))
    return 0


def add_parser(sub: Any, raw: Any) -> None:
    """This command's parser (``caldera COMMAND --help``)."""
    p = sub.add_parser(
        "cost",
        help="predicted time of every job of a workflow config before it runs; --check against a run",
        description="Every job's predicted time: on this machine type from the job profile "
        "(benchmarks/results/jobs-<device>.json: fixed parts and rates measured on a finished run, "
        "caldera.experiments.planning.job_costs), otherwise per rule from the engine's component costs measured on the "
        "device (benchmarks/results/costs-<device>.json, benchmarks/measure_costs.py) and their scaling laws, with "
        "peak memory and device-hours per model (caldera.experiments.planning.cost).",
        formatter_class=raw,
        epilog=_example("caldera cost --configfile config/paper.yaml  # a GPU cluster's config: priced on cuda",
                        "caldera cost --configfile config/mini.yaml --check results/mini"),
    )
    p.add_argument("--configfile", required=True, help="workflow config, e.g. config/paper.yaml")
    p.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto",
                   help="whose measured costs price the jobs; auto: the --costs file's device when one is given, "
                   "else the config's: cuda for a config whose device is cuda, or auto with models from the hub "
                   "(paper scale, a GPU cluster), cpu otherwise")
    p.add_argument("--costs", help="a costs JSON (default: benchmarks/results/costs-<device>.json)")
    p.add_argument("--check", metavar="RUN", help="compare the prediction with a run: its results folder (per job) "
                   "or its timings.json (per stage and rule), and say where the model is off by more than 30 %% "
                   "(default: no comparison)")
    p.add_argument("--profile", help="a job profile JSON (default: benchmarks/results/jobs-<device>.json, for a CPU "
                   "jobs-cpu-<machine type>.json; with --calibrate: where to write it)")
    p.add_argument("--calibrate", metavar="RESULTS", help="measure the job profile of this machine from a finished "
                   "run of --configfile (its results folder, e.g. results/mini) and write it (default: none)")
    p.add_argument("--slurm", action="store_true",
                   help="print the SLURM profile's set-resources (runtime, mem_mb, gpu) from the predictions")
    p.add_argument("--json", action="store_true", help="print the records (per model and rule, or per job with a "
                   "job profile; with --check the comparison, with --slurm the resources) as JSON")
    p.set_defaults(func=cmd_cost)

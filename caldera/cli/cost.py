"""``caldera cost``: every job's predicted time (and memory) of a workflow config; ``--check`` against a run."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from caldera.cli.common import CLIError, _example, guard_output, is_records_file


def cmd_cost(args: argparse.Namespace) -> int:
    from caldera.experiments.planning.cost import load_costs, load_workflow_config, report
    from caldera.experiments.planning.slurm import slurm_resources, slurm_yaml

    config = load_workflow_config(args.configfile)
    if args.slurm:  # memory needs no measured timings: without them the block has no runtime, and says so
        try:
            costs = load_costs(args.device, args.costs)
        except FileNotFoundError as e:
            print(f"# {e}\n# runtime left out: only mem_mb and gpu below", file=sys.stderr)
            costs = None
        print(f"# caldera cost --configfile {args.configfile} --device {args.device} --slurm\nset-resources:")
        print(slurm_yaml(slurm_resources(config, costs, device=args.device)))
        return 0
    costs = load_costs(args.device, args.costs)
    from caldera.experiments.planning import job_costs, job_profile

    if args.calibrate:
        from caldera.atomic import write_json

        out = args.profile or str(job_profile.profile_file(args.device))
        guard_output(out, option="--profile", kind=f"job profile ({job_profile.FORMAT})",
                     same_kind=is_records_file(format=job_profile.FORMAT),
                     inputs={"--configfile": args.configfile, "--costs file": args.costs,
                             "--calibrate run": args.calibrate}, resumable=True)
        try:
            profile = job_profile.calibrate(args.calibrate, config, costs, source=args.calibrate)
        except ValueError as e:
            raise CLIError(f"--calibrate {args.calibrate}: {e}") from None
        write_json(out, profile)
        print(f"wrote {out}: the job costs of run `{profile['run']}` ({', '.join(profile['models'])})")
        return 0
    profile = job_profile.load_profile(args.device, args.profile)
    why = job_profile.covers(profile, config, costs) if profile is not None else None
    if why:
        print(f"# {why}: the engine's component laws only", file=sys.stderr)
        profile = None
    if args.check:
        try:
            measured = job_costs.measured_jobs(args.check)
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
            print(check_report(check(config, costs, timings)))
            return 0
        print(job_costs.check_report(job_costs.check_runs(job_costs.predict(config, profile, costs), measured)))
        return 0
    if profile is not None:
        print(job_costs.report(config, profile, costs))
        return 0
    print(report(config, costs))
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
        formatter_class=raw, epilog=_example("caldera cost --configfile config/paper.yaml --device cpu"),
    )
    p.add_argument("--configfile", required=True, help="workflow config, e.g. config/paper.yaml")
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu", help="whose measured costs to use")
    p.add_argument("--costs", help="a costs JSON instead of benchmarks/results/costs-<device>.json")
    p.add_argument("--check", metavar="RUN", help="compare the prediction with a run: its results folder (per job) "
                   "or its timings.json (per stage and rule), and say where the model is off by more than 30 %%")
    p.add_argument("--profile", help="a job profile JSON instead of benchmarks/results/jobs-<device>.json (with "
                   "--calibrate: where to write it)")
    p.add_argument("--calibrate", metavar="RESULTS", help="measure the job profile of this machine from a finished "
                   "run of --configfile (its results folder, e.g. results/mini) and write it")
    p.add_argument("--slurm", action="store_true",
                   help="print the SLURM profile's set-resources (runtime, mem_mb, gpu) from the predictions")
    p.set_defaults(func=cmd_cost)

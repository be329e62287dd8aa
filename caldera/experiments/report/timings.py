"""The run's time per workflow stage and per rule (``timings.json``, ``timings.md``), from the Snakemake benchmark
records of its jobs (:func:`caldera.experiments.planning.job_profile.read_benchmarks`)."""

from __future__ import annotations

from typing import Any

from caldera.atomic import write_atomic, write_json


def step_timings(jobs: list[dict[str, Any]], run: str, out_json: str, out_md: str | None = None,
                 from_record: int = 0) -> dict[str, Any]:
    """Per workflow stage: number of jobs, summed job seconds, the stage's span on the wall clock (first job
    start to last job end) and the peak memory of a job; plus the whole run's span.

    ``jobs``: one record per finished job, ``{"stage", "s" (wall seconds), "max_rss_mb", "end" (epoch s)}`` and
    ``"rule"`` / ``"job"`` (:func:`caldera.experiments.planning.job_profile.read_benchmarks`; named jobs are listed
    in the JSON too); ``run``: the run's name, for the report's title; ``from_record``: how many of ``jobs`` ran
    in earlier sittings and come from the run's record (:func:`caldera.experiments.jobs.record.run_timings`).
    """
    stages: dict[str, dict[str, Any]] = {}
    for j in jobs:
        st = stages.setdefault(j["stage"],
                               {"jobs": 0, "job_s": 0.0, "start": float("inf"), "end": 0.0, "max_rss_mb": 0.0})
        st["jobs"] += 1
        st["job_s"] += j["s"]
        st["start"] = min(st["start"], j["end"] - j["s"])
        st["end"] = max(st["end"], j["end"])
        if j["max_rss_mb"] == j["max_rss_mb"]:
            st["max_rss_mb"] = max(st["max_rss_mb"], j["max_rss_mb"])
    t0 = min((st["start"] for st in stages.values()), default=0.0)
    for st in stages.values():
        st["span_s"] = st["end"] - st["start"]
        st["from_s"], st["to_s"] = st.pop("start") - t0, st.pop("end") - t0
    total = max((st["to_s"] for st in stages.values()), default=0.0)
    rules: dict[str, dict[str, Any]] = {}
    for j in jobs:
        if "rule" in j:
            r = rules.setdefault(j["rule"], {"stage": j["stage"], "jobs": 0, "job_s": 0.0, "max_s": 0.0})
            r["jobs"] += 1
            r["job_s"] += j["s"]
            r["max_s"] = max(r["max_s"], j["s"])
    res = {"stages": stages, "span_s": total, "job_s": sum(st["job_s"] for st in stages.values()),
           "n_jobs": len(jobs), **({"rules": rules} if rules else {}),
           **({"from_record": from_record} if from_record else {})}
    if jobs and all("job" in j and "rule" in j for j in jobs):  # per job: what `caldera cost --check` compares
        res["jobs"] = [{"rule": j["rule"], "job": j["job"], "s": j["s"]}
                       for j in sorted(jobs, key=lambda j: (j["rule"], j["job"]))]
    write_json(out_json, res)
    if out_md is not None:
        lines = [f"# Run time per stage ({run})", "",
                 "From the Snakemake benchmark files of this run (all jobs; a resumed run counts only the jobs "
                 "it ran). *Span*: first job start to last job end of the stage, on the wall clock (stages "
                 "overlap: jobs run side by side). *Job time*: the stage's job durations summed.", "",
                 "| stage | jobs | span (min) | from → to (min) | job time (min) | peak RSS of a job (GB) |",
                 "|---|---|---|---|---|---|"]
        for name, st in sorted(stages.items(), key=lambda kv: kv[1]["from_s"]):
            lines.append(f"| {name} | {st['jobs']} | {st['span_s'] / 60:.1f} | {st['from_s'] / 60:.1f} → "
                         f"{st['to_s'] / 60:.1f} | {st['job_s'] / 60:.1f} | {st['max_rss_mb'] / 1024:.2f} |")
        lines += ["", f"Whole run (first job start → last job end before this report): {total / 60:.1f} min; "
                  f"{len(jobs)} jobs, {res['job_s'] / 60:.1f} min of job time."]
        if from_record:
            lines += ["", f"{from_record} of these jobs ran in earlier sittings: their times are the ones measured "
                      "then, kept in the run's record (config `record`). The spans then reach across the sittings "
                      "and the time between them; the job times do not."]
        if rules:
            lines += ["", "Per rule (largest job time first):", "",
                      "| rule | stage | jobs | job time (min) | mean per job (s) | longest job (s) |",
                      "|---|---|---|---|---|---|"]
            for name, r in sorted(rules.items(), key=lambda kv: -kv[1]["job_s"]):
                lines.append(f"| {name} | {r['stage']} | {r['jobs']} | {r['job_s'] / 60:.1f} | "
                             f"{r['job_s'] / r['jobs']:.0f} | {r['max_s']:.0f} |")
        write_atomic(out_md, "\n".join(lines) + "\n")
    return res

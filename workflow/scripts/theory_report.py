"""Rule theory_report: the theory checks (their own process, as the CLI runs them)."""

from caldera_job import job

sm = snakemake  # noqa: F821  (injected by Snakemake)
with job(sm):
    import subprocess
    import sys

    cmd = [sys.executable, "-m", "theory.report", "--out", sm.output.md, "--profile", sm.params.profile]
    subprocess.run(cmd, check=True, stdout=sys.stdout, stderr=sys.stderr)

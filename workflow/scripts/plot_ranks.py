"""Rule plot_ranks: the ranks chosen per matrix (heat maps) from the allocation files."""

from caldera_job import job

sm = snakemake  # noqa: F821  (injected by Snakemake)
with job(sm):
    from caldera.experiments.report.plots import plot_rank_allocation
    from caldera.atomic import read_json

    allocations = {path.rsplit("/", 2)[-2]: read_json(path) for path in sm.input}
    plot_rank_allocation(allocations, sm.output.png, sm.output.pdf, model_labels=sm.params.run.labels())

"""Rule plot_figure: one figure's PNG and PDF from its JSON."""

from caldera_job import job

sm = snakemake  # noqa: F821  (injected by Snakemake)
with job(sm):
    from caldera.experiments.report.plots import PLOTS
    from caldera.atomic import read_json

    PLOTS[int(sm.wildcards.n)](read_json(sm.input[0]), sm.output.png, sm.output.pdf,
                               model_labels=sm.params.run.labels(), paper_model=sm.params.settings.paper_model)

"""Figures 3 and 4 make their point: one legend serving every panel and kept off the data,
integer iteration ticks, titles naming the model and the paper's rank. Plotted from synthetic JSON."""

import pytest

pytest.importorskip("matplotlib")

from caldera.experiments.report import plots as F  # noqa: E402

METHODS = ["16bit-factors", "4bit-factors", "quip#-lr"]
FIG3 = {"model": "smollm2", "layer": 25, "outer_iters": 4,
        "curves": [{"matrix": m, "paper_rank": pr, "rank": pr // 8, "method": meth,
                    "errors": [0.3 / (i + 1) + 0.01 * k for i in range(4)]}
                   for m in ("k_proj", "up_proj") for pr in (64, 128) for k, meth in enumerate(METHODS)]}
FIG4 = {"model": "smollm2", "layer": 25,
        "curves": [{"matrix": m, "paper_rank": pr, "rank": pr // 8, "errors": [0.3 + 0.01 * i for i in range(11)]}
                   for m in ("k_proj", "up_proj") for pr in (64, 128, 256)]}
TITLES = {"model_labels": {"smollm2": "SmolLM2-135M (test)"}, "paper_model": "llama-2-7b"}


@pytest.fixture
def drawn(monkeypatch):
    """The matplotlib figure each plot function saves."""
    got = []
    monkeypatch.setattr(F, "save_figure", lambda fig, png, pdf: got.append(fig))
    return got


def _ticks_are_integers(ax):
    lo, hi = ax.get_xlim()
    ticks = [t for t in ax.get_xticks() if lo <= t <= hi]
    return ticks and all(float(t).is_integer() for t in ticks)


def test_figure3_one_legend_for_all_panels_integer_ticks_and_titles(drawn):
    F.plot_figure3(FIG3, "x.png", "x.pdf", **TITLES)
    fig = drawn[0]
    axes = fig.get_axes()
    assert len(axes) == 4 and all(ax.get_legend() is None for ax in axes)  # no per-panel legend on the data
    assert len(fig.legends) == 1
    assert [t.get_text() for t in fig.legends[0].get_texts()] == METHODS
    for ax in axes:  # the same colour for a method in every panel
        assert {ln.get_label(): ln.get_color() for ln in ax.get_lines()} == {
            ln.get_label(): ln.get_color() for ln in axes[0].get_lines()}
        assert _ticks_are_integers(ax)
    assert axes[0].get_title() == "k_proj: paper rank 64 → k = 8"
    assert axes[3].get_title() == "up_proj: paper rank 128 → k = 16"
    sup = fig._suptitle.get_text()
    assert "SmolLM2-135M (test), layer 25, standing in for LLaMa-2 7B" in sup


def test_figure4_legend_off_the_data_and_titled(drawn):
    F.plot_figure4(FIG4, "x.png", "x.pdf", **TITLES)
    fig = drawn[0]
    axes = fig.get_axes()
    assert all(ax.get_legend() is None for ax in axes) and len(fig.legends) == 1
    assert [t.get_text() for t in fig.legends[0].get_texts()] == [
        "paper rank 64 → k = 8", "paper rank 128 → k = 16", "paper rank 256 → k = 32"]
    fig.canvas.draw()  # the legend lies below every panel (off the data)
    leg = fig.legends[0].get_window_extent()
    assert all(leg.y1 <= ax.get_window_extent().y0 for ax in axes)
    assert all(_ticks_are_integers(ax) for ax in axes)
    assert "SmolLM2-135M (test)" in fig._suptitle.get_text() and "LLaMa-2 7B" in fig._suptitle.get_text()


def test_figures_plot_without_a_config(tmp_path):
    F.plot_figure3(FIG3, str(tmp_path / "3.png"), str(tmp_path / "3.pdf"))
    F.plot_figure4(FIG4, str(tmp_path / "4.png"), str(tmp_path / "4.pdf"))
    assert (tmp_path / "3.png").stat().st_size > 0 and (tmp_path / "4.pdf").stat().st_size > 0

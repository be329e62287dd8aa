"""App. D complexity (``app:caldera_computational_complexity``): the exponent fit used by the benchmark, and a
smoke test of the report command (the exponents themselves are measured in benchmarks/, not asserted)."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from theory import report
from theory.common import loglog_slope


@given(st.floats(0.5, 4.0), st.floats(1e-6, 1e3))
def test_loglog_slope_recovers_power_laws(p, c):
    sizes = [32.0, 64.0, 128.0, 256.0]
    assert abs(loglog_slope(sizes, [c * s**p for s in sizes]) - p) < 1e-9


def test_loglog_slope_detects_a_different_exponent():
    sizes = [32.0, 64.0, 128.0, 256.0]
    assert abs(loglog_slope(sizes, [s**3 for s in sizes]) - 2.0) > 0.9


def test_report_writes_markdown_json_and_figure(tmp_path):
    out = tmp_path / "theory.md"
    assert report.main(["--out", str(out), "--only", "2", "11"]) == 0
    md = out.read_text()
    assert "| 11 |" in md and "subapp:computation_of_per_parameter_bit_budget" in md
    data = json.loads(out.with_suffix(".json").read_text())
    assert [it["number"] for it in data["items"]] == [2, 11]
    assert (tmp_path / "theory_mp.png").stat().st_size > 10_000
    assert not list(tmp_path.glob(".*.tmp"))


def test_mp_figure_axes_are_labelled(monkeypatch):
    """Both panels of theory_mp.png say what their axes are (both axes labelled)."""
    import matplotlib.figure

    seen = []
    save = matplotlib.figure.Figure.savefig

    def spy(self, *a, **k):
        seen.append(self)
        return save(self, *a, **k)

    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", spy)
    assert report.mp_figure()[:8] == b"\x89PNG\r\n\x1a\n"
    axes = seen[0].get_axes()
    assert len(axes) == 2 and all(ax.get_ylabel().startswith("density") and ax.get_xlabel() == "eigenvalue"
                                  for ax in axes)

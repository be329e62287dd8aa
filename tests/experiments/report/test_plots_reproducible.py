"""Figure files are byte-identical across reruns: no creation date in the PDF."""

import time

import pytest

pytest.importorskip("matplotlib")

from caldera.experiments.report.plots import plot_figure1  # noqa: E402

DATA = {"label": "tiny", "spectra": {"q_proj": {"mean": [1.0, 0.5, 0.1, 0.01]}, "k_proj": {"mean": [1.0, 0.2, 0.02]}}}


def test_saving_a_figure_twice_gives_identical_bytes(tmp_path):
    plot_figure1(DATA, str(tmp_path / "a.png"), str(tmp_path / "a.pdf"))
    time.sleep(1.1)  # a PDF CreationDate has one-second resolution: the second file is written a second later
    plot_figure1(DATA, str(tmp_path / "b.png"), str(tmp_path / "b.pdf"))
    pdf = (tmp_path / "a.pdf").read_bytes()
    assert b"CreationDate" not in pdf
    assert pdf == (tmp_path / "b.pdf").read_bytes()
    assert (tmp_path / "a.png").read_bytes() == (tmp_path / "b.png").read_bytes()

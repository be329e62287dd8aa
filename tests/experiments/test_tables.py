"""Table assembly helpers (the full tables are built by the smoke workflow test)."""

from caldera.experiments.tables import _bits_label


def test_bits_label_prints_like_the_paper():
    assert [_bits_label(b) for b in (4.0, 16.0, "4.0", 4, 3.5, None, "", "—")] == [4, 16, 4, 4, 3.5, "—", "—", "—"]

"""``caldera.config``, the import path of ``CalderaConfig`` and its presets, is :mod:`caldera.algorithm.config`."""

from tests.helpers import missing_reexports


def test_every_public_name_imports_from_the_documented_path():
    assert missing_reexports("caldera.config", "caldera.algorithm.config") == []

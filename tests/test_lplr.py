"""``caldera.lplr``, the import path the theory report names for LPLRFactorize, is :mod:`caldera.algorithm.lplr`."""

from tests.helpers import missing_reexports


def test_every_public_name_imports_from_the_documented_path():
    assert missing_reexports("caldera.lplr", "caldera.algorithm.lplr") == []

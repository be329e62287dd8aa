"""``caldera.decomposition``, the import path of the method contract (``docs/methods.md``), is
:mod:`caldera.algorithm.decomposition`."""

from tests.helpers import missing_reexports


def test_every_public_name_imports_from_the_documented_path():
    from caldera.algorithm import decomposition
    from caldera.decomposition import Decomposition, HessianContext, caldera_decompose

    assert (Decomposition, HessianContext) == (decomposition.Decomposition, decomposition.HessianContext)
    assert caldera_decompose is decomposition.caldera_decompose
    assert missing_reexports("caldera.decomposition", "caldera.algorithm.decomposition") == []

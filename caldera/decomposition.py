"""Every public name of :mod:`caldera.algorithm.decomposition`, importable from ``caldera.decomposition`` too."""
from caldera.algorithm.decomposition import *  # noqa: F403

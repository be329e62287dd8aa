"""Every public name of :mod:`caldera.algorithm.lplr`, importable from ``caldera.lplr`` too."""
from caldera.algorithm.lplr import *  # noqa: F403

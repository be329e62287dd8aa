"""Every public name of :mod:`caldera.algorithm.config`, importable from ``caldera.config`` too."""
from caldera.algorithm.config import *  # noqa: F403

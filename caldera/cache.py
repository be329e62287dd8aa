"""The folder caldera caches into: downloaded assets (:mod:`caldera.pipeline.assets`) and the zero-shot task
files. (The C kernels are built at install time into the package, not cached here: :mod:`caldera.kernels.native`.)"""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir() -> Path:
    """Root of the cache: ``$CALDERA_CACHE`` if set, else ``~/.cache/caldera``."""
    env = os.environ.get("CALDERA_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "caldera"

"""Model sources: a Hugging Face hub id or a local folder, told apart without touching the network."""

from __future__ import annotations

import os
import re
from pathlib import Path

#: A Hugging Face hub id: ``name`` or ``org/name`` (letters, digits, ``._-``); anything else is a local path.
HUB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)?$")


def looks_like_path(name: str) -> bool:
    """True when ``name`` cannot be a hub id (starts with ``.``, ``~`` or a separator, has two separators, fails
    :data:`HUB_ID`, or its parent folder exists here): a missing folder of that name is a typo, not a hub id."""
    if name.startswith((".", "~", os.sep)) or name.count("/") > 1 or (os.sep != "/" and os.sep in name):
        return True
    parent = Path(name).parent
    return not HUB_ID.match(name) or ".." in name or (str(parent) != "." and parent.is_dir())

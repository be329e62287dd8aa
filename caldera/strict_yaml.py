"""A YAML loader that refuses duplicate keys: every config file of the suite is read with :func:`load_yaml_strict`
(``yaml.safe_load`` keeps the last of two equal keys, silently)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml


class _StrictLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that raises on a key given twice in one mapping (safe_load keeps the last one). Keys a
    merge (``<<: *base``) brings in may be overridden by the mapping's own keys, as YAML defines."""


MERGE_TAG = "tag:yaml.org,2002:merge"


def _construct_mapping(loader: _StrictLoader, node: yaml.MappingNode, deep: bool = False) -> dict:
    own = [k for k, _ in node.value if k.tag != MERGE_TAG]
    loader.flatten_mapping(node)
    seen: dict[Any, Any] = {}
    for key_node in own:
        key = loader.construct_object(key_node, deep=deep)
        if key in seen:
            first = seen[key]
            raise yaml.constructor.ConstructorError(
                None, None,
                f"duplicate key {key!r} (first at line {first.line + 1}); a YAML mapping takes each key once, "
                "and the last one would silently win: remove or merge one of them",
                key_node.start_mark,
            )  # fmt: skip
        seen[key] = key_node.start_mark
    return loader.construct_mapping(node, deep=deep)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def load_yaml_strict(path: str | Path) -> Any:
    """Parse a YAML file with the safe loader, refusing duplicate keys: ``ValueError`` naming the file, the line
    and the key."""
    path = Path(path)
    try:
        return yaml.load(path.read_text(), Loader=_StrictLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as e:
        raise ValueError(f"{path}: {e}") from None

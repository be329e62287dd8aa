"""The checkpoint the tests of caldera.pipeline.checkpoint's modules read: a tiny LLaMA compressed and saved."""

from __future__ import annotations

import pytest

from tests.pipeline.checkpoint_helpers import save_tiny_checkpoint


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """``(model, path)`` of a tiny LLaMA compressed with QuIP# and saved with a word tokenizer."""
    return save_tiny_checkpoint(tmp_path_factory.mktemp("ckpt") / "ck")

"""docs/api.md (caldera.api_reference): generated from the docstrings, current, and its examples run."""

from __future__ import annotations

import doctest
import re

import caldera
from caldera import api_reference as ref


def test_the_committed_page_is_what_the_docstrings_give():
    """Fails when a docstring of the public API changed and docs/api.md was not regenerated."""
    assert ref.PAGE.read_text(encoding="utf-8") == ref.render(), (
        "docs/api.md is stale: run `python -m caldera.api_reference`")


def test_check_reports_a_stale_page_and_writing_makes_it_current(tmp_path, capsys):
    page = tmp_path / "api.md"
    assert ref.main(["--check", "--out", str(page)]) == 1  # missing
    page.write_text(ref.render().replace("caldera.hessians", "caldera.hessian", 1))
    assert ref.main(["--check", "--out", str(page)]) == 1
    assert "is stale: run `python -m caldera.api_reference`" in capsys.readouterr().err
    assert ref.main(["--out", str(page)]) == 0
    assert ref.main(["--check", "--out", str(page)]) == 0 and page.read_text() == ref.render()


def test_the_page_documents_every_public_name():
    text = ref.render()
    for name in set(caldera.__all__) - {"__version__"}:
        assert f"## `caldera.{name}`\n" in text, name
    assert "```python\ncaldera.compress(model: Any, hessians: str | os.PathLike, method: str = 'caldera'," in text


def test_the_examples_in_the_page_run():
    """Every ``pycon`` block of docs/api.md, in page order with shared names (as a doctest file): the
    whole-model example runs on a tiny random model."""
    page = ref.PAGE.read_text(encoding="utf-8")
    blocks = re.findall(r"```pycon\n(.*?)```", page, re.S)
    assert any("caldera.compress(" in b and "caldera.hessians(" in b for b in blocks)
    parser, runner = doctest.DocTestParser(), doctest.DocTestRunner(optionflags=doctest.ELLIPSIS, verbose=False)
    globs: dict = {}
    for i, block in enumerate(blocks):
        runner.run(parser.get_doctest(block, globs, f"docs/api.md block {i}", str(ref.PAGE), 0))
    res = runner.summarize(verbose=False)
    assert res.attempted > 10 and res.failed == 0, f"{res.failed} of {res.attempted} examples of docs/api.md failed"


def test_markdown_of_sections_literal_blocks_roles_and_examples():
    doc = "\n".join([
        "First line with ``code`` and :func:`caldera.api.compress`.",
        "",
        "Args:",
        "    model: the model",
        "        (continued).",
        "    a, b: two names.",
        "",
        "A block::",
        "",
        "    x = 1",
        "        y = 2",
        "",
        ">>> 1 + 1",
        "2",
        "",
        "Last.",
    ])
    assert ref.to_markdown(doc) == "\n".join([
        "First line with `code` and `caldera.api.compress`.",
        "",
        "**Args:**",
        "",
        "- `model`: the model (continued).",
        "- `a`, `b`: two names.",
        "",
        "A block:",
        "",
        "```text",
        "x = 1",
        "    y = 2",
        "```",
        "",
        "```pycon",
        ">>> 1 + 1",
        "2",
        "```",
        "",
        "Last.",
        "",
    ])

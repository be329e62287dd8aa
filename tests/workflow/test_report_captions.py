"""report.html describes itself: the Snakefile names a workflow description, and every ``report(...)`` output of
every rule has a caption file that exists."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _report_calls(text: str) -> list[str]:
    """The argument text of each ``report(...)`` call (balanced parentheses)."""
    out = []
    for m in re.finditer(r"\breport\(", text):
        depth, i = 1, m.end()
        while depth:
            depth += {"(": 1, ")": -1}.get(text[i], 0)
            i += 1
        out.append(text[m.end(): i - 1])
    return out


def test_every_report_output_has_an_existing_caption():
    calls = []
    for smk in sorted((ROOT / "workflow/rules").glob("*.smk")):
        for args in _report_calls(smk.read_text()):
            m = re.search(r'caption="([^"]+)"', args)
            assert m, f"{smk.name}: report({args}) has no caption"
            assert (smk.parent / m.group(1)).is_file(), f"{smk.name}: caption {m.group(1)} does not exist"
            calls.append(args)
    assert len(calls) >= 14


def test_the_report_has_a_description():
    m = re.search(r'^report: "([^"]+)"', (ROOT / "Snakefile").read_text(), re.M)
    assert m and (ROOT / m.group(1)).read_text().strip()

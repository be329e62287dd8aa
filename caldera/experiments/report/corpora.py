"""How a table names its text corpora: what the text is and what it stands in for.

The offline runs evaluate on text that is *not* WikiText-2 or C4 (:mod:`caldera.pipeline.text`); a table that
prints "Wiki2" beside the paper's WikiText-2 number says so in its caption through :func:`corpus_name`.
"""

from __future__ import annotations

#: source name -> (what the text is, the paper's corpus it stands in for; None: it is that corpus)
CORPORA: dict[str, tuple[str, str | None]] = {
    "wiki-squad": ("Wikipedia paragraphs", "WikiText-2"),
    "coqa-stories": ("CoQA stories", "C4"),
    "lambada-books": ("LAMBADA book passages", "RedPajama"),
    "wikitext2": ("WikiText-2", None),
    "c4": ("C4", None),
    "redpajama": ("RedPajama", None),
}


def corpus_name(source: str) -> str:
    """``"Wikipedia paragraphs (wiki-squad), standing in for WikiText-2"`` for a stand-in source; the paper's own
    corpus by its name; an unknown source (a local file) as given."""
    what, stands = CORPORA.get(source, (None, None))
    if what is None:
        return source
    if stands is None:
        return what
    return f"{what} ({source}), standing in for {stands}"

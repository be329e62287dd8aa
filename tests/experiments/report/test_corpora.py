"""Table captions name each corpus for what it is, and the names agree with the text sources' own records."""

from caldera.experiments.report.corpora import CORPORA, corpus_name


def test_stand_in_text_is_named_with_what_it_stands_in_for():
    assert corpus_name("wiki-squad") == "Wikipedia paragraphs (wiki-squad), standing in for WikiText-2"
    assert corpus_name("coqa-stories") == "CoQA stories (coqa-stories), standing in for C4"
    assert corpus_name("wikitext2") == "WikiText-2"  # the paper's own corpus: no "standing in"
    assert corpus_name("/data/my.txt") == "/data/my.txt"


def test_the_names_agree_with_the_text_sources():
    from caldera.pipeline.text import TEXT_SOURCES

    for name, source in TEXT_SOURCES.items():
        assert name in CORPORA, name
        assert CORPORA[name][1] == source.stands_in_for, name

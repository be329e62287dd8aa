"""Fuzzing the commands' numeric options (Hypothesis): every value drawn from the option's type and its edges
either is refused with a message naming the option, or gives the right result. The parser is fuzzed over every
numeric option of every command (``matrix-report``'s own parser included); ``caldera eval ppl`` runs for real on
a tiny model, its window count, scored tokens and perplexity checked against a direct computation; ``compress
--param`` values are fuzzed against each parameter's type. ``CALDERA_FUZZ_EXAMPLES`` raises the number of cases
(CI runs the default)."""

from __future__ import annotations

import math
import os

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from caldera import cli
from caldera.cli.common import MAX_SEED
from caldera.experiments.report.matrix import CASES, MAX_OUTER_ITERS
from tests.cli.test_common import NUMERIC

#: (option, lowest accepted, highest accepted or None) per command head, from the options' declared bounds
BOUNDS = {"--n-samples": (1, None), "--seq-len": (1, None), "--seed": (0, MAX_SEED), "--batch-size": (1, None),
          "--ft-rank": (0, None), "--threads": (1, None), "--n-windows": (1, None), "--max-windows": (1, None),
          "--new-tokens": (1, None), "--runs": (1, None), "--warmup": (0, None), "--calls": (1, None),
          "--prompt-len": (1, None), "--outer-iters": (1, MAX_OUTER_ITERS),
          "--rank": (1, min(min(c.n, c.d) for c in CASES) - 1)}  # matrix-report without --quick: below every case's


def _examples(n: int) -> int:
    return int(os.environ.get("CALDERA_FUZZ_EXAMPLES", n))


EDGES = [0, 1, 2, -1, 2**31 - 1, 2**31, 2**63 - 1, 2**63, 2**64, -(2**63) - 1]
VALUES = st.one_of(st.sampled_from([str(v) for v in EDGES]), st.integers(-(2**70), 2**70).map(str),
                   st.sampled_from(["", " ", "1.0", "1e3", "0x10", "nan", "inf", "-", "+3", "٣", "1_000", "--1"]),
                   st.text(max_size=6))


@settings(max_examples=_examples(300), deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(case=st.sampled_from(NUMERIC), value=VALUES)
def test_every_numeric_option_parses_to_its_value_or_is_refused_naming_it(case, value, capsys):
    """Invariant: exit 2 with "argument OPTION:" and the reason, or the parsed value is the integer written,
    inside the option's bounds."""
    head, option, _ = case
    lo, hi = BOUNDS[option] if not (head[0] == "eval" and option == "--seq-len") else (2, None)
    try:
        if head[0] == "matrix-report":  # its own parser, behind `caldera matrix-report`
            from caldera.experiments.report.matrix import parse_args

            args = parse_args([*head[1:], f"{option}={value}"])
        else:
            args = cli.build_parser().parse_args([*head, f"{option}={value}"])
    except SystemExit as e:
        err = capsys.readouterr().err
        assert e.code == 2 and f"argument {option}: " in err, (value, err)
        assert any(w in err for w in ("invalid int value", "is out of range: expected an integer",
                                      "expected an integer, got")), (value, err)
        return
    got = getattr(args, option.lstrip("-").replace("-", "_"))
    assert got == int(value) and got >= lo and (hi is None or got <= hi), (value, got)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """A tiny LLaMA folder (64 positions) and the 40-token stream ``eval ppl`` scores (patched in per example)."""
    from tests.helpers import tiny_model_dir

    return tiny_model_dir(tmp_path_factory.mktemp("fuzz") / "tiny"), torch.randint(
        3, 128, (1, 40), generator=torch.Generator().manual_seed(1))


@settings(max_examples=_examples(15), deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(seq_len=st.sampled_from(["-1", "0", "1", "2", "3", "8", "13", "40", "41", "64", "65", "100000", "x"]),
       max_windows=st.sampled_from([None, "-1", "0", "1", "2", "3", "1000"]),
       batch=st.sampled_from(["0", "1", "3", "-2"]), threads=st.sampled_from([None, "0", "1", "2", "-1"]))
def test_eval_ppl_gives_the_right_perplexity_or_a_clear_error(tiny, monkeypatch, capsys, seq_len, max_windows,
                                                               batch, threads):
    """Invariant: exit 2 naming an option, or exit 0 with min(--max-windows, 40 // --seq-len) windows, (seq_len
    - 1) scored tokens per window, and the perplexity of a direct forward over those windows."""
    from caldera.pipeline import text
    from caldera.pipeline.models import load_dense

    folder, stream = tiny
    monkeypatch.setattr(text, "perplexity_stream", lambda tok, source: stream)
    argv = ["eval", "ppl", "--model", str(folder), "--seq-len", seq_len, "--batch-size", batch, "--json", "--quiet"]
    argv += [] if max_windows is None else ["--max-windows", max_windows]
    argv += [] if threads is None else ["--threads", threads]
    try:
        rc = cli.main(argv)
    except SystemExit as e:
        rc = e.code
    out, err = capsys.readouterr()
    if rc != 0:
        assert rc == 2 and "Traceback" not in err, err
        assert any(o in err for o in ("--seq-len", "--max-windows", "--batch-size", "--threads")), err
        return
    import json

    res = json.loads(out)
    n = int(seq_len)
    want_windows = min(40 // n, int(max_windows) if max_windows else 40 // n)
    assert res["n_windows"] == want_windows and res["n_tokens"] == want_windows * (n - 1)
    model, _ = load_dense(str(folder))
    windows = stream[0, : want_windows * n].reshape(want_windows, n)
    with torch.no_grad():
        logits = model(windows).logits.double()
    nll = torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]), windows[:, 1:].reshape(-1))
    assert math.isclose(res["ppl"], math.exp(float(nll)), rel_tol=1e-5), (res["ppl"], math.exp(float(nll)))


PARAM_VALUES = st.one_of(st.text(max_size=8), st.integers(-(2**70), 2**70).map(str), st.floats().map(repr),
                         st.sampled_from(["true", "false", "True", "1.0", "1e3", "", "null", "[1]", '"64"', "NaN",
                                          "Infinity", " 7 ", "01", "0x10", "1_000"]))


@settings(max_examples=_examples(300), deadline=None)
@given(key=st.sampled_from(["rank", "outer_iters", "rht", "hessian_update", "sigma_reg", "svd", "update_order"]),
       value=PARAM_VALUES)
def test_every_method_parameter_value_is_of_its_type_or_refused_naming_it(key, value):
    """Invariant: ``--param KEY=VALUE`` gives a value of KEY's type (CalderaConfig's field) equal to what was
    written, or a CLIError naming the parameter, its type and the value."""
    from caldera.algorithm.config import CalderaConfig
    from caldera.cli import common

    types = common.param_types(CalderaConfig)
    raw = value.strip()
    try:
        got = common.parse_params([f"{key}={value}"], None, types)[key]
    except common.CLIError as e:
        assert str(e).startswith(f"--param {key}={raw}: {key} takes ") and str(e).endswith(f"got {raw!r}"), str(e)
        assert types[key] in (int, float, bool)  # text parameters take any text
        return
    typ = types[key]
    assert type(got) is typ, (value, got)
    if typ is int:
        assert got == int(raw)
    elif typ is float:
        assert got == float(raw) or (math.isnan(got) and math.isnan(float(raw)))
    elif typ is bool:
        assert raw.lower() in ("true", "false") and got == (raw.lower() == "true")
    else:
        assert got == raw

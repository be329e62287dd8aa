"""`caldera info` (caldera.cli.info): the summary of a checkpoint's config (method, bits, ranks, the error per
matrix type), its JSON records, and errors that say what to do. A hand-written caldera_config.json (read with
--no-verify) is the oracle: its means, ranges and lines are worked out by hand."""

from __future__ import annotations

import json

import pytest

from caldera import cli
from tests.helpers import printed_json


def _module(rank: int, ft_rank: int, in_features: int) -> dict:
    return {"version": 1, "in_features": in_features, "out_features": 64, "q_quantizer": "e8p", "rht": True,
            "rank": rank, "ft_rank": ft_rank, "lr_format": "quantized", "l_quantizer": "e8p-rvq4",
            "r_quantizer": "e8p-rvq4"}


ERRORS = {"model.layers.0.self_attn.q_proj": 0.1, "model.layers.1.self_attn.q_proj": 0.3,
          "model.layers.0.mlp.down_proj": 0.05, "model.layers.1.mlp.down_proj": 0.25}
CONFIG = {
    "format_version": 2, "base_config": {"model_type": "llama"}, "method": "caldera",
    "method_config": {"rank": 32, "l_bits": 4, "outer_iters": 15, "seed": 0, "rht": True, "sigma_reg": 0.01},
    "modules": {"model.layers.0.self_attn.q_proj": _module(16, 0, 64), "model.layers.1.self_attn.q_proj":
                _module(32, 8, 64), "model.layers.0.mlp.down_proj": _module(16, 0, 128),
                "model.layers.1.mlp.down_proj": _module(32, 8, 128)},
    "errors": {k: {"error": e} for k, e in ERRORS.items()},
    "bits": {"average_bits": 2.4, "storage_bits_per_weight": 2.5, "tensor_bits_per_weight": 2.625},
    "dense_layers": [2],
}
SUMMARY = [
    "provenance  not recorded (a checkpoint written before caldera recorded it)",
    "method      caldera (l_bits=4, outer_iters=15, rank=32)",
    "bits/weight 2.400 (paper formula), 2.500 as stored (codes, scales, signs), 2.625 in the tensor files",
    "modules     4 compressed; ranks [16, 32], fine-tuned ranks [0, 8]; quantizers e8p, e8p-rvq4; dense layers [2]",
    "relative data-aware error per matrix type: mean [min, max] over layers",
    "  mlp.down_proj      0.1500 [0.0500, 0.2500]  n=2",
    "  self_attn.q_proj   0.2000 [0.1000, 0.3000]  n=2",
]


def _checkpoint(folder, **changes):
    folder.mkdir()
    (folder / "caldera_config.json").write_text(json.dumps({**CONFIG, **changes}))
    return folder


def test_summary_of_the_config(tmp_path, capsys):
    ck = _checkpoint(tmp_path / "ck")
    assert cli.main(["info", str(ck), "--no-verify"]) == 0
    assert capsys.readouterr().out.splitlines() == [f"checkpoint  {ck}", *SUMMARY]
    assert cli.main(["info", str(ck), "--no-verify", "--matrices"]) == 0
    per_matrix = capsys.readouterr().out.splitlines()[len(SUMMARY) + 1:]
    assert per_matrix == ["per matrix: relative data-aware error",
                          *(f"  {k:48s} {ERRORS[k]:.4f}" for k in sorted(ERRORS))]


def test_a_checkpoint_without_bits_or_fine_tuning_says_so(tmp_path, capsys):
    modules = {k: {**m, "ft_rank": 0} for k, m in CONFIG["modules"].items()}
    ck = _checkpoint(tmp_path / "ck", modules=modules, bits=None, dense_layers=[])
    assert cli.main(["info", str(ck), "--no-verify"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[3] == "bits/weight not recorded"
    assert lines[4] == "modules     4 compressed; ranks [16, 32]; quantizers e8p, e8p-rvq4; dense layers none"


PROVENANCE = {"base_model": {"name": "smollm2", "weights_sha256": "ab" * 32},
              "calibration": {"source": "wikitext2", "n_tokens": 4096, "n_sequences": 16, "seq_len": 256,
                              "seed": 0, "calibration_sha256": "cd" * 32, "hessians_sha256": "ef" * 32},
              "caldera_version": "0.1.0", "git_commit": "unknown"}


def test_the_provenance_is_printed_and_in_the_records(tmp_path, capsys):
    """Base model and its weights digest, calibration (source, tokens, digests), caldera version and commit,
    between the checkpoint line and the method; the records hold the provenance as recorded."""
    ck = _checkpoint(tmp_path / "ck", provenance=PROVENANCE)
    assert cli.main(["info", str(ck), "--no-verify"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[1] == f"base model  smollm2 (weights sha256 {'ab' * 32})"
    assert lines[2] == ("calibration 4096 tokens of wikitext2 (16 sequences of 256, seed 0); calibration sha256 "
                        f"{'cd' * 32}, Hessians sha256 {'ef' * 32}")  # one line: digests stay whole
    assert lines[3:5] == ["caldera     0.1.0", "commit      unknown"] and lines[5:] == SUMMARY[1:]
    assert cli.main(["info", str(ck), "--no-verify", "--json"]) == 0
    assert printed_json(capsys)["provenance"] == PROVENANCE


def test_json_records_on_stdout_and_in_the_out_file(tmp_path, capsys):
    ck, out = _checkpoint(tmp_path / "ck"), tmp_path / "info.json"
    assert cli.main(["info", str(ck), "--no-verify", "--json", "--out", str(out)]) == 0
    r = printed_json(capsys)
    assert json.loads(out.read_text()) == r and "errors" not in r
    assert r["shapes"] == [[64, 64], [64, 128]] and r["ranks"] == [16, 32] and r["ft_ranks"] == [0, 8]
    assert r["error_by_linear"]["self_attn.q_proj"] == pytest.approx({"mean": 0.2, "min": 0.1, "max": 0.3, "n": 2})
    assert cli.main(["info", str(ck), "--no-verify", "--matrices", "--out", str(out)]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == f"full records: {out}"
    assert json.loads(out.read_text())["errors"] == CONFIG["errors"]


def test_the_checkpoint_is_verified_unless_no_verify(tmp_path, capsys):
    ck = _checkpoint(tmp_path / "ck")  # a config without tensors or checksums
    assert cli.main(["info", str(ck)]) == 2
    cap = capsys.readouterr()
    assert cap.out == "" and cap.err.startswith("caldera info: error: ") and "checksums.json is missing" in cap.err


@pytest.mark.parametrize("changes, words", [
    ({"errors": {"model.layers.0.mlp.down_proj": {"err": 0.1}}},
     "caldera_config.json has an unexpected layout (KeyError: 'error'); re-run `caldera compress` to rebuild"),
    ({"format_version": 1}, "format_version 1 (written before config.json and the content manifest); convert it "
                            "with `caldera convert"),
    ({"modules": {}}, "lists no compressed modules"),
])
def test_a_config_it_cannot_summarize_is_one_line_with_the_fix(tmp_path, capsys, changes, words):
    ck = _checkpoint(tmp_path / "ck", **changes)
    assert cli.main(["info", str(ck), "--no-verify"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("caldera info: error: ") and len(err.splitlines()) == 1 and words in err, err


def test_a_folder_that_is_no_checkpoint_points_to_compress(tmp_path, capsys):
    assert cli.main(["info", str(tmp_path), "--no-verify"]) == 2
    assert capsys.readouterr().err == (f"caldera info: error: {tmp_path} is not a compressed checkpoint (no "
                                       "caldera_config.json); run `caldera compress`\n")


def test_a_checkpoint_that_does_not_exist_is_no_such_folder(tmp_path, capsys):
    missing = tmp_path / "nonexistent"
    assert cli.main(["info", str(missing)]) == 2
    assert capsys.readouterr().err == (f"caldera info: error: checkpoint: no such folder: {missing}; a checkpoint is "
                                       "the folder `caldera compress` writes (its --out)\n")
    (tmp_path / "file").write_text("x")
    assert cli.main(["info", str(tmp_path / "file")]) == 2
    assert f"checkpoint: not a folder: {tmp_path / 'file'}" in capsys.readouterr().err

"""`caldera compress` (caldera.cli.compress)."""

from __future__ import annotations

import json

import pytest

from caldera import cli
from tests.helpers import printed_json, tiny_hessians

COMMANDS = ["assets", "hessians", "compress", "eval", "info", "convert"]


def test_compress_with_reversed_layers_exits_nonzero(tmp_path, capsys):
    argv = ["compress", "--model", "smollm2", "--hessians", str(tmp_path), "--method", "caldera", "--layers", "5-2",
            "--out", str(tmp_path / "o")]
    assert cli.main(argv) == 2
    assert "reversed" in capsys.readouterr().err


def test_compress_help_lists_every_methods_parameters(capsys):
    from caldera.methods import registered_methods

    with pytest.raises(SystemExit):
        cli.main(["compress", "--help"])
    out = capsys.readouterr().out
    for m in registered_methods():
        assert f"\n  {m}\n      " in out, m
    assert "\n  rtn\n      bits=2 per_row=True" in out and "lr_rank=64" in out and "authors-2025" in out


def test_compress_with_a_per_matrix_rank_method_allocates_over_every_layer_first(tmp_path, monkeypatch, capsys):
    """`caldera compress --method caldera-rank-per-layer`: the allocation is made from every decoder layer's
    Hessians (even with --layers), written beside the layers, reused by the next run, and each matrix gets its
    rank; --allocation of another config is refused."""
    model_dir, h = tiny_hessians(tmp_path, monkeypatch)
    ck = tmp_path / "ck"
    capsys.readouterr()
    argv = ["compress", "--model", str(model_dir), "--hessians", str(h), "--method", "caldera-rank-per-layer",
            "--param", "rank=4", "--param", "min_rank=2", "--param", "rank_multiple=2", "--param", "outer_iters=1",
            "--param", "l_bits=16", "--param", "r_bits=16", "--out", str(ck), "--quiet"]
    assert cli.main([*argv, "--layers", "0", "--no-assemble"]) == 0
    capsys.readouterr()
    alloc = json.loads((tmp_path / "ck.layers/allocation.json").read_text())
    assert len(alloc["overrides"]) == 14  # both layers' matrices, though only layer 0 was compressed
    assert cli.main([*argv, "--json"]) == 0
    out = printed_json(capsys)
    assert out["checkpoint"] and out["computed"] == [1] and out["skipped"] == [0]
    cfg = json.loads((ck / "caldera_config.json").read_text()) if (ck / "caldera_config.json").is_file() else \
        json.loads((ck / "config.json").read_text())["quantization_config"]
    ranks = {k.split("layers.", 1)[1]: m["rank"] for k, m in cfg["modules"].items()}
    assert ranks == {k: o["rank"] for k, o in alloc["overrides"].items()}
    (tmp_path / "other.json").write_text(json.dumps({**alloc, "method_config": {**alloc["method_config"],
                                                                                "rank": 6}}))
    assert cli.main([*argv, "--out", str(tmp_path / "ck2"), "--allocation", str(tmp_path / "other.json")]) == 2
    assert "run the allocation again" in capsys.readouterr().err


def test_a_parameter_value_of_the_wrong_type_names_the_parameter_the_type_and_the_value(tmp_path, capsys):
    """Checked against the method's config field types before anything loads (no YAML advice)."""
    for param, words in (("rank=abc", "rank takes an integer (int), got 'abc'"),
                         ("rht=yes", "rht takes true or false (bool), got 'yes'"),
                         ("sigma_reg=small", "sigma_reg takes a number (float), got 'small'")):
        argv = ["compress", "--hessians", str(tmp_path / "H"), "--param", param, "--out", str(tmp_path / "o")]
        assert cli.main(argv) == 2
        err = capsys.readouterr().err
        assert err == f"caldera compress: error: --param {param}: {words}\n", err
    assert cli.main(["compress", "--hessians", str(tmp_path / "H"), "--method", "rtn", "--param", "per_row=2",
                     "--out", str(tmp_path / "o")]) == 2
    assert "--param per_row=2: per_row takes true or false (bool), got '2'" in capsys.readouterr().err
    assert not list(tmp_path.iterdir())


def test_the_model_is_taken_from_the_hessians_and_another_one_is_refused(tmp_path, monkeypatch, capsys):
    """Without --model, compress takes the model the Hessians record (hessians.json); a --model other than that
    one is refused before anything loads, naming both and the fix; a Hessians folder that records none needs
    --model; a missing one is "no such folder"."""
    from tests.helpers import tiny_model_dir

    model_dir, h = tiny_hessians(tmp_path, monkeypatch, n_samples=2, seq_len=8)
    other = tiny_model_dir(tmp_path / "other")
    ck = tmp_path / "ck"
    capsys.readouterr()
    base = ["compress", "--hessians", str(h), "--method", "quip#", "--quiet"]
    assert cli.main([*base, "--model", str(other), "--out", str(ck)]) == 2
    err = capsys.readouterr().err
    assert err == (f"caldera compress: error: --model {other}, but the Hessians in {h} were collected for "
                   f"{model_dir} ({h / 'hessians.json'}); leave --model out to compress {model_dir}, or collect "
                   f"{other}'s Hessians first (`caldera hessians --model {other} --out NEW`)\n")
    assert not ck.exists() and not (tmp_path / "ck.layers").exists()
    assert cli.main([*base, "--out", str(ck), "--json"]) == 0  # no --model: the recorded one
    assert printed_json(capsys)["checkpoint"] == str(ck)
    assert json.loads((ck / "config.json").read_text())["num_hidden_layers"] == 2
    (h / "hessians.json").unlink()  # the layer files' metadata still name the model
    assert cli.main([*base, "--out", str(tmp_path / "ck2")]) == 0
    empty = tmp_path / "H-empty"
    empty.mkdir()
    assert cli.main(["compress", "--hessians", str(empty), "--method", "quip#", "--out", str(tmp_path / "ck3")]) == 2
    assert f"--hessians {empty} records no model" in capsys.readouterr().err
    assert cli.main(["compress", "--hessians", str(tmp_path / "nosuch"), "--out", str(tmp_path / "ck3")]) == 2
    assert capsys.readouterr().err == (f"caldera compress: error: --hessians: no such folder: {tmp_path / 'nosuch'}; "
                                       f"run `caldera hessians --out {tmp_path / 'nosuch'}` first\n")
    assert cli.main([*base, "--out", str(tmp_path / "ck3"), "--allocation", str(tmp_path / "a.json")]) == 2
    assert f"--allocation: no such file: {tmp_path / 'a.json'}" in capsys.readouterr().err
    assert not (tmp_path / "ck3").exists()


def test_a_rank_or_layer_the_model_cannot_have_is_refused_from_config_json_before_any_work(tmp_path, monkeypatch,
                                                                                          capsys):
    """The tiny LLaMA (2 decoder layers; k_proj and v_proj 32x64): --param rank=32 has no 32-rank factors of a
    32-row matrix, --layers 2 is no layer of it; both are refused naming the option, with the dense loader
    replaced by one that fails the test and nothing written. rank=31 and --layers 1 pass the check and reach it."""
    import caldera.pipeline.models as models
    from tests.helpers import tiny_model_dir

    class Loaded(Exception):
        pass

    def loaded(*a, **k):
        raise Loaded

    model = str(tiny_model_dir(tmp_path / "tiny"))
    (tmp_path / "H").mkdir()  # Hessians recorded for this model (compress checks that before the shapes)
    (tmp_path / "H" / "hessians.json").write_text(json.dumps({"model": model}))
    monkeypatch.setattr(models, "load_dense", loaded)
    capsys.readouterr()
    out = tmp_path / "o"
    base = ["compress", "--model", model, "--hessians", str(tmp_path / "H"), "--method", "caldera", "--out", str(out)]
    for extra, words in ((["--param", "rank=32"], "--method caldera: method 'caldera' cannot compress 2 matrices: "
                          "self_attn.k_proj 32×64: rank=32 is too large (accepted: 1 <= rank < min(n, d) = 32)"),
                         (["--param", "rank=4", "--layers", "1-2"], "--layers 1-2: layers [2] are not among the "
                          "model's 2 decoder layers (0-1)")):
        assert cli.main([*base, *extra]) == 2
        assert words in capsys.readouterr().err
        assert not out.exists() and not (tmp_path / "o.layers").exists()
    with pytest.raises(Loaded):
        cli.main([*base, "--param", "rank=31", "--layers", "1"])


def test_the_checkpoint_records_its_provenance_and_a_rerun_writes_the_same_bytes(tmp_path, monkeypatch, capsys):
    """`caldera compress` records where the checkpoint came from (the model as named with its weight files'
    digest, the calibration of the Hessians folder, this caldera's version and commit), keeps the model's
    generation_config.json byte for byte, writes the model card, and `caldera info` prints the provenance; a
    second run into another folder writes every file with the same bytes."""
    from caldera.pipeline.checkpoint.provenance import calibration_record, weights_digest
    from caldera.version import __version__

    model_dir, h = tiny_hessians(tmp_path, monkeypatch)
    (model_dir / "generation_config.json").write_text('{\n  "bos_token_id": 1,\n  "max_new_tokens": 9\n}\n')
    cks = [tmp_path / "a", tmp_path / "b"]
    for ck in cks:
        assert cli.main(["compress", "--model", str(model_dir), "--hessians", str(h), "--method", "quip#",
                         "--out", str(ck), "--quiet"]) == 0
    a, b = cks
    files = sorted(p.name for p in a.iterdir())
    assert files == sorted(p.name for p in b.iterdir())
    assert [f for f in files if (a / f).read_bytes() != (b / f).read_bytes()] == []
    prov = json.loads((a / "caldera_config.json").read_text())["provenance"]
    assert prov["base_model"] == {"name": str(model_dir), "weights_sha256": weights_digest(model_dir)}
    assert prov["calibration"] == calibration_record(h) and prov["calibration"]["n_tokens"] == 64
    assert prov["calibration"]["source"] == json.loads((h / "hessians.json").read_text())["source"]
    assert prov["caldera_version"] == __version__ and prov["git_commit"]
    assert (a / "generation_config.json").read_bytes() == (model_dir / "generation_config.json").read_bytes()
    card = (a / "README.md").read_text()
    assert prov["base_model"]["weights_sha256"] in card and "pip install caldera" in card
    capsys.readouterr()
    assert cli.main(["info", str(a)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[1] == f"base model  {model_dir} (weights sha256 {prov['base_model']['weights_sha256']})"
    assert lines[3:5] == [f"caldera     {__version__}", f"commit      {prov['git_commit']}"]

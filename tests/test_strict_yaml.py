"""The duplicate-key-refusing YAML loader (caldera.strict_yaml) against PyYAML's own safe loader."""

from __future__ import annotations

import re

import pytest
import yaml

from caldera.strict_yaml import load_yaml_strict


def test_a_merge_with_an_override_is_read_as_yaml_defines_it(tmp_path):
    f = tmp_path / "m.yaml"
    f.write_text("base: &b {batch_size: 8, seq_len: 64}\nrun: {<<: *b, batch_size: 2}\n"
                 "two:\n  <<: [*b, {lr: 1}]\n  lr: 3\n")
    got = load_yaml_strict(f)
    assert got == yaml.safe_load(f.read_text())
    assert got["run"] == {"batch_size": 2, "seq_len": 64} and got["two"] == {"batch_size": 8, "seq_len": 64, "lr": 3}


@pytest.mark.parametrize("text, line", [
    ("a: 1\nb: 2\na: 3\n", 3),
    ("base: &b {x: 1}\nrun:\n  <<: *b\n  y: 1\n  y: 2\n", 5),  # a merge does not excuse the mapping's own duplicate
])
def test_a_key_given_twice_in_one_mapping_is_refused_with_its_line(tmp_path, text, line):
    f = tmp_path / "d.yaml"
    f.write_text(text)
    with pytest.raises(ValueError, match=rf"(?s){re.escape(str(f))}: .*duplicate key .*line {line}, column"):
        load_yaml_strict(f)

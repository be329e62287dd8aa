"""benchmarks/config_refusals.py: each class's edit breaks config/smoke.yaml in the one way it names (valid YAML,
one key changed), and a failed dry run is summarized by the workflow's own message."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from caldera.strict_yaml import load_yaml_strict

ROOT = Path(__file__).resolve().parents[2]


def _module():
    spec = importlib.util.spec_from_file_location("config_refusals", ROOT / "benchmarks" / "config_refusals.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


C = _module()
SMOKE = (ROOT / "config" / "smoke.yaml").read_text()


def _flat(d, prefix=""):
    out = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        out.update(_flat(v, key + ".") if isinstance(v, dict) else {key: v})
    return out


#: class -> the key its edit must change (the merge keeps every value: it only rewrites c4 through wiki's anchor)
KEYS = {"seed-beyond-64-bits": "calibration.seed", "calibration-beyond-the-text": "calibration.n_samples",
        "source-folder-missing": "models.smollm2.source", "device-cuda-without-gpu": "device",
        "tables-dir-unwritable": "tables_dir", "windows-beyond-the-text": "eval.ppl.wiki.n_windows",
        "new-tokens-beyond-positions": "throughput.new_tokens", "windows-1e9-as-written": "eval.ppl.wiki.n_windows",
        "new-tokens-1e9-as-written": "throughput.new_tokens", "replicates-seeds-empty": "replicates.seeds",
        "layers-per-job-float": "layers_per_job", "layers-floats": "layers", "merge-with-override": None}


@pytest.mark.parametrize("name", sorted(C.CLASSES))
def test_each_edit_changes_exactly_its_key(name, tmp_path):
    assert set(KEYS) == set(C.CLASSES)
    edited = C.CLASSES[name][1](SMOKE)
    assert edited != SMOKE
    before, after = tmp_path / "a.yaml", tmp_path / "b.yaml"
    before.write_text(SMOKE)
    after.write_text(edited)
    a, b = _flat(load_yaml_strict(before)), _flat(load_yaml_strict(after))
    changed = {k for k in set(a) | set(b) if repr(a.get(k, "absent")) != repr(b.get(k, "absent"))}  # 30 vs 30.0
    assert changed == ({KEYS[name]} if KEYS[name] else set()), changed


def test_a_refusal_is_summarized_by_the_workflow_message():
    out = ('Building DAG of jobs...\nWorkflowError in file "/x/common.smk", line 70:\nlayers[0]: 0.0 is a float; '
           'write the integer 0\n(config case.yaml)\n  File "/x/common.smk", line 70, in <module>\n')
    assert C.first_error(out) == "layers[0]: 0.0 is a float; write the integer 0"
    assert C.first_error("Traceback\nNotADirectoryError: [Errno 20] Not a directory: 'README.md'\n").startswith(
        "NotADirectoryError")


def test_the_four_columns_count_every_class_once():
    rows = [{"class": "seed-beyond-64-bits", "outcome": "accepted"}, {"class": "layers-floats", "outcome": "accepted"},
            {"class": "merge-with-override", "outcome": "refused"}, {"class": "device-cuda-without-gpu",
                                                                      "outcome": "timeout"}]
    # a timed-out dry run planned nothing, but refused nothing either
    assert C.summary(rows, C.RECORDED_LATER) == {"tried": 4, "refused before work": 1, "refused later": 2,
                                                 "accepted": 1}
    assert C.summary(rows) == {"tried": 4, "refused before work": 1, "refused later": 0, "accepted": 3}
    assert set(C.RECORDED_LATER) == set(C.CLASSES)

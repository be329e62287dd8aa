"""The LoRA job's working folder (caldera.experiments.jobs.loraft): what a finished job leaves behind."""

from caldera.experiments.jobs.loraft import drop_resume_state


def test_a_finished_job_leaves_no_training_state_and_no_empty_folder(tmp_path):
    work = tmp_path / "rte_work"
    work.mkdir()
    (work / "state.safetensors").write_bytes(b"state")
    drop_resume_state(work)
    assert not work.exists()
    drop_resume_state(work)  # a rerun of the tidy-up (the folder already gone) is not an error


def test_a_kept_model_stays_beside_the_removed_state(tmp_path):
    work = tmp_path / "rte_work"
    (work / "model").mkdir(parents=True)
    (work / "model" / "model.safetensors").write_bytes(b"weights")
    (work / "head.safetensors").write_bytes(b"head")
    (work / "state.safetensors").write_bytes(b"state")
    drop_resume_state(work)
    assert sorted(p.name for p in work.iterdir()) == ["head.safetensors", "model"]
    assert (work / "model" / "model.safetensors").read_bytes() == b"weights"

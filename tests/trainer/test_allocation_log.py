"""Each run starts its own ``allocations.jsonl`` (trainer/output_files.py, no trainer built): a fresh run moves an
earlier run's log aside, a resume from step N keeps the lines before N, and nothing is ever lost."""

import json

import pytest

from trl_adaptive.report.run_files import ALLOCATION_LOG_FILE
from trl_adaptive.trainer.output_files import append_allocation_record, start_allocation_log


def _log(folder, steps, torn: bool = False) -> bytes:
    for step in steps:
        append_allocation_record(str(folder), {"step": step, "counts": [step, 1]})
    if torn:
        with open(folder / ALLOCATION_LOG_FILE, "ab") as f:
            f.write(b'{"step": 9, "cou')  # a crash cut the last line short
    return (folder / ALLOCATION_LOG_FILE).read_bytes()


def _steps(path) -> list[int]:
    return [json.loads(line)["step"] for line in path.read_text().splitlines()]


def test_nothing_to_set_aside_in_a_new_folder(tmp_path):
    assert start_allocation_log(str(tmp_path / "new"), None) is None
    (tmp_path / ALLOCATION_LOG_FILE).write_bytes(b"")
    assert start_allocation_log(str(tmp_path), None) is None


def test_a_fresh_run_moves_each_earlier_log_to_the_next_free_archive(tmp_path):
    first = _log(tmp_path, [0, 1, 2])
    with pytest.warns(UserWarning, match="already held allocations.jsonl of an earlier run: moved to .*previous-1"):
        assert start_allocation_log(str(tmp_path), None) == str(tmp_path / "allocations.previous-1.jsonl")
    assert not (tmp_path / ALLOCATION_LOG_FILE).exists()
    second = _log(tmp_path, [0, 1])
    with pytest.warns(UserWarning, match="previous-2"):
        assert start_allocation_log(str(tmp_path), None) == str(tmp_path / "allocations.previous-2.jsonl")
    assert (tmp_path / "allocations.previous-1.jsonl").read_bytes() == first
    assert (tmp_path / "allocations.previous-2.jsonl").read_bytes() == second


def test_a_resume_keeps_the_steps_before_its_checkpoint_and_archives_the_whole_log(tmp_path):
    whole = _log(tmp_path, [0, 1, 2, 3, 4], torn=True)
    archive = start_allocation_log(str(tmp_path), 3)
    assert _steps(tmp_path / ALLOCATION_LOG_FILE) == [0, 1, 2]
    assert open(archive, "rb").read() == whole
    _log(tmp_path, [3, 4])  # the resumed run's batches, once each
    assert _steps(tmp_path / ALLOCATION_LOG_FILE) == [0, 1, 2, 3, 4]


def test_a_resume_from_the_newest_step_leaves_the_log_alone(tmp_path):
    whole = _log(tmp_path, [0, 1, 2])
    assert start_allocation_log(str(tmp_path), 3) is None
    assert (tmp_path / ALLOCATION_LOG_FILE).read_bytes() == whole
    assert list(tmp_path.iterdir()) == [tmp_path / ALLOCATION_LOG_FILE]

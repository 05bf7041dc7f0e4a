"""The procedure's state through a checkpoint: one tree in ``adaptive_state.json`` (format 3), and the files written
before it (the allocator's state and the procedure's own apart) still resume exactly."""

from __future__ import annotations

import json

import pytest
from helpers.allocation import TwoAllocators
from helpers.trainer import build_trainer, make_dataset

from trl_adaptive.allocation import CeroAllocator
from trl_adaptive.report.run_files import ADAPTIVE_STATE_FILE

pytestmark = pytest.mark.trainer  # every test here builds a trainer (make test-fast skips them)


def _train(model_dir, output_dir, resume=None, **config):
    trainer = build_trainer(
        model_dir, output_dir, make_dataset(8), max_steps=6, save_strategy="steps", save_steps=1, **config
    )
    trainer.train(resume_from_checkpoint=resume)
    return trainer


def test_a_user_procedure_holding_two_allocators_resumes_exactly(tiny_model_dir, tmp_path):
    def two() -> TwoAllocators:
        return TwoAllocators(CeroAllocator(max_rollouts=6), CeroAllocator(max_rollouts=6))

    full = _train(tiny_model_dir, tmp_path / "run", allocator_object=two())
    saved = json.loads((tmp_path / "run" / "checkpoint-3" / ADAPTIVE_STATE_FILE).read_text())
    assert saved["format_version"] == 3 and saved["allocator"] == {"name": "two_allocators"}
    assert set(saved["procedure"]["children"]) == {"first", "second"}
    resumed = _train(
        tiny_model_dir, tmp_path / "run", resume=str(tmp_path / "run" / "checkpoint-3"), allocator_object=two()
    )
    tree = full.procedure.state_dict()
    assert resumed.procedure.state_dict() == tree
    assert all(tree["children"][name]["state"]["theta"] for name in ("first", "second"))  # both moved: not vacuous
    assert resumed.prompt_statistics.state_dict() == full.prompt_statistics.state_dict()


def test_a_checkpoint_of_a_development_format_is_refused_naming_the_version(tiny_model_dir, tmp_path):
    """Formats 1 and 2 (CERO's duals under ``allocator.state``, no tree) were never released: refused, not read."""
    config = {"allocator": "cero", "dynamic_sampling": True, "max_rollouts": 6}
    _train(tiny_model_dir, tmp_path / "run", **config)
    path = tmp_path / "run" / "checkpoint-3" / ADAPTIVE_STATE_FILE
    state = json.loads(path.read_text())
    duals = state["procedure"]["children"]["inner"]["children"]["allocator"]["state"]
    state.update(format_version=2, allocator={"name": "cero", "state": duals}, procedure={})
    path.write_text(json.dumps(state))
    with pytest.raises(ValueError, match=r"unsupported format_version 2 \(this trl_adaptive reads 3\)"):
        _train(tiny_model_dir, tmp_path / "run", resume=str(path.parent), **config)

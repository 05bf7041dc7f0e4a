"""The run's adaptive state without a trainer (``trl_adaptive/trainer/state.py``): epoch bookkeeping,
``adaptive_state.json`` written and restored through it alone; what the main process shares each round."""

from __future__ import annotations

import json
import pickle

import numpy as np
import pytest
from datasets import Dataset
from helpers.trainer import tiny_config_kwargs

from trl_adaptive import AdaptiveGRPOConfig, get_allocator
from trl_adaptive.sampling import BatchContext, BatchRun, Outcome, PlanAhead, run_rounds
from trl_adaptive.stats import PromptStatistics
from trl_adaptive.trainer.persistence import load_adaptive_state, restorable_state, save_adaptive_state
from trl_adaptive.trainer.state import AdaptiveState, checked_training_prompts


def _state(tmp_path, prompts: int = 8, **config) -> AdaptiveState:
    config.setdefault("allocator", "knapsack")
    args = AdaptiveGRPOConfig(**tiny_config_kwargs(str(tmp_path), **config))
    dataset = Dataset.from_dict({"prompt": [f"prompt {i}" for i in range(prompts)]})
    prompts_ = checked_training_prompts(dataset, args)
    return AdaptiveState.for_run(prompts_, args.build_procedure(), None, args)


def test_epochs_close_once_each_and_say_when_they_did(tmp_path):
    state = _state(tmp_path)
    state.prompt_statistics.update([0, 0, 1], [1.0, 0.0, 1.0])
    assert state.close_epochs_through(2) is True
    assert state.epochs_closed == 2 and state.prompt_statistics.epoch == 2
    assert state.close_epochs_through(1) is False and state.close_epochs_through(2) is False
    assert state.prompt_statistics.epoch == 2


def test_an_epoch_begins_where_the_run_is_unless_a_resume_began_it_earlier(tmp_path):
    state = _state(tmp_path)
    assert state.begin_epoch(0, 0) is False and state.epoch_position(3) == {"epoch": 0, "steps_in_epoch": 3}
    assert state.begin_epoch(1, 4) is True and state.epoch_position(6) == {"epoch": 1, "steps_in_epoch": 2}
    resumed = _state(tmp_path)
    resumed.resumed_epochs_trained, resumed.epoch_start_step = 1, 4  # resumed at step 5, in epoch 1
    resumed.begin_epoch(1, 5)
    assert resumed.epoch_position(6) == {"epoch": 1, "steps_in_epoch": 2}


def test_the_state_file_round_trips_through_the_state_alone(tmp_path):
    state = _state(tmp_path)
    state.prompt_statistics.update([0, 1, 1], [1.0, 0.0, 1.0], [5.0, 7.0, 9.0])
    state.close_epochs_through(1)
    state.begin_epoch(1, 6)
    path = save_adaptive_state(state, str(tmp_path), global_step=9)
    saved = json.loads(open(path, encoding="utf-8").read())
    assert list(saved) == [
        "format_version",
        "allocator",
        "procedure",
        "prompt_source",
        "statistics",
        "epochs_closed",
        "epoch_position",
        "visits",
    ]
    assert saved["allocator"]["name"] == "knapsack" and saved["epochs_closed"] == 1
    assert saved["prompt_source"] == {"name": "sampler", "state": {}}
    assert saved["epoch_position"] == {"epoch": 1, "steps_in_epoch": 3}

    fresh = _state(tmp_path)
    load_adaptive_state(fresh, path)
    assert fresh.epochs_closed == 1
    np.testing.assert_array_equal(fresh.prompt_statistics.success_rates([0, 1]), [1.0, 0.5])


def test_a_state_of_another_allocator_is_refused_and_nothing_changes(tmp_path):
    path = save_adaptive_state(_state(tmp_path), str(tmp_path), global_step=0)
    other = _state(tmp_path / "other", allocator="uniform")
    with pytest.raises(ValueError, match="written with allocator 'knapsack'"):
        restorable_state(other, path)
    with pytest.raises(ValueError, match="written with allocator 'knapsack'"):
        load_adaptive_state(other, path)
    assert other.epochs_closed == 0 and other.prompt_statistics.epoch == 0


@pytest.mark.parametrize("missing", ["prompt_source", "visits", "epoch_position"])
def test_a_state_file_of_another_layout_is_refused_naming_what_it_lacks(tmp_path, missing):
    """No release wrote a state file without every entry: one without is refused, never filled in with a default."""
    path = save_adaptive_state(_state(tmp_path), str(tmp_path), global_step=0)
    saved = json.loads(open(path, encoding="utf-8").read())
    del saved[missing]
    with open(path, "w", encoding="utf-8") as f:
        json.dump(saved, f)
    with pytest.raises(ValueError, match=rf"lacks \['{missing}'\]: it was not written by this version"):
        restorable_state(_state(tmp_path / "fresh"), path)


def test_the_strategy_by_name_is_the_plan_ahead_allocator(tmp_path):
    state = _state(tmp_path)
    assert isinstance(state.procedure, PlanAhead) and state.allocator is state.procedure.allocator


def test_what_the_main_process_shares_each_round_survives_pickling():
    """What ``run_rounds`` hands ``share`` (``broadcast_object_list`` pickles it): each round with its jobs, then the
    outcome; a rank with no procedure (run None) follows the main process's rounds and gets its outcome."""
    ctx = BatchContext(
        prompt_ids=np.arange(4, dtype=np.int64),
        budget=8,
        group_size=2,
        success_threshold=1.0,
        statistics=PromptStatistics().batch,
        draw_prompts=lambda exclude, number: np.zeros(0, dtype=np.int64),
        rng=np.random.default_rng(0),
    )
    shared = []

    def share(value):  # the main process's value, through a pickle as broadcast_object_list sends it
        shared.append(pickle.loads(pickle.dumps(value)))
        return shared[-1]

    def generate(request, jobs):
        assert request.final and len(jobs) == 8
        return np.ones(8), np.full(8, 3.0)

    outcome = run_rounds(BatchRun(PlanAhead(get_allocator("uniform")), ctx), generate, share)
    assert len(shared) == 2 and isinstance(shared[1], Outcome) and len(outcome.selected) == 8
    request, jobs = shared[0]
    np.testing.assert_array_equal(request.prompt_ids, np.arange(4))
    replies = iter(shared)
    follower = run_rounds(None, generate, lambda value: next(replies))  # another rank
    np.testing.assert_array_equal(follower.selected, outcome.selected)

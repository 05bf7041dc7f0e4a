"""The prompt selection sources through AdaptiveGRPOTrainer: a pool drawn from the training data by id, the batch's
prompts composed on the main process, their metrics logged, a pool larger than the data refused at construction."""

from __future__ import annotations

import pytest
from helpers.trainer import build_trainer, make_dataset


@pytest.mark.trainer
@pytest.mark.parametrize("source", ["mopps", "greso", "value_pool"])
def test_a_selection_source_trains_and_logs_what_it_examined(tiny_model_dir, tmp_path, source):
    # 8 completions per step, 4 per prompt: U = 2 prompts per batch, pools of up to 4 x 2 from 16 prompts
    trainer = build_trainer(
        tiny_model_dir, tmp_path, dataset=make_dataset(16), prompt_source=source, max_steps=3, allocator="uniform"
    )
    trainer.train()
    logged = [log for log in trainer.state.log_history if "prompt_source/examined" in log]
    assert len(logged) == 3
    if source in ("mopps", "value_pool"):  # the pool is always 4 x U, and the selection predicts its mixed groups
        assert all(log["prompt_source/examined"] == 8 for log in logged)
        assert all(0.0 <= log["prompt_source/predicted_mixed"] <= 1.0 for log in logged)
    else:  # GRESO examines the offer, and more only when it skipped some
        assert all(2 <= log["prompt_source/examined"] <= 8 for log in logged)
    assert trainer.adaptive_state.prompt_source.name == source


def test_a_pool_larger_than_the_data_is_refused(tiny_model_dir, tmp_path):
    with pytest.raises(ValueError, match=r"pool_factor=4: a pool of 4 x 2 prompts per batch exceeds the 4 prompts"):
        build_trainer(tiny_model_dir, tmp_path, dataset=make_dataset(4), prompt_source="mopps")

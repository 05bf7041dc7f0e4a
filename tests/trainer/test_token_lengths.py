"""The trainer measures every generated completion's length into the store, and plans under a token budget."""

from collections import defaultdict

import numpy as np
import pytest
from helpers.trainer import build_trainer, reward_has_vowel_e

pytestmark = pytest.mark.trainer  # every test here builds a trainer (make test-fast skips them)


class RecordingLengths:
    """reward_has_vowel_e, noting the generated tokens of each completion it scores (every completion is scored
    once: in its planned pass, or in its round)."""

    __name__ = "recording_lengths"

    def __init__(self) -> None:
        self.lengths: dict[int, list[int]] = defaultdict(list)

    def __call__(self, completions, completion_ids, prompt_id, **kwargs):
        for ids, prompt in zip(completion_ids, prompt_id, strict=True):
            self.lengths[int(prompt)].append(len(ids))
        return reward_has_vowel_e(completions)


@pytest.mark.parametrize("allocator", ["knapsack", "reinforce_ada_seq_pos"])  # one planned round; rounds
def test_the_store_learns_each_prompts_mean_generated_tokens(tiny_model_dir, tmp_path, allocator):
    reward = RecordingLengths()
    trainer = build_trainer(
        tiny_model_dir, tmp_path, reward_funcs=reward, allocator=allocator, max_steps=2, length_decay=1.0
    )
    trainer.train()
    ids = np.array(sorted(reward.lengths))
    expected = [np.mean(reward.lengths[i]) for i in ids]  # decay 1.0: the plain mean of every completion
    np.testing.assert_allclose(trainer.prompt_statistics.expected_tokens(ids), expected)
    assert min(len(v) for v in reward.lengths.values()) >= 2


def test_a_token_budget_plans_each_step_once_lengths_are_known(tiny_model_dir, tmp_path):
    trainer = build_trainer(tiny_model_dir, tmp_path, max_steps=3, generation_token_budget=40.0)
    trainer.train()
    logged = [log for log in trainer.state.log_history if "allocation/token_budget" in log]
    assert len(logged) == 3 and all(log["allocation/token_budget"] == 40.0 for log in logged)
    assert logged[0].get("allocation/tokens_expected") is None  # step one: nothing measured yet
    for log in logged[1:]:  # 8 completions of at most 8 tokens: 40 is below what the counts can spend
        fits = log["allocation/tokens_expected"] <= 40.0 + 1e-6
        assert fits != bool(log["allocation/token_budget_infeasible"])

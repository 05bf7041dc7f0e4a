"""Every registered strategy's first epoch without a prior column, as docs/allocators.md ("The first epoch, strategy
by strategy") states it: the procedure the config builds, driven over batches of prompts the statistics store has
never seen, as the trainer drives it (no trainer is built)."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
from helpers import REPO

from trl_adaptive import AdaptiveGRPOConfig
from trl_adaptive.sampling import BatchContext, BatchRun
from trl_adaptive.stats import PromptStatistics
from trl_adaptive.strategies import registered_strategies

G, PROMPTS, MAX_ROLLOUTS, MIN_ROLLOUTS = 8, 16, 16, 2
BUDGET = G * PROMPTS

# what docs/allocators.md says each strategy does in its first epoch, by name (a new strategy must say too)
FIRST_EPOCH = {
    "uniform": "grpo",
    "knapsack": "grpo",
    "bayes_knapsack": "grpo",
    "reinforce_ada_est": "grpo",
    "reinforce_ada_seq_pos": "trains_grpo_generates_more",
    "reinforce_ada_seq_balance": "trains_grpo_generates_more",
    "cero": "max_rollouts_to_the_first_prompts",
    "pilot_commit": "pilot_then_mid_range_prompts",
}
VARIANTS = [(name, {}) for name in sorted(FIRST_EPOCH)] + [("bayes_knapsack", {"pilot_rollouts": 2})]


def test_every_registered_strategy_documents_its_first_epoch():
    assert sorted(FIRST_EPOCH) == sorted(registered_strategies())
    docs = (REPO / "docs" / "allocators.md").read_text()
    table = docs[docs.index("## The first epoch, strategy by strategy") :].split("\n## ")[0]
    rows = {
        name
        for line in table.splitlines()
        if line.startswith("| `")
        for name in re.findall(r"`(\w+)`", line.split("|")[1])
    }
    assert set(FIRST_EPOCH) <= rows, f"docs/allocators.md's first-epoch table lacks {set(FIRST_EPOCH) - rows}"


def _first_epoch(allocator: str, overrides: dict, steps: int = 3):
    """Per step of epoch 0: the batch's prompt ids, the record's prompt ids, trained and generated counts, and each
    prompt's success rate in the step's first round (a pilot's rate)."""
    config = AdaptiveGRPOConfig(
        output_dir="unused",
        allocator=allocator,
        num_generations=G,
        per_device_train_batch_size=BUDGET,
        min_rollouts=MIN_ROLLOUTS,
        max_rollouts=MAX_ROLLOUTS,
        report_to="none",
        use_cpu=True,
        **overrides,
    )
    procedure, store = config.build_procedure(), PromptStatistics()
    success_rate = np.random.default_rng(0).uniform(0.05, 0.95, PROMPTS * (steps + 2))  # per prompt id
    for step in range(steps):
        ids = np.arange(PROMPTS * step, PROMPTS * (step + 1))  # unseen prompts: epoch 0, no prior column

        def draw(exclude, number, step=step):  # further prompts (CERO's pacing), unseen as well
            rest = np.setdiff1d(np.arange(PROMPTS * steps, len(success_rate)), exclude)
            return np.sort(np.random.default_rng([1, step]).choice(rest, min(number, len(rest)), replace=False))

        ctx = BatchContext(ids, BUDGET, G, 1.0, store.batch, draw, np.random.default_rng([2, step]))
        run, rewards_rng, first_round = BatchRun(procedure, ctx), np.random.default_rng([3, step]), None
        while not run.finished:
            request, jobs = run.next_round()
            rewards = (rewards_rng.random(len(jobs)) < success_rate[run.record.prompt_ids[jobs]]).astype(np.float64)
            first_round = (jobs, rewards) if first_round is None else first_round
            run.observe(jobs, rewards)
        outcome = run.outcome()
        record = outcome.record
        generated = np.bincount(record.group_ids, minlength=len(record.prompt_ids))
        jobs, rewards = first_round
        first_rate = np.bincount(jobs, rewards, len(ids)) / np.maximum(np.bincount(jobs, minlength=len(ids)), 1)
        yield ids, record.prompt_ids, outcome.trained_counts, generated, first_rate
        store.update(record.prompt_ids[record.group_ids], record.rewards)
        procedure.end_step(outcome)


@pytest.mark.parametrize(("allocator", "overrides"), VARIANTS, ids=[n + ("+pilot" if o else "") for n, o in VARIANTS])
def test_the_first_epoch_is_what_the_docs_say(allocator, overrides):
    behaviour = "pilot_then_posterior" if overrides else FIRST_EPOCH[allocator]
    for ids, record_ids, trained, generated, pilot_rate in _first_epoch(allocator, overrides):
        assert trained.sum() == BUDGET
        if behaviour == "grpo":  # GRPO's batch: the sampler's prompts, G each, every completion trained
            assert record_ids.tolist() == ids.tolist()
            assert trained.tolist() == generated.tolist() == [G] * PROMPTS
        elif behaviour == "trains_grpo_generates_more":  # G trained each, chosen from rounds of G until the rule
            assert record_ids.tolist() == ids.tolist() and trained.tolist() == [G] * PROMPTS
            assert (generated >= G).all() and (generated % G == 0).all()
        elif behaviour == "max_rollouts_to_the_first_prompts":  # equal duals, mu = 0: the paper's rule at N_max
            given = math.ceil(BUDGET / MAX_ROLLOUTS)
            assert record_ids.tolist() == ids.tolist()  # every sampler prompt is wanted: nothing is drawn
            assert trained.tolist() == generated.tolist() == [MAX_ROLLOUTS] * given + [0] * (PROMPTS - given)
        elif behaviour == "pilot_then_mid_range_prompts":  # a pilot of 4 each; the rest to mid-range pilots
            assert record_ids.tolist() == ids.tolist() and trained.tolist() == generated.tolist()
            mid_range = (pilot_rate >= 0.125) & (pilot_rate <= 0.75)
            assert (trained[~mid_range] == 4).all() and (trained[mid_range] > 4).all()
        else:  # a pilot round of 2 each, then the posterior of what it saw: adaptive from the first step
            assert record_ids.tolist() == ids.tolist() and trained.tolist() == generated.tolist()
            assert (trained >= 2).all() and len(set(trained.tolist())) > 1

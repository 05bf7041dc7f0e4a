"""Two CPU ranks (gloo) training AdaptiveGRPOTrainer with a skewed allocation, launched with ``accelerate launch``.

Checks what a single process cannot: every rank dispatches the same broadcast allocation, holds exactly
L = generation_batch_size / num_processes rows, the ranks' rows together are the expanded allocation in dispatch
order, TRL's gathered rewards line up with those rows, the advantages are the per-group ones, and DDP leaves
identical parameters and statistics on both ranks, without deadlock.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import REPO
from helpers.launch import NUM_PROCESSES, launch_two_ranks

from trl_adaptive.trainer.groups import dispatch_order, group_advantages

SCRIPT = REPO / "tests" / "scripts" / "train_two_ranks.py"


def _launch(model_dir: Path, report_dir: Path, *script_args: str) -> list[dict]:
    return launch_two_ranks(SCRIPT, model_dir, report_dir, *script_args)


DATA = pytest.mark.parametrize("data", ["", "stream-"], ids=["dataset", "stream"])


@pytest.mark.multiprocess
@DATA
def test_two_ranks_skewed_allocation(tiny_model_dir, tmp_path, data):
    ranks = _launch(tiny_model_dir, tmp_path, f"{data}skewed", "3")
    assert all(r["streaming"] == (data == "stream-") for r in ranks)
    assert [r["process_index"] for r in ranks] == [0, 1]
    assert all(r["num_processes"] == 2 and r["distributed_type"] == "DistributedType.MULTI_CPU" for r in ranks)
    total = ranks[0]["generation_batch_size"]
    per_rank = total // NUM_PROCESSES
    assert total == 16 and per_rank == 8
    run0, run1 = ranks[0]["adaptive"], ranks[1]["adaptive"]

    # One generation batch per optimizer step, on both ranks.
    assert len(run0["steps"]) == len(run1["steps"]) == 3
    for step0, step1 in zip(run0["steps"], run1["steps"], strict=True):
        # Both ranks dispatched the same (broadcast) allocation at the same step.
        for key in ("global_step", "prompt_ids", "counts"):
            assert step0[key] == step1[key], key
        ids, counts = np.array(step0["prompt_ids"]), np.array(step0["counts"])
        assert counts.sum() == total and counts.tolist() == [10, 2, 2, 2]  # the skew really happened
        assert len(set(ids.tolist())) == len(ids) == total // 4  # one row per unique prompt

        # Each rank held exactly L rows; together, in rank order, they are the expanded allocation in dispatch order.
        assert len(step0["rows"]) == len(step1["rows"]) == per_rank
        rows = np.array(step0["rows"] + step1["rows"])
        assert sorted(rows.tolist()) == sorted(np.repeat(ids, counts).tolist())
        # The rows are the dispatched jobs (the same layout on both ranks), balanced by the prompts' expected tokens
        # (none known at the first step: every job counts the same, each group is dealt round-robin over the ranks).
        assert step0["group_ids"] == step1["group_ids"]
        group_ids = np.array(step0["group_ids"])
        np.testing.assert_array_equal(rows, ids[group_ids])
        jobs = np.repeat(np.arange(len(counts)), counts)
        lengths = np.array(step0["expected_tokens"])[jobs]
        assert np.isnan(lengths).all() == (step0["global_step"] == 0)
        np.testing.assert_array_equal(group_ids, jobs[dispatch_order(jobs, 0, 0, lengths, NUM_PROCESSES)])
        if step0["global_step"] == 0:
            for piece in (group_ids[:per_rank], group_ids[per_rank:]):
                np.testing.assert_array_equal(np.bincount(piece, minlength=len(counts)), counts // NUM_PROCESSES)

        # TRL's gathered rewards line up with the rows on every rank: the weight-0 reward is the row's prompt id
        # (-1 had the prompt text not been that id's text).
        assert step0["gathered_rewards"] == step1["gathered_rewards"]
        gathered = torch.tensor(step0["gathered_rewards"])
        assert gathered.shape == (total, 2)
        np.testing.assert_array_equal(gathered[:, 1].numpy(), rows.astype(np.float32))

        # The ranks' local advantages, concatenated, are the per-group advantages of the gathered rewards.
        expected = group_advantages(gathered, torch.tensor([1.0, 0.0]), torch.as_tensor(group_ids), len(ids))
        local = torch.tensor(step0["advantages"] + step1["advantages"])
        torch.testing.assert_close(local, expected.advantages, rtol=1e-5, atol=1e-6)

    # DDP kept the replicas identical, and training moved them.
    assert run0["initial_param_hash"] == run1["initial_param_hash"]
    assert run0["param_hash"] == run1["param_hash"]
    assert run0["param_hash"] != run0["initial_param_hash"]
    # Every rank updated its statistics from the same gathered rewards, counting every completion once.
    assert run0["statistics"] == run1["statistics"]
    assert sum(run0["statistics"]["columns"]["total_attempts"]) == 3 * total

    logged = [log for log in run0["log_history"] if "allocation/count_max" in log]
    assert len(logged) == 3
    for log in logged:
        assert log["allocation/count_max"] == 10 and log["allocation/count_min"] == 2
        assert log["allocation/budget_used"] == log["allocation/budget"] == total
        assert np.isfinite(log["loss"])
        # Every completion generated is trained: the generated/* figures (both ranks' completions) are TRL's.
        assert log["generated/reward_mean"] == log["reward"] and log["generated/reward_std"] == log["reward_std"]
        assert log["generated/rewards/reward_length/mean"] == log["rewards/reward_length/mean"]
        # One planned pass per step: the tokens each rank generated are the tokens it trained.
        balance = log["tokens/rank_max_over_mean_training"]
        assert balance >= 1.0 and log["tokens/rank_max_over_mean_generation"] == balance


@pytest.mark.multiprocess
@DATA
def test_two_ranks_uniform_matches_grpo_trainer(tiny_model_dir, tmp_path, data):
    """On 2 ranks, allocator="uniform" keeps TRL's layout: same rows per rank, advantages and parameters as
    GRPOTrainer (both trained in the same launch, one after the other, from the same model and seed), from a
    map-style dataset and from a streaming one."""
    ranks = _launch(tiny_model_dir, tmp_path, f"{data}uniform-vs-grpo", "2")
    assert all(r["streaming"] == (data == "stream-") for r in ranks)
    for rank in ranks:
        grpo, ours = rank["grpo"], rank["adaptive"]
        assert len(grpo["steps"]) == len(ours["steps"]) == 2
        for step_grpo, step_ours in zip(grpo["steps"], ours["steps"], strict=True):
            assert step_ours["counts"] == [4, 4, 4, 4]
            assert step_ours["rows"] == step_grpo["rows"]  # prompt-major, 8 rows per rank, as TRL
            torch.testing.assert_close(
                torch.tensor(step_ours["gathered_rewards"]), torch.tensor(step_grpo["gathered_rewards"])
            )
            torch.testing.assert_close(
                torch.tensor(step_ours["advantages"]), torch.tensor(step_grpo["advantages"]), rtol=1e-5, atol=1e-6
            )
        assert ours["param_hash"] != ours["initial_param_hash"]
        torch.testing.assert_close(torch.tensor(ours["params"]), torch.tensor(grpo["params"]), rtol=1e-5, atol=1e-6)
    assert ranks[0]["adaptive"]["param_hash"] == ranks[1]["adaptive"]["param_hash"]
    assert ranks[0]["grpo"]["param_hash"] == ranks[1]["grpo"]["param_hash"]


@pytest.mark.multiprocess
def test_two_ranks_sampling_in_rounds_keep_log_extra_values_with_their_rows(tiny_model_dir, tmp_path):
    """Seq-Balance on 2 ranks: each round's log_extra values are gathered with its completions, and the table TRL
    keeps (on every rank) shows each trained completion with the value logged when it was scored."""
    ranks = _launch(tiny_model_dir, tmp_path, "seq-extra", "2")
    for rank in ranks:
        table = rank["table"]
        assert len(table["completion"]) == rank["generation_batch_size"]
        assert table["scored_completion"] == table["completion"]
        logged = [log for log in rank["adaptive"]["log_history"] if "generated/reward_mean" in log]
        assert len(logged) == 2
        assert any(log.get("rounds/generated", 0) > log.get("rounds/trained", 0) for log in logged)
        assert all(log["tokens/rank_max_over_mean_generation"] >= 1.0 for log in logged)  # summed over rounds
    assert ranks[0]["table"] == ranks[1]["table"]

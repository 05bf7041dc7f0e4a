"""Pins the TRL 1.16 internals AdaptiveGRPOTrainer overrides: this file fails loudly when trl moves them."""

from __future__ import annotations

import inspect

import trl
from trl import GRPOTrainer

from trl_adaptive import AdaptiveGRPOTrainer

# Private GRPOTrainer hooks we override or call, with the parameters our overrides rely on.
PINNED_HOOKS = {
    "_generate_and_score_completions": ["self", "inputs"],
    "_calculate_rewards": ["self", "inputs", "prompts", "completions", "completion_ids_list"],
    "_generate_single_turn": [
        "self",
        "prompt_ids",
        "images",
        "multimodal_fields",
        "num_generations",
        "has_tool_images",
    ],
    "_get_train_sampler": ["self", "dataset"],
    "_generate": ["self", "prompts"],
    "_save_checkpoint": ["self", "model", "trial"],
    "_load_optimizer_and_scheduler": ["self", "checkpoint"],
    # transformers.Trainer hooks (reached through GRPOTrainer): epoch closing, sampler reseeding, crash-safe resume.
    "_set_signature_columns_if_needed": ["self"],
    "_run_epoch": [
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
    "_init_training_state": [
        "self",
        "max_steps",
        "num_update_steps_per_epoch",
        "num_train_epochs",
        "resume_from_checkpoint",
        "trial",
    ],
}


def test_trl_version_is_the_pinned_minor():
    assert trl.__version__.startswith("1.16."), f"trl_adaptive is pinned to trl 1.16.x, found {trl.__version__}"


def test_overridden_hooks_exist_with_expected_signatures():
    for name, params in PINNED_HOOKS.items():
        assert hasattr(GRPOTrainer, name), f"GRPOTrainer.{name} no longer exists in trl {trl.__version__}"
        assert list(inspect.signature(getattr(GRPOTrainer, name)).parameters) == params, name
        assert name in AdaptiveGRPOTrainer.__dict__, f"AdaptiveGRPOTrainer no longer overrides {name}"


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
    # A round (rounds.run_round) runs the parent up to its _generate call and stops there: nothing before that call
    # may talk across ranks, or the ranks would part ways; and it merges a rollout_func's extra fields as TRL does.
    before_generate = parent[: parent.index("self._generate(prompts)")]
    for collective in ("gather", "broadcast", "reduce", "wait_for_everyone", "all_"):
        assert collective not in before_generate, collective
    assert "inp[key] = values[i]" in parent
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

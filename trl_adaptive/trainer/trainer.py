"""AdaptiveGRPOTrainer: TRL's GRPOTrainer with a per-prompt number of completions chosen by an allocator.

Each override names the TRL 1.16 method it departs from and why; the allocation policy itself lives in
``trl_adaptive.allocation`` and the per-prompt statistics in ``trl_adaptive.stats``. The data path of one generation
batch (T = generation_batch_size completions, U = T / num_generations prompts, L = T / num_processes per rank):

    TRL sampler rows (U prompts x G copies, L per rank)
      -> gather, keep one row per prompt                       (_unique_prompt_rows)
      -> main process: allocator.allocate(p_i, T) -> counts   (broadcast to every rank)
      -> expand to T jobs, shuffle by (seed, step), L per rank (dispatch.py)
      -> GRPOTrainer generates and scores one completion per row (num_generations forced to 1)
      -> segment-wise advantages over variable groups         (advantages.py)
      -> per-prompt statistics updated on every rank          (stats.py)
"""

from __future__ import annotations

import copy
import json
import os
import time
from typing import Any

import numpy as np
import torch
from accelerate.utils import broadcast_object_list, gather_object
from datasets import Dataset
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR
from trl import GRPOTrainer

from ..allocation import Allocator, get_allocator, prompts_per_status
from ..stats import PromptStatistics
from .advantages import group_advantages
from .callback import SuccessRateCallback
from .config import AdaptiveGRPOConfig
from .dispatch import expand_counts, rank_slice
from .sampler import EpochSeededRepeatSampler

STATE_FILE = "adaptive_state.json"
STATE_FORMAT_VERSION = 1


class AdaptiveGRPOTrainer(GRPOTrainer):
    """GRPOTrainer whose generation batch gives each prompt its own number of completions.

    Drop-in for [`~trl.GRPOTrainer`]: same arguments, plus ``allocator`` (an :class:`Allocator` object overriding
    ``args.allocator``) and ``statistics`` (a :class:`PromptStatistics` to start from, e.g. a previous run's).

    Example:
        ```python
        from trl_adaptive import AdaptiveGRPOConfig, AdaptiveGRPOTrainer

        args = AdaptiveGRPOConfig(output_dir="out", allocator="knapsack", num_generations=8)
        trainer = AdaptiveGRPOTrainer(model="Qwen/Qwen2.5-0.5B-Instruct", reward_funcs=reward, args=args,
                                      train_dataset=dataset)
        trainer.train()
        trainer.train_dataset["success_rate"]  # per-prompt success rate, NaN until seen
        ```
    """

    def __init__(
        self,
        model: Any,
        reward_funcs: Any = None,
        args: AdaptiveGRPOConfig | None = None,
        train_dataset: Dataset | None = None,
        *positional: Any,
        allocator: Allocator | None = None,
        statistics: PromptStatistics | None = None,
        **kwargs: Any,
    ) -> None:
        if args is None:
            args = AdaptiveGRPOConfig(output_dir="adaptive-grpo")
        elif not isinstance(args, AdaptiveGRPOConfig):
            raise TypeError(
                f"args must be an AdaptiveGRPOConfig, got {type(args).__name__}. Build it with "
                "AdaptiveGRPOConfig(**your_grpo_config.to_dict()) or use the same fields."
            )
        _reject_unsupported_features(train_dataset, args, kwargs)
        train_dataset = prepare_train_dataset(train_dataset, args.prompt_id_column, args.success_rate_column)

        self.allocator = allocator if allocator is not None else _build_allocator(args)
        num_prompts = args.generation_batch_size // args.num_generations
        self.allocator.check_budget(num_prompts, args.generation_batch_size)
        self.prompt_statistics = statistics or PromptStatistics(success_threshold=args.success_threshold)
        self._rewards_per_func: torch.Tensor | None = None

        super().__init__(model, reward_funcs, args, train_dataset, *positional, **kwargs)
        self.add_callback(SuccessRateCallback(self))
        self.refresh_success_rate_column()

    # ---------------------------------------------------------------------------------------------------------------
    # Overrides of GRPOTrainer's private hooks (trl 1.16; pinned by tests/test_trl_contract.py)
    # ---------------------------------------------------------------------------------------------------------------
    def _get_train_sampler(self, dataset: Dataset | None = None) -> EpochSeededRepeatSampler:
        """Same sampler as TRL (L1280) with ``set_epoch``, so a resumed run draws the prompts it would have drawn."""
        return EpochSeededRepeatSampler(
            data_source=dataset if dataset is not None else self.train_dataset,
            mini_repeat_count=self.num_generations,
            batch_size=self.args.generation_batch_size // self.num_generations,
            repeat_count=self.num_iterations * self.args.steps_per_generation,
            shuffle=self.shuffle_dataset,
            seed=self.args.seed,
        )

    def _generate_single_turn(self, prompt_ids, images, multimodal_fields, num_generations, has_tool_images=False):
        """Departs from TRL: in training every row already stands for ONE completion, so ask for one per row.

        In vLLM server mode this sends all T (duplicated) prompts in a single ``/v1/completions`` request with
        ``n=1`` instead of ``prompts[::G]`` with ``n=G``; colocate and transformers ``generate`` already work per row.
        """
        if self.model.training:
            num_generations = 1
        return super()._generate_single_turn(prompt_ids, images, multimodal_fields, num_generations, has_tool_images)

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        """Unchanged; keeps the gathered ``(T, K)`` rewards so the advantages can be recomputed per variable group."""
        rewards_per_func = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        self._rewards_per_func = rewards_per_func
        return rewards_per_func

    def _generate_and_score_completions(self, inputs: list[dict[str, Any]]) -> dict[str, Any]:
        """Departs from TRL in training: allocate, expand and dispatch the prompts, then regroup the advantages.

        Evaluation keeps TRL's fixed ``num_generations_eval`` groups.
        """
        if not self.model.training:
            return super()._generate_and_score_completions(inputs)

        total = self.args.generation_batch_size
        prompt_rows = self._unique_prompt_rows(inputs)
        prompt_ids = np.array([row[self.args.prompt_id_column] for row in prompt_rows], dtype=np.int64)
        counts, weights, success_rates, solve_seconds = self._allocate(prompt_ids, total)

        group_ids = expand_counts(counts, self.args.seed, self.state.global_step)
        local = rank_slice(total, self.accelerator.num_processes, self.accelerator.process_index)
        local_rows = [copy.copy(prompt_rows[g]) for g in group_ids[local]]  # the parent mutates rows (extra fields)

        self._rewards_per_func = None
        output = super()._generate_and_score_completions(local_rows)
        rewards_per_func = self._rewards_per_func
        if rewards_per_func is None or tuple(rewards_per_func.shape) != (total, len(self.reward_funcs)):
            raise RuntimeError(
                f"Expected TRL's gathered rewards of shape ({total}, {len(self.reward_funcs)}), got "
                f"{None if rewards_per_func is None else tuple(rewards_per_func.shape)}. trl_adaptive is pinned to "
                "trl 1.16; a different trl version changed GRPOTrainer's internals."
            )

        group_ids_t = torch.as_tensor(group_ids, device=rewards_per_func.device)
        result = group_advantages(
            rewards_per_func,
            self.reward_weights,
            group_ids_t,
            len(prompt_rows),
            self.scale_rewards,
            self.multi_objective_aggregation,
        )
        advantages = result.advantages * self._completion_scale(counts, weights, group_ids).to(result.advantages)
        output["advantages"] = advantages[local]

        rewards = result.rewards.cpu().numpy().astype(np.float64)
        self.prompt_statistics.update(prompt_ids[group_ids], rewards)
        self._log_allocation(counts, group_ids, rewards, result.group_std, advantages, success_rates, solve_seconds)
        return output

    def _save_checkpoint(self, model, trial):
        """Adds ``adaptive_state.json`` (statistics + allocator state) to each checkpoint folder, as TRL does for
        its entropy controller (grpo_trainer.py L3384)."""
        super()._save_checkpoint(model, trial)
        if self.args.should_save:
            folder = os.path.join(
                self._get_output_dir(trial=trial), f"{PREFIX_CHECKPOINT_DIR}-{self.state.global_step}"
            )
            self.save_adaptive_state(folder)

    def _load_optimizer_and_scheduler(self, checkpoint):
        super()._load_optimizer_and_scheduler(checkpoint)
        if checkpoint is not None:
            path = os.path.join(checkpoint, STATE_FILE)
            if not os.path.exists(path):
                raise FileNotFoundError(
                    f"Resuming from {checkpoint}, which has no {STATE_FILE}: it was not written by "
                    "AdaptiveGRPOTrainer, so the per-prompt statistics cannot be restored."
                )
            self.load_adaptive_state(path)

    # ---------------------------------------------------------------------------------------------------------------
    # Allocation, statistics and state
    # ---------------------------------------------------------------------------------------------------------------
    def _unique_prompt_rows(self, inputs: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """One row per prompt of the global generation batch, in sampler order (TRL repeats each prompt G times)."""
        rows = gather_object(inputs) if self.accelerator.num_processes > 1 else list(inputs)
        num_generations = self.num_generations
        if len(rows) != self.args.generation_batch_size:
            raise RuntimeError(
                f"Expected {self.args.generation_batch_size} rows in the generation batch, got {len(rows)}."
            )
        column = self.args.prompt_id_column
        ids = np.array([row[column] for row in rows]).reshape(-1, num_generations)
        if not (ids == ids[:, :1]).all():
            raise RuntimeError(
                "TRL's sampler no longer repeats each prompt num_generations times in a row; trl_adaptive is pinned "
                "to trl 1.16's RepeatSampler layout."
            )
        return rows[::num_generations]

    def _allocate(self, prompt_ids: np.ndarray, total: int) -> tuple[np.ndarray, np.ndarray | None, np.ndarray, float]:
        """Solve on the main process only and broadcast, so every rank dispatches the same jobs."""
        payload: list[Any] = [None]
        if self.accelerator.is_main_process:
            stats = self.prompt_statistics.batch(prompt_ids)
            start = time.perf_counter()
            counts = self.allocator.allocate(stats.success_rate, total, stats=stats)
            weights = self.allocator.completion_weights(counts, stats)
            payload = [(counts, weights, stats.success_rate, time.perf_counter() - start)]
        if self.accelerator.num_processes > 1:
            broadcast_object_list(payload, from_process=0)
        return payload[0]

    def _completion_scale(self, counts: np.ndarray, weights: np.ndarray | None, group_ids: np.ndarray) -> torch.Tensor:
        """Per-completion advantage multiplier: allocator weights and, optionally, equal weight per prompt."""
        scale = np.ones(len(counts), dtype=np.float64)
        if weights is not None:
            scale *= np.asarray(weights, dtype=np.float64)
        if self.args.equal_prompt_weighting:
            sampled = counts > 0
            scale[sampled] *= counts.sum() / sampled.sum() / counts[sampled]
        return torch.as_tensor(scale[group_ids], dtype=torch.float32)

    def _log_allocation(self, counts, group_ids, rewards, group_std, advantages, success_rates, solve_seconds) -> None:
        """Allocation metrics (DESIGN section 3) into TRL's metric stream, and fixes to what TRL logged per group."""
        metrics = self._metrics["train"]
        sampled = counts > 0
        group_std = group_std.cpu().numpy()
        has_signal = np.nan_to_num(group_std) > 1e-6  # TRL: torch.isclose(std, 0)
        success = rewards >= self.prompt_statistics.success_threshold
        successes = np.bincount(group_ids, weights=success.astype(np.float64), minlength=len(counts))
        all_correct = sampled & ~has_signal & (successes == counts)
        all_wrong = sampled & ~has_signal & (successes == 0)
        total = counts.sum()
        metrics["allocation/effective_gradient_ratio"].append(float(counts[has_signal].sum() / total))
        metrics["allocation/zero_gradient_ratio_all_correct"].append(float(counts[all_correct].sum() / total))
        metrics["allocation/zero_gradient_ratio_all_wrong"].append(float(counts[all_wrong].sum() / total))
        metrics["allocation/effective_prompt_ratio"].append(float(has_signal[sampled].mean()))
        metrics["allocation/prompts_skipped"].append(float((~sampled).sum()))
        spread = {"min": counts.min(), "mean": counts.mean(), "max": counts.max()}
        spread |= {"p50": np.quantile(counts, 0.5), "p90": np.quantile(counts, 0.9)}
        for name, value in spread.items():
            metrics[f"allocation/count_{name}"].append(float(value))
        metrics["allocation/budget_used"].append(float(total))
        metrics["allocation/budget"].append(float(self.args.generation_batch_size))
        metrics["allocation/solve_time_s"].append(float(solve_seconds))
        for bucket, number in prompts_per_status(success_rates).items():
            metrics[f"prompt_status/{bucket}"].append(float(number))
        # TRL grouped by view(-1, G); replace its per-group figures with the real groups'.
        metrics["frac_reward_zero_std"][-1] = float(1.0 - has_signal[group_ids].mean())
        self._logs["advantages"].clear()
        self._logs["advantages"].extend(advantages.tolist())
        self._logs["extra"]["group_size"].extend(counts[group_ids].tolist())

    def refresh_success_rate_column(self) -> None:
        """Rewrite the dataset's success-rate column from the statistics store (NaN for prompts not yet seen)."""
        column = self.args.success_rate_column
        ids = np.asarray(self.train_dataset[self.args.prompt_id_column], dtype=np.int64)
        rates = self.prompt_statistics.success_rates(ids).astype(np.float64)
        dataset = self.train_dataset
        if column in dataset.column_names:
            dataset = dataset.remove_columns(column)
        self.train_dataset = dataset.add_column(column, rates.tolist())

    def save_adaptive_state(self, folder: str) -> str:
        """Write statistics and allocator state to ``folder/adaptive_state.json`` atomically (temp file + rename)."""
        os.makedirs(folder, exist_ok=True)
        state = {
            "format_version": STATE_FORMAT_VERSION,
            "allocator": {"name": self.allocator.name, "state": self.allocator.state_dict()},
            "statistics": self.prompt_statistics.state_dict(),
        }
        path = os.path.join(folder, STATE_FILE)
        tmp = f"{path}.tmp-{os.getpid()}"
        with open(tmp, "w") as f:
            json.dump(state, f)
        os.replace(tmp, path)
        return path

    def load_adaptive_state(self, path: str) -> None:
        with open(path) as f:
            state = json.load(f)
        if state.get("format_version") != STATE_FORMAT_VERSION:
            raise ValueError(f"{path}: unsupported format_version {state.get('format_version')!r}.")
        if state["allocator"]["name"] != self.allocator.name:
            raise ValueError(
                f"{path} was written with allocator {state['allocator']['name']!r} but this run uses "
                f"{self.allocator.name!r}; resume with the same allocator."
            )
        self.prompt_statistics.load_state_dict(state["statistics"])
        self.allocator.load_state_dict(state["allocator"]["state"])
        self.refresh_success_rate_column()


# -------------------------------------------------------------------------------------------------------------------
# Construction-time checks
# -------------------------------------------------------------------------------------------------------------------
def _build_allocator(args: AdaptiveGRPOConfig) -> Allocator:
    kwargs = dict(args.allocator_kwargs or {})
    kwargs.setdefault("min_rollouts", args.min_rollouts)
    if args.max_rollouts is not None:
        kwargs.setdefault("max_rollouts", args.max_rollouts)
    return get_allocator(args.allocator, **kwargs)


def _reject_unsupported_features(train_dataset: Any, args: AdaptiveGRPOConfig, kwargs: dict[str, Any]) -> None:
    """Fail at construction for TRL features whose data path this trainer does not (yet) serve."""
    for name in ("rollout_func", "tools", "environment_factory"):
        if kwargs.get(name) is not None:
            raise NotImplementedError(
                f"AdaptiveGRPOTrainer does not support `{name}` yet: its rollouts bypass the per-prompt allocation. "
                "Use GRPOTrainer for this run."
            )
    if train_dataset is None or not isinstance(train_dataset, Dataset):
        raise TypeError(
            f"AdaptiveGRPOTrainer needs a map-style datasets.Dataset as train_dataset (got "
            f"{type(train_dataset).__name__}): prompt ids and the success-rate column are stored per row. "
            "Materialise an IterableDataset with Dataset.from_generator or .take(n)."
        )
    if {"image", "images"} & set(train_dataset.column_names):
        raise NotImplementedError("AdaptiveGRPOTrainer does not support multimodal (image) prompts yet.")
    if args.use_vllm and "seed" in (args.generation_kwargs or {}):
        raise ValueError(
            "generation_kwargs['seed'] is set: with vLLM the trainer asks for each completion as its own copy of the "
            "prompt with n=1, and a fixed seed makes every copy produce the same completion (zero-variance groups). "
            "Remove the seed from generation_kwargs."
        )


def prepare_train_dataset(dataset: Dataset, id_column: str, rate_column: str) -> Dataset:
    """Check the prompt column, add or validate stable prompt ids, and reset the success-rate column."""
    if "prompt" not in dataset.column_names:
        raise ValueError(f"train_dataset has no 'prompt' column (columns: {dataset.column_names}). Rename yours.")
    if id_column in dataset.column_names:
        ids = np.asarray(dataset[id_column])
        if ids.dtype.kind not in "iu":
            raise TypeError(
                f"train_dataset column {id_column!r} must hold integers (stable prompt ids), got dtype {ids.dtype}. "
                f"Drop it to let the trainer number the rows, or set prompt_id_column to another name."
            )
        unique, counts = np.unique(ids, return_counts=True)
        if len(unique) != len(ids):
            raise ValueError(
                f"train_dataset column {id_column!r} has duplicate ids, e.g. {unique[counts > 1][:5].tolist()}: "
                "each row needs its own id (repeated prompt texts are fine, repeated ids are not)."
            )
    else:
        dataset = dataset.add_column(id_column, list(range(len(dataset))))
    if rate_column in dataset.column_names:
        kind = np.asarray(dataset[rate_column]).dtype.kind
        if kind != "f":
            raise TypeError(
                f"train_dataset already has a column {rate_column!r} of dtype kind {kind!r}; the trainer writes "
                "float success rates there. Rename your column or set success_rate_column to another name."
            )
    return dataset

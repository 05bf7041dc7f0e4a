"""AdaptiveGRPOTrainer: TRL's GRPOTrainer with a per-prompt number of completions chosen by an allocator.

Each override names the TRL 1.16 method it departs from and why; the allocation policy lives in
``trl_adaptive.allocation``, the sampling procedures in ``trl_adaptive.sampling``, the per-prompt statistics in
``trl_adaptive.stats``. A training generation batch is ``generation_batch.py``, read top to bottom, which calls TRL's
hooks and never re-enters GRPOTrainer's ``_generate_and_score_completions``; what stays here are the overrides TRL
calls: the sampler, the epoch and resume hooks, checkpoints, one completion per row in ``_generate_single_turn``.
Below the class: its sampler (:class:`EpochSeededRepeatSampler`, whose shuffle order is a function of the epoch, so
that resuming restores the prompt order) and its two callbacks (the success-rate column, the allocation log).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import torch
from datasets import Dataset
from torch import nn
from transformers import TrainerCallback
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR
from trl import GRPOTrainer
from trl.trainer.utils import RepeatSampler

from ..allocation import Allocator
from ..sampling import Procedure
from ..serving.vllm_cpu import cpu_vllm_construction, use_reload_for_colocate
from ..stats import PromptStatistics
from .config import AdaptiveGRPOConfig
from .generation_batch import GenerationBatches
from .inputs import (
    RewardChecks,
    build_procedure_from_config,
    checked_reward_function,
    reject_unsupported_features,
    warn_if_saves_split_generation_batches,
)
from .model_card import allocation_summary, extend_model_card
from .output_files import start_allocation_log
from .persistence import (
    check_checkpoint_to_resume,
    checkpoint_to_resume,
    load_adaptive_state,
    load_checkpoint_state,
    resume_position,
    save_adaptive_state,
)
from .state import AdaptiveState, checked_training_prompts


class AdaptiveGRPOTrainer(GRPOTrainer):
    """GRPOTrainer whose generation batch gives each prompt its own number of completions.

    Drop-in for [`~trl.GRPOTrainer`]: same arguments, plus ``allocator`` (an :class:`Allocator` or a sampling
    :class:`~trl_adaptive.sampling.Procedure` overriding ``args.allocator``) and ``statistics`` (a
    :class:`PromptStatistics` to start from, e.g. a previous run's).

    Example:
        ```python
        from trl_adaptive import AdaptiveGRPOConfig, AdaptiveGRPOTrainer

        args = AdaptiveGRPOConfig(output_dir="out", allocator="knapsack", num_generations=8)
        trainer = AdaptiveGRPOTrainer(model="Qwen/Qwen2.5-0.5B-Instruct", reward_funcs=reward, args=args,
                                      train_dataset=dataset)
        trainer.train()
        trainer.train_dataset["success_rate"]  # per-prompt success rate, NaN until seen
        ```

    A callback with an ``on_generation_batch_end(args, state, control, batch, **kwargs)`` method sees every training
    generation batch as it ends (``batch``: :class:`~trl_adaptive.trainer.generation_batch.GenerationBatchEnd`).
    """

    def __init__(
        self,
        model: Any,
        reward_funcs: Any = None,
        args: AdaptiveGRPOConfig | None = None,
        train_dataset: Dataset | None = None,
        *positional: Any,
        allocator: Allocator | Procedure | None = None,
        statistics: PromptStatistics | None = None,
        **kwargs: Any,
    ) -> None:
        if args is None:
            args = AdaptiveGRPOConfig(output_dir="adaptive-grpo")
        elif not isinstance(args, AdaptiveGRPOConfig):
            raise TypeError(
                f"args must be an AdaptiveGRPOConfig, got {type(args).__name__}. Convert it with "
                "AdaptiveGRPOConfig.from_grpo_config(your_grpo_config, allocator=...)."
            )
        train_dataset, reset_rows = reject_unsupported_features(train_dataset, args, positional, kwargs)
        # The training prompts, the sampling procedure, the statistics and the epoch bookkeeping: state.py
        prompts = checked_training_prompts(train_dataset, args)
        train_dataset, size = prompts.dataset, None if prompts.streaming else len(prompts.dataset)
        procedure = build_procedure_from_config(args, size, allocator, reset_rows)  # its warnings point at the caller
        self.adaptive_state = AdaptiveState.for_run(prompts, procedure, statistics, args)
        self._train_sampler: EpochSeededRepeatSampler | None = None
        self._runs_started = 0  # train() calls: a second one without resuming counts its epochs from 0 again
        cpu_paths = cpu_vllm_construction(
            args.use_vllm,
            args.vllm_mode,
            device_is_cuda=args.device.type == "cuda",
            reload_dir=args.vllm_weight_reload_dir,
            sleep_mode=args.vllm_enable_sleep_mode,
        )
        trl_dataset = reset_rows.trl_dataset(train_dataset) if reset_rows else train_dataset
        with cpu_paths as cpu:
            super().__init__(model, reward_funcs, args, trl_dataset, *positional, **kwargs)
        self.train_dataset = train_dataset  # TRL's placeholders made its checks; ours carries the prompt ids
        # A reward function's wrong output is named (inputs.py), not torch's error inside _calculate_rewards
        self.reward_funcs = [
            func if isinstance(func, nn.Module) else checked_reward_function(func, name)
            for func, name in zip(self.reward_funcs, self.reward_func_names, strict=True)
        ]
        if cpu and args.vllm_mode == "colocate":
            use_reload_for_colocate(self.vllm_generation)  # TRL's in-place load_weights fails on vLLM-CPU
        self.add_callback(SuccessRateCallback(self.adaptive_state, self.refresh_success_rate_column))
        self.add_callback(AllocationLogCallback())
        # Each training generation batch (generation_batch.py); warnings, once each, about rewards (inputs.py)
        checks = RewardChecks(self.scale_rewards)
        self.generation_batches = GenerationBatches(self, self.adaptive_state, reset_rows, checks)
        self.refresh_success_rate_column()
        warn_if_saves_split_generation_batches(args)

    @property
    def prompt_statistics(self) -> PromptStatistics:
        """The per-prompt statistics store (success rates, evidence and expected lengths of every prompt seen), saved
        with every checkpoint and as ``output_dir/prompt_statistics.json`` when training ends."""
        return self.adaptive_state.prompt_statistics

    @property
    def procedure(self) -> Procedure:
        """The sampling procedure that decides each generation batch's rounds (``trl_adaptive.sampling``), built from
        ``args`` or around the ``allocator`` passed to the trainer."""
        return self.adaptive_state.procedure

    @property
    def allocator(self) -> Allocator | Procedure:
        """The strategy by name: the procedure's plan-ahead :class:`Allocator`, or the round procedure that takes its
        place (Reinforce-Ada Seq)."""
        return self.adaptive_state.allocator

    @property
    def training_prompts(self) -> Any:
        """The training data's prompts (``trainer/state.py``): a dataset's, or a stream's, learned as it comes."""
        return self.adaptive_state.training_prompts

    @property
    def statistics_hold_the_run(self) -> bool:
        """Whether ``prompt_statistics`` holds this run's statistics: False from a resume's start until its checkpoint
        is restored (no ``prompt_statistics.json`` is written from the store meanwhile)."""
        return self.adaptive_state.statistics_hold_the_run

    @statistics_hold_the_run.setter
    def statistics_hold_the_run(self, value: bool) -> None:
        self.adaptive_state.statistics_hold_the_run = value

    # ---------------------------------------------------------------------------------------------------------------
    # Overrides of GRPOTrainer's private hooks (trl 1.16; pinned by tests/test_trl_contract.py)
    # ---------------------------------------------------------------------------------------------------------------
    def _get_train_sampler(self, dataset: Dataset | None = None) -> EpochSeededRepeatSampler:
        """TRL's ``_get_train_sampler`` with ``set_epoch``, so a resumed run draws the prompts it would have drawn."""
        self._train_sampler = EpochSeededRepeatSampler(
            data_source=dataset if dataset is not None else self.train_dataset,
            mini_repeat_count=self.num_generations,
            batch_size=self.args.generation_batch_size // self.num_generations,
            repeat_count=self.num_iterations * self.args.steps_per_generation,
            shuffle=self.shuffle_dataset,
            seed=self.args.seed,
        )
        return self._train_sampler

    def _set_signature_columns_if_needed(self):
        """Keep the prompt-id and success-rate columns when ``remove_unused_columns=True`` drops the others."""
        super()._set_signature_columns_if_needed()
        extra = [self.args.prompt_id_column, self.args.success_rate_column]
        self._signature_columns = [*self._signature_columns, *(c for c in extra if c not in self._signature_columns)]

    def _run_epoch(self, model, epoch, *args, **kwargs):
        """Departs from transformers: before epoch ``epoch`` runs, close every earlier epoch in the statistics and
        reseed the sampler, whatever path led here.

        transformers writes a checkpoint on the last step of an epoch BEFORE ``on_epoch_end``, and a run resumed
        from it starts at the next epoch without calling ``on_epoch_end``: closing here is what makes that resume
        exact. Under accelerate's shard / skip samplers (several processes, mid-epoch resume) the trainer's
        ``set_epoch`` never reaches our sampler, so it is set here directly.
        """
        if self.adaptive_state.begin_epoch(epoch, self.state.global_step):
            self.refresh_success_rate_column()
        if self._train_sampler is not None:
            self._train_sampler.set_epoch(epoch)
        if self.state.global_step >= self.state.max_steps > 0:  # a stream resumed from its final checkpoint:
            self.control.should_training_stop = True  # transformers' epoch loop would start a pass and train on;
            # the checkpoint precedes the on_epoch_end the run ended with
            if self.adaptive_state.close_epochs_through(epoch + 1):
                self.refresh_success_rate_column()
            return None
        return super()._run_epoch(model, epoch, *args, **kwargs)

    def _init_training_state(
        self, max_steps, num_update_steps_per_epoch, num_train_epochs, resume_from_checkpoint, trial
    ):
        """Remembers how many epochs a resumed run has completed, for :meth:`_load_optimizer_and_scheduler` (a run
        resumed from its final checkpoint runs no epoch at all, so ``_run_epoch`` cannot close them). Departs from
        transformers for a stream: it resumes at its checkpoint's pass and step (``persistence.resume_position``)."""
        position = super()._init_training_state(
            max_steps, num_update_steps_per_epoch, num_train_epochs, resume_from_checkpoint, trial
        )
        return resume_position(
            self.adaptive_state, self.args, self.state.global_step, position, resume_from_checkpoint
        )

    def train(self, resume_from_checkpoint: str | bool | None = None, *args, **kwargs):
        """``resume_from_checkpoint=True`` resumes from the newest checkpoint whose state this run can restore
        (``persistence.checkpoint_to_resume``); an explicit path that cannot be resumed is refused before anything is
        loaded. The final ``prompt_statistics.json`` is written however training ends (finished, stopped or
        interrupted), but not by a resume that failed before restoring the statistics. Called again without a resume,
        training continues from this trainer's model and statistics, its epochs counted from 0 again (as
        transformers counts them)."""
        if resume_from_checkpoint is True:
            resume_from_checkpoint = checkpoint_to_resume(self.adaptive_state, self.args.output_dir)
        elif resume_from_checkpoint:  # an explicit path: refused before transformers loads anything from it
            check_checkpoint_to_resume(self.adaptive_state, resume_from_checkpoint)
        fresh = resume_from_checkpoint in (None, False)
        if fresh and self._runs_started and self.adaptive_state.start_another_run():
            self.refresh_success_rate_column()  # train() again: the last run's open epoch closed, epochs from 0
        self._runs_started += 1
        # A resume holds the run's statistics only once its checkpoint is restored (load_checkpoint_state).
        self.statistics_hold_the_run = fresh
        try:
            return super().train(resume_from_checkpoint, *args, **kwargs)
        finally:
            self.save_final_statistics()

    def _generate_single_turn(self, prompt_ids, images, multimodal_fields, num_generations, has_tool_images=False):
        """Departs from TRL: in training every row already stands for ONE completion, so ask for one per row (vLLM
        server mode: all T prompts in one ``/v1/completions`` request with ``n=1``, not ``prompts[::G]`` with ``n=G``).
        """
        if self.model.training:
            num_generations = 1
        return super()._generate_single_turn(prompt_ids, images, multimodal_fields, num_generations, has_tool_images)

    def _generate_and_score_completions(self, inputs: list[dict[str, Any]]) -> dict[str, Any]:
        """Replaced in training: the sampling procedure (``self.procedure``) decides which prompts get how many
        completions, in one planned round or in several; the advantages are computed over the real groups
        (``generation_batch.py``). Evaluation is TRL's, with its fixed ``num_generations_eval`` groups.
        """
        if not self.model.training:
            output = super()._generate_and_score_completions(inputs)
            # Keep the completions table's group_size column aligned with evaluation's fixed groups.
            num_completions = len(inputs) * self.accelerator.num_processes
            self._logs["extra"]["group_size"].extend([self.num_generations_eval] * num_completions)
            return output
        return self.generation_batches.run(inputs)

    def _save_checkpoint(self, model, trial):
        """Writes ``adaptive_state.json`` FIRST, then lets TRL write the rest; see ``output_files.py`` for why this
        order makes every save crash-safe (TRL's ``_save_checkpoint`` saves its entropy controller's state last)."""
        if self.args.should_save:
            folder = os.path.join(
                self._get_output_dir(trial=trial), f"{PREFIX_CHECKPOINT_DIR}-{self.state.global_step}"
            )
            self.save_adaptive_state(folder)
        super()._save_checkpoint(model, trial)

    def _load_optimizer_and_scheduler(self, checkpoint):
        """Unchanged, then restores this trainer's own state from the same checkpoint (``persistence.py``)."""
        super()._load_optimizer_and_scheduler(checkpoint)
        if checkpoint is not None:
            load_checkpoint_state(self.adaptive_state, checkpoint)
            self.refresh_success_rate_column()

    # ---------------------------------------------------------------------------------------------------------------
    # Allocation, statistics and state
    # ---------------------------------------------------------------------------------------------------------------
    def refresh_success_rate_column(self) -> None:
        """Rewrite the dataset's success-rate column from the statistics store (NaN for prompts not yet seen; a
        streaming dataset has no column to rewrite: its rates are in ``prompt_statistics``)."""
        self.train_dataset = self.training_prompts.with_success_rates(self.train_dataset, self.prompt_statistics)

    def save_adaptive_state(self, folder: str) -> str:
        """Write statistics, the procedure's state tree and epoch bookkeeping to ``folder/adaptive_state.json``,
        atomically."""
        return save_adaptive_state(self.adaptive_state, folder, self.state.global_step)

    def load_adaptive_state(self, path: str) -> None:
        """Restore what :meth:`save_adaptive_state` wrote; refuses statistics of other prompts (fingerprints)."""
        load_adaptive_state(self.adaptive_state, path)
        self.refresh_success_rate_column()

    def save_final_statistics(self) -> None:
        """Write the store to ``output_dir/prompt_statistics.json`` (main process), atomically; nothing while a
        resume has not restored its checkpoint's statistics (the file keeps the run's, not an empty store)."""
        if self.args.should_save:
            self.adaptive_state.save_final_statistics(self.args.output_dir)

    def create_model_card(self, model_name=None, dataset_name=None, tags=None, statistics_repo_id=None) -> None:
        """TRL's GRPO card (base_trainer.py) plus an "Adaptive allocation" section (allocator, hyperparameters,
        budget, final allocation statistics) and the allocator's paper in the citations (``model_card.py``)."""
        if model_name is None:  # as GRPOTrainer._save_checkpoint names it
            model_name = (self.args.hub_model_id or self.args.output_dir).rstrip("/").split("/")[-1]
        super().create_model_card(model_name=model_name, dataset_name=dataset_name, tags=tags)
        if self.is_world_process_zero():
            card_path = os.path.join(self.args.output_dir, "README.md")
            extend_model_card(card_path, self.allocation_summary(), self.args, statistics_repo_id)

    def allocation_summary(self) -> dict[str, Any]:
        """The model card's numbers as a dict: allocator and hyperparameters, budget, last and run-mean of the logged
        allocation metrics, prompt-status counts (``model_card.allocation_summary``)."""
        return allocation_summary(
            allocator=self.allocator,
            args=self.args,
            statistics=self.prompt_statistics,
            training_prompts=self.training_prompts,
            log_history=self.state.log_history,
            global_step=self.state.global_step,
        )


# -------------------------------------------------------------------------------------------------------------------
# The trainer's sampler and callbacks
# -------------------------------------------------------------------------------------------------------------------
class EpochSeededRepeatSampler(RepeatSampler):
    """TRL's RepeatSampler plus ``set_epoch``, which the HF Trainer calls at the start of every epoch.

    TRL's sampler draws one permutation per epoch from a generator seeded once, so a run resumed in epoch e starts
    again from epoch 0's permutation. Here ``set_epoch(e)`` reseeds and skips e permutations: an uninterrupted run sees
    exactly TRL's order, and a resumed run sees the order it would have seen (needed for exact resume of the per-prompt
    allocation).
    """

    def set_epoch(self, epoch: int) -> None:
        if self.shuffle and self.seed is not None:
            self.generator.manual_seed(self.seed)
            for _ in range(epoch):
                torch.randperm(self.num_samples, generator=self.generator)


class SuccessRateCallback(TrainerCallback):
    """Holds the run's adaptive state and the trainer's ``refresh_success_rate_column`` (callbacks are not handed the
    trainer).

    ``on_epoch_end``: the epoch's counts become each prompt's "last epoch" success rate, which the next epoch's
    allocations read, and ``trainer.train_dataset[success_rate_column]`` is rewritten from the store. Epochs are
    closed in one place, ``AdaptiveState.close_epochs_through``, which closes each exactly once: here, when the next
    epoch starts (``AdaptiveGRPOTrainer._run_epoch``) and after a resume (a checkpoint written on an epoch's last step
    is resumed without ``on_epoch_end``). The final statistics file is written by ``train()`` however training ends.
    """

    def __init__(self, adaptive_state: AdaptiveState, refresh: Callable[[], None]) -> None:
        self.adaptive_state = adaptive_state
        self.refresh = refresh

    def on_epoch_end(self, args, state, control, **kwargs):
        if self.adaptive_state.close_epochs_through(self.adaptive_state.current_epoch + 1):
            self.refresh()


class AllocationLogCallback(TrainerCallback):
    """``on_train_begin`` (main process): a fresh run moves an earlier run's ``allocations.jsonl`` aside, a run resumed
    from ``checkpoint-N`` keeps the lines of steps before N (``allocation_log.start_allocation_log``).

    transformers calls it after the checkpoint is restored (``state.global_step`` is then the checkpoint's, > 0), so
    a resume that fails changes no file.
    """

    def on_train_begin(self, args, state, control, **kwargs):
        if args.should_save and getattr(args, "log_allocations", False):
            start_allocation_log(args.output_dir, resume_step=state.global_step or None)

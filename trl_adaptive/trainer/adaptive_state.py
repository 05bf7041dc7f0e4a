"""The run's adaptive state in one object: what AdaptiveGRPOTrainer keeps beside GRPOTrainer's own state.

The trainer holds one :class:`AdaptiveState` (``trainer.adaptive_state``) and hands it to the modules that read or
write it (``persistence.py``, ``batch_driver.py``, ``rounds.py``, ``callback.py``); its public attributes
``prompt_statistics``, ``procedure``, ``allocator``, ``training_prompts`` and ``statistics_hold_the_run`` are this
object's. It holds

- the training prompts (``prompts.py``: a dataset's, or a stream's, learned as it comes);
- the sampling procedure (``trl_adaptive.sampling``) and the allocator, the strategy by name;
- the prompt source, which composes each generation batch from the sampler's ids (``sampling/source.py``);
- the statistics store, and whether it holds the run's statistics (a resume's are restored with its checkpoint);
- the epoch bookkeeping: which trainer epochs are closed in the store, which one runs and where it began.

Nothing here touches the trainer: closing an epoch changes the store, and the trainer refreshes its dataset's
success-rate column when :meth:`AdaptiveState.close_epochs_through` says an epoch was closed.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from ..allocation import Allocator
from ..report.run_files import FINAL_STATISTICS_FILE
from ..sampling import Outcome, Procedure
from ..sampling.source import OfferedPrompts, PromptSource
from ..stats import PromptStatistics
from .config import AUTO_HALF_LIFE, STORE_SETTING_FIELDS, AdaptiveGRPOConfig
from .inputs import check_dataset_holds_a_batch, check_procedure_reads_the_data, innermost
from .prompt_source import check_source_reads_the_data, compose_batch
from .prompts import training_prompts
from .visits import VisitClock


class AdaptiveState:
    """The training prompts, the sampling procedure, the statistics store and the epoch bookkeeping of one run.

    Attributes:
        training_prompts: :class:`~trl_adaptive.trainer.prompts.DatasetPrompts` or ``StreamPrompts``.
        procedure: the sampling procedure; ``allocator`` is its plan-ahead allocator, or the round procedure that
            takes its place (Seq).
        prompt_statistics: the statistics store.
        group_size: TRL's ``num_generations``, the average completions per prompt (the prompt source's context).
        prompt_source: which prompts enter each generation batch (``AdaptiveGRPOConfig.prompt_source``); composes
            and observes on the main process, as the procedure does.
        statistics_hold_the_run: False from a resume's start until its checkpoint is restored (the store is then
            not the run's: the final statistics file is not written from it).
        epochs_closed: trainer epochs whose statistics have been closed (``end_epoch``) in this run.
        current_epoch: the trainer epoch running.
        epoch_start_step: the global step at which the current epoch began (where a stream resumes).
        resumed_epochs_trained: the epochs a resumed run had completed at its checkpoint (0 for a fresh run).
        visits: how stale each batch's prompts are (``visits.py``; logged as ``prompts/*``).
    """

    def __init__(
        self,
        training_prompts: Any,
        procedure: Procedure,
        prompt_statistics: PromptStatistics,
        group_size: int,
        prompt_source: PromptSource | None = None,
    ) -> None:
        self.training_prompts = training_prompts
        self.procedure = procedure
        self.allocator = _strategy(procedure)
        self.prompt_statistics = prompt_statistics
        self.group_size = group_size
        self.prompt_source = prompt_source if prompt_source is not None else OfferedPrompts()
        self.statistics_hold_the_run = True
        self.epochs_closed = 0
        self.current_epoch = 0
        self.epoch_start_step = 0
        self.resumed_epochs_trained = 0
        self.visits = VisitClock()

    @classmethod
    def for_run(
        cls, prompts: Any, procedure: Procedure, statistics: PromptStatistics | None, args: AdaptiveGRPOConfig
    ) -> AdaptiveState:
        """The state a run starts from: ``procedure`` checked against the config's batch and the data, and
        ``statistics`` (or a fresh store with the config's settings) bound to ``prompts``, with their prior."""
        procedure.check(
            args.generation_batch_size // args.num_generations, args.generation_batch_size, args.num_generations
        )
        check_procedure_reads_the_data(procedure, prompts.streaming)
        source = args.build_prompt_source()
        num_prompts = None if prompts.streaming else len(prompts)
        batch_prompts = args.generation_batch_size // args.num_generations
        check_source_reads_the_data(source, prompts.streaming, num_prompts, batch_prompts)
        store = initial_statistics(statistics, args, num_prompts)
        prompts.attach(store, "statistics passed to AdaptiveGRPOTrainer")
        prompts.apply_prior(store)
        return cls(prompts, procedure, store, args.num_generations, source)

    def compose_batch(self, offered: np.ndarray, seed: int, step: int) -> tuple[np.ndarray, dict[str, float]]:
        """Main process: the batch's prompt ids as the prompt source composes them from the sampler's ``offered``
        ids, and its ``prompt_source/*`` metrics (``prompt_source.compose_batch``)."""
        store, prompts = self.prompt_statistics, self.training_prompts
        return compose_batch(self.prompt_source, offered, store, prompts, seed, step, self.group_size)

    def end_step(self, outcome: Outcome, success_threshold: float) -> None:
        """Main process: the procedure's and the prompt source's state move once per step, the source observing
        every completion the batch generated."""
        self.procedure.end_step(outcome)
        record = outcome.record
        self.prompt_source.end_step(record.prompt_ids, record.group_ids, record.rewards, success_threshold)

    def close_epochs_through(self, epoch: int) -> bool:
        """Close trainer epochs ``[epochs_closed, epoch)`` in the store (closing an epoch twice is impossible);
        True when one was closed (the success rates changed)."""
        closed_any = self.epochs_closed < epoch
        while self.epochs_closed < epoch:
            self.prompt_statistics.end_epoch()
            self.epochs_closed += 1
        return closed_any

    def begin_epoch(self, epoch: int, global_step: int) -> bool:
        """Trainer epoch ``epoch`` starts at ``global_step``: every earlier one is closed; True when one was closed."""
        closed_any = self.close_epochs_through(epoch)
        self.current_epoch = epoch
        if epoch > self.resumed_epochs_trained:  # the epoch a run resumed into began before its checkpoint
            self.epoch_start_step = global_step
        return closed_any

    def start_another_run(self) -> bool:
        """``train()`` called again on the same trainer, without resuming: the epoch the last run left open (an
        interrupted run's) is closed, and the new run's trainer epochs, numbered from 0 again, are counted from 0.
        The statistics carry over, as they do into a trainer built with ``statistics=``. True when an epoch was
        closed."""
        closed_any = self.close_epochs_through(max(self.epochs_closed, self.current_epoch + 1))
        self.epochs_closed = self.current_epoch = self.epoch_start_step = self.resumed_epochs_trained = 0
        return closed_any

    def epoch_position(self, global_step: int) -> dict[str, int]:
        """Where in the data the run is at ``global_step``: the epoch, and the steps made in it."""
        return {"epoch": self.current_epoch, "steps_in_epoch": int(global_step - self.epoch_start_step)}

    def save_final_statistics(self, output_dir: str) -> None:
        """The store in ``output_dir/prompt_statistics.json``, atomically; nothing while it does not hold the run's
        statistics (the file keeps the run's, not an empty store)."""
        if self.statistics_hold_the_run:
            self.prompt_statistics.save(os.path.join(output_dir, FINAL_STATISTICS_FILE))


def checked_training_prompts(train_dataset: Any, args: AdaptiveGRPOConfig) -> Any:
    """``train_dataset``'s training prompts (``prompts.py``); refused when a dataset cannot fill one batch."""
    prompts = training_prompts(
        train_dataset, args.prompt_id_column, args.success_rate_column, args.success_rate_prior_weight
    )
    if not prompts.streaming:
        check_dataset_holds_a_batch(len(prompts.dataset), args)
    return prompts


def _strategy(procedure: Procedure) -> Allocator | Procedure:
    """The strategy by name: the plan-ahead allocator, or the round procedure that takes its place (Seq)."""
    return procedure.allocator if procedure.allocator is not None else innermost(procedure)


def initial_statistics(
    statistics: PromptStatistics | None, args: AdaptiveGRPOConfig, num_prompts: int | None = None
) -> PromptStatistics:
    """A fresh store with the config's settings for ``num_prompts`` training prompts (None: a stream), or the one
    passed in if its settings are the config's (``posterior_half_life="auto"`` takes the passed store's)."""
    config = args.statistics_config_for(num_prompts)
    if statistics is None:
        return PromptStatistics(**config)
    if args.posterior_half_life == AUTO_HALF_LIFE:
        config["posterior_half_life"] = statistics.posterior_half_life
    mismatched = {k: v for k, v in config.items() if getattr(statistics, k) != v}
    if mismatched:
        store = ", ".join(f"{k}={getattr(statistics, k)!r}" for k in mismatched)
        config = ", ".join(f"{STORE_SETTING_FIELDS[k]}={v!r}" for k, v in mismatched.items())
        wanted = ", ".join(f"{STORE_SETTING_FIELDS[k]}={getattr(statistics, k)!r}" for k in mismatched)
        raise ValueError(
            f"The statistics passed to AdaptiveGRPOTrainer were built with {store}, but the config has {config}: "
            f"the counts would mean something else. Set {wanted} in the config, or pass a store built with the "
            "config's settings."
        )
    return statistics

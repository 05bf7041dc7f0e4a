"""One training generation batch of AdaptiveGRPOTrainer, top to bottom: GRPOTrainer's
``_generate_and_score_completions`` for a batch whose prompts each get their own number of completions.

T = generation_batch_size completions are trained per batch, U = T / num_generations prompts come from the sampler,
L = T / num_processes completions are trained on each rank. :meth:`GenerationBatches.run`:

    1. rows       every rank's sampler rows, gathered; one row per prompt (TRL repeats each G times)
    2. prompts    the prompt source composes the batch; the sampling procedure runs on the main process
    3. rounds     ``sampling.run_rounds``: the procedure plans a round, every rank generates its share of it (TRL's
                  row set-up, ``_generate``, ``_calculate_rewards``), the gathered rewards go back to the procedure;
                  until it says which completions to train on (one planned round, or several)
    4. kept       the trained completions, laid out over the ranks; this rank's training tensors (padding, old and
                  reference log-probs: ``grpo_steps.training_inputs``)
    5. advantages over the real groups (``groups.py``), times the procedure's weights
    6. state      statistics (every completion generated), the procedure's and the prompt source's state
    7. logs       every metric once, over the real groups; the completions table; ``allocations.jsonl``; the
                  callbacks' ``on_generation_batch_end``

TRL is called through its hooks (``_generate``, ``_calculate_rewards``, ``_get_per_token_logps_and_entropies``) and
never re-entered: what its ``_generate_and_score_completions`` does around ``_generate`` is ``grpo_steps.py``. A
batch whose first round is final (a plan-ahead allocator: uniform, knapsack, ...) trains every completion on the rank
that generated it, tensors made before scoring as TRL makes them, so uniform is GRPOTrainer bit for bit. Otherwise
every rank keeps every round's completions, and the trained ones are laid out again by their actual tokens.
"""

from __future__ import annotations

import copy
import time
import warnings
from collections import defaultdict
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
import torch
from accelerate.utils import broadcast_object_list, gather_object

from ..sampling import BatchContext, BatchRun, Outcome, Round, run_rounds
from ..stats import stable_prompt_ids
from .groups import (
    BatchDispatch,
    group_advantages,
    rank_balance_metrics,
    rank_slice,
    rank_tokens,
    weighted_total,
)
from .grpo_steps import rollout_prompts, training_inputs
from .inputs import ResetRows, RewardChecks
from .metrics import (
    allocation_line,
    allocation_metrics,
    completion_length_metrics,
    completion_scale,
    generated_reward_metrics,
    reward_metrics,
    round_metrics,
    tool_metrics,
)
from .output_files import append_allocation_record
from .state import PROCEDURE, AdaptiveState, procedure_draw, step_seed


@dataclass(frozen=True)
class GenerationBatchEnd:
    """One training generation batch as it ends (every rank): what a trainer callback's ``on_generation_batch_end``
    receives as ``batch``, after the advantages and before the batch's completions update the statistics' lengths.

    Attributes:
        outcome: the procedure's (``outcome.record``: prompt ids, group ids, rewards, completion tokens, metrics of
            every completion generated; ``outcome.selected`` / ``trained_counts``: what is trained).
        dispatched: record index of each trained completion, in dispatch order (every rank's).
        training_dict: this rank's, as the loss reads it (``advantages`` included).
        expected_tokens: per prompt of the record, the expected completion tokens the dispatch planned with.
    """

    outcome: Outcome
    dispatched: np.ndarray
    training_dict: dict[str, Any]
    expected_tokens: np.ndarray


class Completion(NamedTuple):
    """One generated completion, with what TRL's tensors and logs need of it later."""

    prompt: Any  # what it was generated from (after reset() and images)
    prompt_ids: list[int]
    completion_ids: list[int]
    tool_mask: list[int] | None
    completion: Any  # text, or messages
    logprobs: list[float] | None
    images: list[Any] | None
    tool_images: list[Any]
    environment: str | None
    log_extra: dict[str, Any]  # the values reward functions logged for it (``log_extra``)


class Lengths(NamedTuple):
    """What ``completions/*`` and the token metrics read of a completion (gathered from every rank)."""

    tokens: int  # generated token ids
    model_tokens: int  # of those, the model's (tool_mask = 1), what TRL's completions/*_length count
    truncated: bool  # no EOS at the end: cut at max_completion_length


class GenerationBatches:
    """Runs each training generation batch of one trainer (see the module docstring).

    Args:
        trainer: the :class:`~trl_adaptive.AdaptiveGRPOTrainer`.
        state: its adaptive state (procedure, prompt source, statistics, training prompts).
        reset_rows: when environments make the prompts, what TRL sees of each row; else None.
        reward_checks: the run's once-only reward warnings.
    """

    def __init__(
        self, trainer: Any, state: AdaptiveState, reset_rows: ResetRows | None, reward_checks: RewardChecks
    ) -> None:
        self.trainer, self.state, self.reset_rows, self.reward_checks = trainer, state, reset_rows, reward_checks

    def run(self, inputs: list[dict[str, Any]]) -> dict[str, Any]:
        """This rank's training dict, from this rank's sampler ``inputs``."""
        trainer, state = self.trainer, self.state
        args, accelerator, store = trainer.args, trainer.accelerator, state.prompt_statistics
        step = trainer.state.global_step
        weights = trainer.reward_weights.detach().cpu()

        # 1. rows: one per prompt of the global batch --------------------------------------------------------------
        batch_ids, prompt_rows = batch_prompt_rows(self._gather(inputs), args)
        state.training_prompts.observe(store, batch_ids, prompt_rows)
        rows = dict(zip(batch_ids.tolist(), prompt_rows, strict=True))

        # 2. prompts: the source composes the batch, the procedure runs on the main process --------------------------
        run = None
        if accelerator.is_main_process:
            batch_ids, composed = state.compose_batch(batch_ids, args.seed, step)
            run = BatchRun(state.procedure, batch_context(args, step, state, batch_ids), accelerator.num_processes)
            run.record.metrics.update(composed)  # prompt_source/* (none for the default source)

        # 3. rounds ---------------------------------------------------------------------------------------------------
        dispatch = BatchDispatch(args.seed, step, accelerator.num_processes, store.expected_tokens)
        rounds = Rounds(self, rows, dispatch, weights)
        outcome = run_rounds(run, rounds.generate, self._share)
        record = outcome.record

        # 4. kept: the trained completions over the ranks, and this rank's training tensors ---------------------------
        local = self._local(len(outcome.selected))
        if rounds.planned is not None:  # trained whole where generated, tensors already made (TRL's order)
            dispatched, output, kept = rounds.planned
            if len(rounds.rewards_per_func) > 1 or len(outcome.selected) != len(dispatched):
                procedure = type(state.procedure).__name__
                raise AssertionError(f"{procedure} asked for a final round but did not train it all.")
            generation = None  # generated where trained: one layout
        else:
            dispatched = dispatch.replay_dispatch(record, outcome.selected)
            kept = [rounds.completions[i] for i in dispatched[local]]
            output, _ = training_inputs(trainer, *replayed(kept))
            generation = rounds.rank_tokens
        self._log(rank_balance_metrics(record.completion_tokens[dispatched], accelerator.num_processes, generation))
        device = accelerator.device
        rewards_per_func = torch.cat(rounds.rewards_per_func).to(device)  # every completion's, record order
        trained_rewards = rewards_per_func[torch.as_tensor(dispatched, device=device)]

        # 5. advantages over the real groups ------------------------------------------------------------------------
        group_ids = record.group_ids[dispatched]
        reference = None
        if outcome.baseline_from_all:  # Seq: each baseline from every completion drawn
            reference = (rewards_per_func, torch.as_tensor(record.group_ids, device=device))
        result = group_advantages(
            trained_rewards,
            weights.to(device),
            torch.as_tensor(group_ids, device=device),
            len(record.prompt_ids),
            trainer.scale_rewards,
            trainer.multi_objective_aggregation,
            reference=reference,
        )
        counts = outcome.trained_counts
        scale = completion_scale(counts, record.weights, group_ids, args.equal_prompt_weighting)
        advantages = result.advantages * scale.to(result.advantages)
        output["advantages"] = advantages[local]

        # 6. state ----------------------------------------------------------------------------------------------------
        rewards = result.rewards.cpu().numpy().astype(np.float64)
        expected_tokens = store.expected_tokens(record.prompt_ids)  # before this step's update, as dispatched
        store.update(record.prompt_ids[record.group_ids], record.rewards, record.completion_tokens)
        if accelerator.is_main_process:
            state.end_step(outcome, args.success_threshold)  # the procedure's and the source's
            self.reward_checks.observe(record.rewards, record.prompt_ids[record.group_ids], store)
        max_rounds = args.dynamic_sampling_max_rounds
        self.reward_checks.dynamic_fill(record.metrics, record.notes, len(outcome.selected), max_rounds)

        # 7. logs -----------------------------------------------------------------------------------------------------
        names = list(trainer.reward_func_names)
        self._log(reward_metrics(trained_rewards, names, weights, result.zero_std_fraction))
        generated = trained_rewards if rounds.planned is not None else rewards_per_func  # planned: the same ones
        self._log(generated_reward_metrics(generated, names, weights))
        self._log(completion_length_metrics(rounds.lengths) | tool_metrics(rounds.tool_rounds))
        self._log(round_metrics(outcome) | state.visits.visit(record.prompt_ids, record.counts()))
        budget, threshold, seconds = args.generation_batch_size, args.success_threshold, rounds.generation_seconds
        self._log(allocation_metrics(outcome, group_ids, rewards, result, budget, threshold, seconds))
        self._log_table(kept, trained_rewards, advantages, counts[group_ids], output)
        self._flush_reward_metrics()
        if args.should_save and args.log_allocations:
            engine = f"vllm-{args.vllm_mode}" if args.use_vllm else "transformers"
            line = allocation_line(
                outcome,
                group_ids,
                rewards,
                step=step,
                epoch=store.epoch,
                success_threshold=threshold,
                expected_tokens=expected_tokens,
                engine=engine,
            )
            append_allocation_record(args.output_dir, line)
        self._batch_end(GenerationBatchEnd(outcome, dispatched, output, expected_tokens))
        return output

    # rows ------------------------------------------------------------------------------------------------------------
    def _rows_of(self, rows: dict[int, dict], prompt_ids: np.ndarray) -> dict[int, dict]:
        """Rows of the prompts the procedure drew beyond the batch (CERO's pacing, dynamic sampling), from the data."""
        missing = [i for i in np.asarray(prompt_ids).tolist() if i not in rows]
        if not missing:
            return {}
        return dict(zip(missing, self.state.training_prompts.rows(np.asarray(missing, dtype=np.int64)), strict=True))

    def local_rows(self, rows: dict[int, dict], prompt_ids: np.ndarray) -> list[dict]:
        """Copies of the rows of ``prompt_ids`` (TRL mutates them), with the live success rate for reward functions;
        when environments make the prompts, the rows as GRPOTrainer gives them (``inputs.py``)."""
        if self.reset_rows is not None:
            return [self.reset_rows.as_trl_sees(rows[prompt_id]) for prompt_id in prompt_ids.tolist()]
        column, store = self.trainer.args.success_rate_column, self.state.prompt_statistics
        local = []
        for prompt_id, rate in zip(prompt_ids.tolist(), store.success_rates(prompt_ids).tolist(), strict=True):
            row = copy.copy(rows[prompt_id])
            row[column] = float(rate)
            local.append(row)
        return local

    # ranks -----------------------------------------------------------------------------------------------------------
    def _local(self, total: int) -> slice:
        accelerator = self.trainer.accelerator
        return rank_slice(total, accelerator.num_processes, accelerator.process_index)

    def _share(self, value: Any) -> Any:
        """``value`` of the main process, on every rank."""
        if self.trainer.accelerator.num_processes == 1:
            return value
        payload = [value]
        broadcast_object_list(payload, from_process=0)
        return payload[0]

    def _gather(self, items: list) -> list:
        """Every rank's ``items``, concatenated in rank order."""
        return gather_object(items) if self.trainer.accelerator.num_processes > 1 else list(items)

    # logs ------------------------------------------------------------------------------------------------------------
    def _log(self, metrics: dict[str, float]) -> None:
        """Each metric into TRL's training stream (its ``log`` averages them per logging step)."""
        stream = self.trainer._metrics["train"]
        for name, value in metrics.items():
            stream[name].append(value)

    def _log_table(
        self,
        kept: list[Completion],
        rewards_per_func: torch.Tensor,
        advantages: torch.Tensor,
        group_sizes: np.ndarray,
        output: dict[str, Any],
    ) -> None:
        """The completions table (``log_completions``) of the trained completions, every rank's in dispatch order, as
        TRL fills it, plus each completion's group size."""
        trainer = self.trainer
        logs = trainer._logs
        logs["prompt"].extend(self._gather([c.prompt for c in kept]))
        logs["completion"].extend(self._gather([c.completion for c in kept]))
        for i, name in enumerate(trainer.reward_func_names):
            logs["rewards"][name].extend(rewards_per_func[:, i].tolist())
        logs["advantages"].extend(advantages.tolist())
        extras = self._gather([c.log_extra for c in kept])
        for column in sorted({column for extra in extras for column in extra}):
            logs["extra"][column].extend(extra.get(column) for extra in extras)
        logs["extra"]["group_size"].extend(group_sizes.tolist())
        images = [c.images for c in kept]
        if "num_images" in output and trainer.log_multimodal:
            logs["images"].extend(self._gather(images))

    def _flush_reward_metrics(self) -> None:
        """What reward functions logged with ``log_metric`` during the batch (every round), averaged over every rank's
        values, as TRL flushes them."""
        trainer = self.trainer
        pending, device = trainer._pending_metrics, trainer.accelerator.device
        for name in sorted(set(self._gather(list(pending)))):
            values = pending.get(name, [])
            local_stats = torch.tensor([sum(values), len(values)], dtype=torch.float32, device=device)
            total, count = trainer.accelerator.gather(local_stats).view(-1, 2).sum(dim=0).tolist()
            trainer._metrics["train"][name].append(total / count)
        pending.clear()

    def _batch_end(self, batch: GenerationBatchEnd) -> None:
        """Every callback with an ``on_generation_batch_end(args, state, control, batch=...)`` method gets the ended
        batch (transformers' callback handler dispatches only its own events)."""
        trainer = self.trainer
        for callback in trainer.callback_handler.callbacks:
            event = getattr(callback, "on_generation_batch_end", None)
            if event is not None:
                event(trainer.args, trainer.state, trainer.control, batch=batch)


class Rounds:
    """The rounds of one batch: :meth:`generate` is ``sampling.run_rounds``'s generator, on every rank.

    Keeps, in the procedure's record order: every round's gathered rewards and every completion's lengths; every
    completion itself (every rank's) when the batch is sampled in rounds; when its first round is final, this rank's
    trained completions and their training tensors (``planned``).
    """

    def __init__(
        self, batches: GenerationBatches, rows: dict[int, dict], dispatch: BatchDispatch, weights: torch.Tensor
    ) -> None:
        self.batches, self.trainer = batches, batches.trainer
        self.rows, self.dispatch, self.weights = rows, dispatch, weights
        self.completions: list[Completion] = []
        self.rewards_per_func: list[torch.Tensor] = []  # per round: (N_r, K) gathered, record order
        self.lengths: list[Lengths] = []
        self.rank_tokens: list[np.ndarray] = []  # per round: (R,) tokens each rank generated
        self.tool_rounds: list[tuple[int, dict[str, float]]] = []  # per round: completions, TRL's tools/* figures
        self.generation_seconds = 0.0  # this rank's, in _generate
        self.planned: tuple[np.ndarray, dict[str, Any], list[Completion]] | None = None

    def generate(self, request: Round, jobs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Generate and score one completion per job (prompt-major) across the ranks; every job's total reward (NaN:
        unscorable) and generated tokens, in job order."""
        batches, trainer = self.batches, self.trainer
        job_ids = np.repeat(request.prompt_ids, request.counts)
        self.rows.update(batches._rows_of(self.rows, request.prompt_ids))
        planned = request.final and not self.rewards_per_func  # the first round, trained whole
        if planned:
            order = self.dispatch.planned_order(job_ids)
        else:
            order = self.dispatch.round_order(job_ids, len(self.rewards_per_func))
        mine = batches.local_rows(self.rows, job_ids[order[batches._local(len(order))]])

        prompts, dataset_images = rollout_prompts(trainer, mine)
        generated = self._generate(prompts)
        _, completion_ids, _, texts, _, extra_fields, images, _ = generated
        if planned:  # TRL's order: the tensors (old and reference log-probs) before the rewards
            output, images = training_inputs(trainer, generated, prompts, dataset_images, _environments(trainer))
        elif images is None:
            images = dataset_images
        _merge_extra_fields(mine, extra_fields)
        rewards_per_func = trainer._calculate_rewards(mine, prompts, texts, completion_ids).detach().cpu()
        _check_gathered(rewards_per_func, len(order), len(trainer.reward_funcs))
        extras = take_round_extras(trainer._pending_extra_logs, len(mine))  # they travel with their completions
        local = _completions(trainer, prompts, generated, images, extras)

        back = np.argsort(order)  # dispatch position of each job
        eos = {*trainer.eos_token_ids, trainer._tokenizer.pad_token_id}
        lengths = batches._gather([_lengths(c, eos) for c in local])
        self.lengths.extend(lengths[i] for i in back)
        tokens = np.array([lengths[i].tokens for i in back], dtype=np.float64)
        self.rank_tokens.append(rank_tokens(tokens[order], trainer.accelerator.num_processes))
        self.rewards_per_func.append(rewards_per_func[torch.as_tensor(back)])
        if planned:
            self.planned = (order, output, local)
        else:
            everyone = batches._gather(local)
            self.completions.extend(everyone[i] for i in back)
        return total_rewards(self.rewards_per_func[-1], self.weights), tokens

    def _generate(self, prompts: list[Any]) -> tuple:
        """TRL's ``_generate``, timed. What it logs per call over the call's completions (``completions/*``,
        ``tools/*``) is kept aside: the batch logs those once, over every completion of every round."""
        trainer = self.trainer
        stream = trainer._metrics["train"]
        trainer._metrics["train"] = aside = defaultdict(list)
        start = time.perf_counter()
        try:
            generated = trainer._generate(prompts)
        finally:
            self.generation_seconds += time.perf_counter() - start
            trainer._metrics["train"] = stream
        for name, values in aside.items():
            if name == "num_tokens":  # TRL's running total, assigned
                stream[name] = values
            elif name.startswith("tools/"):
                continue
            elif not name.startswith("completions/"):
                stream[name].extend(values)
        if any(name.startswith("tools/") for name in aside):
            figures = {name: values[-1] for name, values in aside.items() if name.startswith("tools/")}
            self.tool_rounds.append((len(prompts) * trainer.accelerator.num_processes, figures))
        return generated


def replayed(kept: list[Completion]) -> tuple:
    """:func:`~.grpo_steps.training_inputs`' arguments for completions generated in earlier rounds: ``_generate``'s
    return value for them, their prompts, images and environments."""
    tool_mask = [c.tool_mask for c in kept]
    logprobs = [c.logprobs for c in kept]
    images = [c.images for c in kept]
    tool_images = [c.tool_images for c in kept]
    generated = (
        [c.prompt_ids for c in kept],
        [c.completion_ids for c in kept],
        None if all(m is None for m in tool_mask) else tool_mask,
        [c.completion for c in kept],
        None if all(x is None for x in logprobs) else logprobs,
        {},
        None if all(x is None for x in images) else images,
        tool_images if any(tool_images) else [],
    )
    environments = [c.environment for c in kept]
    return generated, [c.prompt for c in kept], None, environments


def _completions(
    trainer: Any, prompts: list[Any], generated: tuple, images: list[Any] | None, extras: list[dict[str, Any]]
) -> list[Completion]:
    """This rank's completions of a round, one per row."""
    prompt_ids, completion_ids, tool_mask, texts, logprobs, _, _, tool_images = generated
    size = len(prompts)
    environments = _environments(trainer) or [None] * size
    columns = (
        prompts,
        prompt_ids,
        completion_ids,
        tool_mask if tool_mask is not None else [None] * size,
        texts,
        logprobs if logprobs is not None else [None] * size,
        images if images is not None else [None] * size,
        tool_images if tool_images else [[] for _ in range(size)],
        environments,
        extras,
    )
    return [Completion(*fields) for fields in zip(*columns, strict=True)]


def _environments(trainer: Any) -> list[str | None] | None:
    """Each row's environment name in the batch of rows ``rollout_prompts`` set up last (None without environments)."""
    return list(trainer._batch_environments) if trainer.environment_factories is not None else None


def _lengths(completion: Completion, eos: set[int]) -> Lengths:
    ids = completion.completion_ids
    model_tokens = sum(completion.tool_mask) if completion.tool_mask is not None else len(ids)
    return Lengths(len(ids), int(model_tokens), bool(len(ids)) and ids[-1] not in eos)


def _check_gathered(rewards_per_func: torch.Tensor, completions: int, reward_funcs: int) -> None:
    """TRL's ``_calculate_rewards`` returns every rank's rewards, one row per completion, one column per function."""
    if tuple(rewards_per_func.shape) != (completions, reward_funcs):
        raise RuntimeError(
            f"Expected TRL's gathered rewards of shape ({completions}, {reward_funcs}), got "
            f"{tuple(rewards_per_func.shape)}. trl_adaptive is pinned to trl 1.16; a different trl version changed "
            "GRPOTrainer._calculate_rewards."
        )


def _merge_extra_fields(rows: list[dict], extra_fields: dict) -> None:
    """A ``rollout_func``'s extra fields onto the rows reward functions read, as GRPOTrainer merges them."""
    for i, row in enumerate(rows):
        for key, values in extra_fields.items():
            if isinstance(values, list) and i < len(values):
                row[key] = values[i]
            elif not isinstance(values, list):
                row[key] = values


def take_round_extras(pending: dict[str, list[Any]], size: int) -> list[dict[str, Any]]:
    """The ``log_extra`` values reward functions logged while this rank scored ``size`` rows, one dict per row, taken
    out of TRL's buffer ``pending`` (``_pending_extra_logs``): they travel with their completions to the completions
    table. A column whose values are not one per row cannot be placed: its cells are left empty (None), with a
    warning."""
    rows: list[dict[str, Any]] = [{} for _ in range(size)]
    for column, values in pending.items():
        if len(values) != size:
            warnings.warn(
                f"log_extra({column!r}, ...) logged {len(values)} values while {size} completions were scored; "
                "they cannot be matched to completions, so the column is left empty for this round. Log one value "
                "per completion, from one reward function.",
                stacklevel=2,
            )
            values = [None] * size
        for row, value in zip(rows, values, strict=True):
            row[column] = value
    pending.clear()
    return rows


# -------------------------------------------------------------------------------------------------------------------
# The procedure's view of the batch
# -------------------------------------------------------------------------------------------------------------------
def batch_context(args: Any, step: int, state: AdaptiveState, prompt_ids: np.ndarray) -> BatchContext:
    """The procedure's view of this step: the store, prompts drawn through the prompt source by (seed, step, call),
    a seeded generator."""
    return BatchContext(
        prompt_ids=prompt_ids,
        budget=args.generation_batch_size,
        group_size=args.num_generations,
        success_threshold=args.success_threshold,
        statistics=state.prompt_statistics.batch,
        draw_prompts=procedure_draw(state.prompt_source, state.training_prompts, args.seed, step),
        rng=np.random.default_rng(step_seed(args.seed, step, PROCEDURE)),
    )


def batch_prompt_rows(rows: list[dict[str, Any]], args: Any) -> tuple[np.ndarray, list[dict]]:
    """The store ids and one row per prompt of the global generation batch (``rows``: every rank's sampler rows, in
    sampler order; TRL repeats each prompt G times in a row)."""
    if len(rows) != args.generation_batch_size:
        raise RuntimeError(f"Expected {args.generation_batch_size} rows in the generation batch, got {len(rows)}.")
    column, group_size = args.prompt_id_column, args.num_generations
    ids = np.array([row[column] for row in rows]).reshape(-1, group_size)
    if not (ids == ids[:, :1]).all():
        raise RuntimeError(
            "TRL's sampler no longer repeats each prompt num_generations times in a row; trl_adaptive is pinned "
            "to trl 1.16's RepeatSampler layout."
        )
    rows = rows[::group_size]
    batch_ids = stable_prompt_ids([row[column] for row in rows], column)
    if len(np.unique(batch_ids)) != len(batch_ids):
        raise ValueError(
            f"A generation batch holds the same prompt id twice (column {column!r}): a streaming dataset yielded one "
            "prompt twice within a batch. Deduplicate the stream, or give its rows distinct ids in that column."
        )
    return batch_ids, rows


def total_rewards(rewards_per_func: torch.Tensor, reward_weights: torch.Tensor) -> np.ndarray:
    """The weighted total reward of each completion (NaN when unscorable), as the procedure reads it."""
    return weighted_total(rewards_per_func.detach().cpu(), reward_weights.cpu()).numpy().astype(np.float64)


__all__ = ["Completion", "GenerationBatchEnd", "GenerationBatches", "Rounds"]

"""Reinforce-Ada Seq (arXiv 2510.04996, Sec. 3.2): sampling in rounds until each prompt's exit rule holds.

A plan-ahead allocation fixes every count before anything is sampled. Reinforce-Ada Seq instead samples in rounds and
lets each prompt's own results decide whether it gets more ("sample until a condition holds", so the number of draws
adapts to the unknown p without estimating it). Inside one generation batch of M prompts, group size n and training
budget B = n M::

    round 1      every prompt gets max(k, n) completions                       (always in full)
    round r > 1  every prompt not yet done gets min(k, N_max - attempts) more    (k = round_size, N_max = max_rollouts)
                 while the batch has generated <= inference_cap * B in total    (trimmed by a fixed priority, below)
    stop         when a round would give nothing (every prompt done, at N_max, or the cap reached)
    select       exactly n completions per prompt for the update, balanced correct / incorrect where possible,
                 uniformly at random within each kind (seeded); the baseline (mean, std) of every prompt is computed
                 by the trainer from ALL its completions, not only the n selected (the paper's choice)

Exit rules ("done"), per prompt, from its scored successes s and attempts a:

- Seq-Pos (``reinforce_ada_seq_pos``): s >= K (``min_successes``, default 1, the official ``positive_focused``);
- Seq-Balance (``reinforce_ada_seq_balance``): s >= h and a - s >= h with h = max(1, floor(n / 2)).

Inference varies (n to N_max per prompt), the training batch is fixed (n per prompt): each step trains B
completions and generates between B and ``inference_cap`` * B. Rewards may be any float: a completion is *correct*
when its reward is >= the success threshold (:func:`is_success`, the same rule as ``PromptStatistics``), never by
"reward std != 0", so shaped rewards with noise do not pass for signal.

Differences from the official code (``RLHFlow/Reinforce-Ada``, branch ``main``), all on purpose:

- selection is uniform at random within each kind (seeded), not first-come (``cache[:k]``), which favours the fastest
  completions of a round;
- Seq-Pos selects balanced like Seq-Balance (the official code keeps the pool's success ratio for Pos);
- an inference cap per batch bounds the total, with a documented trim instead of padding rows to ``dp_size``;
- no duplicated rows: every selected completion is a distinct sample;
- correct is ``reward >= threshold`` on any float reward (the official code hard-codes 0.7 on binary rewards and
  rebuilds the baseline from 0/1 counts, which is wrong for shaped rewards).
"""

from __future__ import annotations

import math
from collections.abc import Generator
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from .._validate import check_int, check_number
from .base import BatchContext, BatchRecord, Procedure, Round
from .rules import _as_group_ids, _as_success, _as_success_counts, is_success


@dataclass
class Sequential(Procedure):
    """Base of Reinforce-Ada Seq's procedures: subclasses set ``name`` and implement :meth:`is_done`.

    Paper: W. Xiong, C. Ye, B. Liao, H. Dong, X. Xu, C. Monz, J. Bian, N. Jiang and T. Zhang, "Reinforce-Ada: An
    Adaptive Sampling Framework under Non-linear RL Objectives", 2025, arXiv 2510.04996. Implements Sec. 3.2
    (Reinforce-Ada-Seq): sample in rounds, retire a prompt once its exit rule holds, then keep a balanced group of n
    per prompt.

    Inside one generation batch: round 1 gives every prompt max(round_size, group_size) completions; each later round
    gives every still-active prompt round_size more, up to max_rollouts per prompt in total and an inference cap per
    batch; then exactly group_size completions per prompt are selected for training (:meth:`select`)::

        successes = attempts = zeros(M); generated = 0
        while (counts := seq.round_counts(successes, attempts, n, generated, budget)).sum() > 0:
            yield Round(prompts, counts)          # the driver generates and scores them
            successes, attempts, generated = what the batch's record now holds
        return seq.select(is_success(all rewards, threshold), all group ids, M, n, rng)

    Args:
        max_rollouts: N_max, the most completions one prompt gets over all rounds of a batch (default 32: the
            official 4 rounds of 8). Must be >= ``round_size`` and >= the group size.
        round_size: k, completions per active prompt per round (default 8, official ``round_repeat``).
        inference_cap: the batch generates at most ``inference_cap * budget`` completions in total, budget = n M
            (default 4.0; with k = 8, N_max = 32 and n = 8 it never binds). Round 1 is always given in full, even
            above the cap.

    Trim rule: when a later round would pass the cap, prompts are served whole rounds in this order until the cap is
    reached (the last one served may get a partial round): first the prompts with no signal yet (all their completions
    so far correct, or all wrong), then fewer successes, then fewer attempts, then the lower index. Prompts whose
    group is still unmixed gain the most from more samples, and among them the rarer success (the harder prompt) is
    what Reinforce-Ada samples for.

    Example:
        >>> seq = ReinforceAdaSeqPos(round_size=4, max_rollouts=12)
        >>> seq.round_counts(np.zeros(3), np.zeros(3), group_size=4, generated_so_far=0, budget=12).tolist()
        [4, 4, 4]
        >>> seq.round_counts(np.array([2, 0, 0]), np.array([4, 4, 4]), 4, 12, 12).tolist()  # prompt 0 is done
        [0, 4, 4]
        >>> seq.round_counts(np.array([2, 0, 0]), np.array([4, 4, 4]), 4, 44, 12).tolist()  # cap 48: 4 left
        [0, 4, 0]
    """

    name: ClassVar[str] = ""
    trains_all_generated: ClassVar[bool] = False
    baseline_from_all: ClassVar[bool] = True

    max_rollouts: int = 32
    round_size: int = 8
    inference_cap: float = 4.0

    def __post_init__(self) -> None:
        check_int("max_rollouts", self.max_rollouts, minimum=2)
        check_int(
            "round_size",
            self.round_size,
            minimum=1,
            reason="completions per active prompt per round; the official value is 8",
        )
        if self.max_rollouts < self.round_size:
            raise ValueError(
                f"max_rollouts={self.max_rollouts} < round_size={self.round_size}: one round would exceed the "
                "per-prompt maximum. Raise max_rollouts (e.g. 4 * round_size) or lower round_size."
            )
        cap = self.inference_cap
        check_number(
            "inference_cap",
            cap,
            minimum=1,
            reason="the batch may generate inference_cap x the training budget; 1 means no round beyond the first, "
            "4.0 is the official 4 rounds",
        )
        if not math.isfinite(cap):
            raise ValueError(f"inference_cap={cap!r}: must be finite; use max_rollouts * M / budget for no cap.")

    # -- the procedure ----------------------------------------------------------------------------------------------
    def check(self, num_prompts: int, budget: int, group_size: int) -> None:
        self._check_group_size(group_size)

    def rounds(self, ctx: BatchContext, record: BatchRecord) -> Generator[Round, None, np.ndarray]:
        ids, n = ctx.prompt_ids, ctx.group_size
        successes, attempts, generated = np.zeros(len(ids)), np.zeros(len(ids)), 0
        while (counts := self.round_counts(successes, attempts, n, generated, ctx.budget)).sum() > 0:
            yield Round(ids, counts)
            successes, attempts = record.successes(ids), record.attempts(ids)
            generated = int(record.counts(ids).sum())
        done = self.is_done(successes, attempts, n)
        record.metrics.update(
            {
                "rounds/prompts_finished": float(done.sum()),
                "rounds/prompts_unfinished": float((~done).sum()),
                "rounds/inference_cap": float(self.inference_cap * ctx.budget),
            }
        )
        success = is_success(record.rewards, ctx.success_threshold)
        return self.select(success, record.group_ids, len(record.prompt_ids), n, ctx.rng)

    # -- the rounds -------------------------------------------------------------------------------------------------
    def is_done(self, successes: np.ndarray, attempts: np.ndarray, group_size: int) -> np.ndarray:
        """``(M,)`` bool: True for prompts whose exit rule holds (they get no further round)."""
        raise NotImplementedError

    def round_counts(
        self,
        successes: np.ndarray,
        attempts: np.ndarray,
        group_size: int,
        generated_so_far: int,
        budget: int,
    ) -> np.ndarray:
        """``(M,)`` int64 completions per prompt for the next round; all zeros means stop.

        Args:
            successes: ``(M,)`` correct completions per prompt so far (:func:`is_success`).
            attempts: ``(M,)`` scored completions per prompt so far.
            group_size: n, completions per prompt in the training batch (TRL's ``num_generations``).
            generated_so_far: completions generated in this batch so far (all rounds, all prompts). Round 1 is the
                call with ``generated_so_far == 0``; every later call is bounded by the cap, so the loop ends even
                when no completion can be scored (NaN rewards leave ``attempts`` at 0).
            budget: B, the training budget n M; the batch generates at most ``inference_cap * B`` in total.

        Returns:
            round 1: max(round_size, group_size) for every prompt, even above the cap. Later rounds:
            min(round_size, max_rollouts - attempts) for prompts not done, 0 for the others, trimmed by the class's
            trim rule so that the batch total stays <= ``inference_cap * budget``.
        """
        s, a = _as_success_counts(successes, attempts)
        self._check_group_size(group_size)
        check_int("budget", budget, minimum=1, reason="the training budget n x M")
        check_int("generated_so_far", generated_so_far, minimum=0)
        if generated_so_far == 0:
            if np.any(a > 0):
                raise ValueError(
                    "generated_so_far=0 but some attempts are > 0: pass the number of completions generated so far "
                    "in this batch (the sum of the previous rounds' counts)."
                )
            return np.full(len(a), max(self.round_size, group_size), dtype=np.int64)
        want = np.minimum(self.round_size, np.maximum(self.max_rollouts - a, 0)).astype(np.int64)
        want[self.is_done(s, a, group_size)] = 0
        room = math.floor(self.inference_cap * budget + 1e-9) - int(generated_so_far)
        if room <= 0:
            return np.zeros(len(a), dtype=np.int64)
        if int(want.sum()) <= room:
            return want
        # Trim: serve whole rounds in priority order; the last prompt served may get a partial round.
        unmixed = (s == 0) | (s == a)
        order = np.lexsort((np.arange(len(a)), a, s, ~unmixed))  # last key first: unmixed, successes, attempts
        order = order[want[order] > 0]
        served = np.cumsum(want[order])
        counts = np.zeros(len(a), dtype=np.int64)
        full = order[served <= room]
        counts[full] = want[full]
        rest = room - int(counts.sum())
        if rest > 0 and len(full) < len(order):
            counts[order[len(full)]] = rest
        return counts

    def select(
        self,
        success: np.ndarray,
        group_ids: np.ndarray,
        num_prompts: int,
        group_size: int,
        rng: np.random.Generator,
    ) -> np.ndarray:
        """Indices of the completions to train on: exactly ``group_size`` per prompt, sorted by prompt then index.

        Per prompt i with c_i correct and f_i incorrect completions (c_i + f_i >= n), the selection takes
        min(c_i, max(floor(n / 2), n - f_i)) correct ones and the rest incorrect: floor(n / 2) correct and
        ceil(n / 2) incorrect when both kinds suffice, otherwise every completion of the short kind and the
        remainder from the other. Within each kind the completions are chosen uniformly at random with ``rng`` (one
        uniform draw per completion, so the same generator state gives the same selection).

        Args:
            success: ``(K,)`` bool per generated completion (:func:`is_success`; floats are refused: apply the
                threshold first).
            group_ids: ``(K,)`` prompt index of each completion, in ``[0, num_prompts)``.
            num_prompts: M.
            group_size: n; every prompt must have >= n completions (round 1 guarantees it).
            rng: the generator, e.g. ``np.random.default_rng([seed, step])``.

        Returns:
            ``(n M,)`` int64 indices into the generated completions.

        Example:
            >>> seq = ReinforceAdaSeqBalance()
            >>> success = np.array([1, 0, 0, 0, 0, 1, 1, 1], dtype=bool)  # prompt 0: 1 of 4 correct; prompt 1: 3 of 4
            >>> picked = seq.select(success, np.array([0, 0, 0, 0, 1, 1, 1, 1]), 2, 2, np.random.default_rng(0))
            >>> success[picked].tolist()  # one correct and one incorrect for each prompt
            [True, False, False, True]
        """
        success = _as_success(success)
        group_ids = _as_group_ids(group_ids, len(success), num_prompts)
        self._check_group_size(group_size)
        if not isinstance(rng, np.random.Generator):
            raise TypeError(f"rng must be a numpy.random.Generator (np.random.default_rng(seed)), got {type(rng)}.")
        n = int(group_size)
        total = np.bincount(group_ids, minlength=num_prompts)
        short = np.flatnonzero(total < n)
        if len(short):
            raise ValueError(
                f"select: prompts {short[:5].tolist()} have {total[short][:5].tolist()} completions, fewer than "
                f"group_size={n}. Every prompt needs >= group_size completions (round 1 gives max(round_size, "
                "group_size))."
            )
        correct = np.bincount(group_ids, weights=success, minlength=num_prompts).astype(np.int64)
        take_correct = np.minimum(correct, np.maximum(n // 2, n - (total - correct)))
        take = np.stack([n - take_correct, take_correct], axis=1)  # column 0: incorrect, 1: correct
        kind = success.astype(np.int64)
        key = rng.random(len(success))
        order = np.lexsort((key, kind, group_ids))  # by prompt, then kind, then a random key
        block = group_ids[order] * 2 + kind[order]
        start = np.searchsorted(block, block, side="left")
        rank = np.arange(len(order)) - start
        chosen = order[rank < take.reshape(-1)[block]]
        return chosen[np.lexsort((chosen, group_ids[chosen]))].astype(np.int64)

    # -- helpers ----------------------------------------------------------------------------------------------------
    def _check_group_size(self, group_size: int) -> None:
        check_int("group_size", group_size, minimum=1, reason="TRL's num_generations")
        if group_size > self.max_rollouts:
            raise ValueError(
                f"group_size={group_size} exceeds max_rollouts={self.max_rollouts}: a prompt could never reach the "
                f"training group size. Raise max_rollouts (>= {group_size}) or lower num_generations."
            )


@dataclass
class ReinforceAdaSeqPos(Sequential):
    """Reinforce-Ada Seq-Pos: a prompt is done once it has >= K correct completions (K = ``min_successes``).

    Paper: Reinforce-Ada (Xiong et al., 2025, arXiv 2510.04996), Sec. 3.2, the positive-focused exit rule.

    Samples until a success shows up (the official ``positive_focused``): expected draws about K / p, capped at
    N_max, so hard prompts get up to N_max and solved ones stop after round 1.

    Example:
        >>> pos = ReinforceAdaSeqPos(min_successes=2)
        >>> pos.is_done(np.array([0, 1, 2, 8]), np.array([8, 8, 16, 8]), group_size=4).tolist()
        [False, False, True, True]
    """

    name: ClassVar[str] = "reinforce_ada_seq_pos"

    min_successes: int = 1

    def __post_init__(self) -> None:
        super().__post_init__()
        check_int(
            "min_successes",
            self.min_successes,
            minimum=1,
            reason="K, correct completions after which a prompt stops; the official value is 1",
        )

    def is_done(self, successes: np.ndarray, attempts: np.ndarray, group_size: int) -> np.ndarray:
        s, _ = _as_success_counts(successes, attempts)
        return s >= self.min_successes


@dataclass
class ReinforceAdaSeqBalance(Sequential):
    """Reinforce-Ada Seq-Balance: done once a prompt has >= h correct AND >= h incorrect, h = max(1, floor(n / 2)).

    Paper: Reinforce-Ada (Xiong et al., 2025, arXiv 2510.04996), Sec. 3.2, the balanced exit rule.

    Collects both kinds, so hard prompts sample until successes show up and easy ones until failures do (the paper's
    best variant; its inference rises late in training as it hunts rare errors). For odd n both thresholds are
    floor(n / 2) (the official code asks n // 2 correct and n - n // 2 incorrect); :meth:`select` fills the odd
    slot from the incorrect side when both kinds suffice.

    Example:
        >>> bal = ReinforceAdaSeqBalance()
        >>> bal.is_done(np.array([4, 3, 8, 2]), np.array([8, 8, 8, 4]), group_size=4).tolist()
        [True, True, False, True]
    """

    name: ClassVar[str] = "reinforce_ada_seq_balance"

    def is_done(self, successes: np.ndarray, attempts: np.ndarray, group_size: int) -> np.ndarray:
        s, a = _as_success_counts(successes, attempts)
        self._check_group_size(group_size)
        half = max(1, int(group_size) // 2)
        return (s >= half) & (a - s >= half)


__all__ = ["ReinforceAdaSeqBalance", "ReinforceAdaSeqPos", "Sequential"]

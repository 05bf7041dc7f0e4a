"""What the logs say about a batch sampled in rounds: ``log_extra`` columns kept with their rows, and the reward of
everything generated.

TRL 1.16 buffers a reward function's ``log_extra(column, values)`` (one value per row it scored) in
``_pending_extra_logs`` and flushes the buffer against the rows of the pass that scored them. A round scores every
completion it generates, and the training pass after the rounds scores nothing (it replays the chosen completions):
so each round's values are taken out of the buffer per row (:func:`take_round_extras`), travel with their completion
(``rounds.Generated``), and are put back for the replayed rows only (:func:`replay_extras`), in the pass's row order.

TRL's ``reward``, ``reward_std`` and ``rewards/<func>/mean`` cover the completions trained on. Under Seq and dynamic
sampling those are a chosen subset (balanced, filtered); ``generated/reward_mean``, ``generated/reward_std`` and
``generated/rewards/<func>/mean`` cover every completion generated in the step, all rounds included, with TRL's own
formulas: equal to TRL's figures when every completion is trained.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import torch
from trl.trainer.utils import nanstd


def take_round_extras(pending: dict[str, list[Any]], size: int) -> list[dict[str, Any]]:
    """The ``log_extra`` values logged while this rank scored a round's ``size`` rows, one dict per row, taken out of
    TRL's buffer ``pending`` (the training pass would flush them against other rows). A column whose values are not
    one per row cannot be placed: its cells are left empty (None), with a warning."""
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


def replay_extras(extras: list[dict[str, Any]], completions: np.ndarray) -> dict[str, list[Any]]:
    """``log_extra`` columns for the replayed ``completions`` (indices into ``extras``, every generated completion's
    values, identical on every rank): every column any completion logged, None where one did not (as TRL fills a
    rank that logged nothing)."""
    columns = sorted({column for row in extras for column in row})
    return {column: [extras[i].get(column) for i in completions.tolist()] for column in columns}


def generated_reward_metrics(
    rewards_per_func: torch.Tensor, reward_func_names: list[str], reward_weights: torch.Tensor
) -> dict[str, float]:
    """``generated/*`` metrics over ``rewards_per_func``: the gathered ``(N, K)`` rewards of every completion generated
    in the step (every process's), with TRL's formulas for ``reward``, ``reward_std`` and ``rewards/<func>/mean``
    (grpo_trainer.py, ``_generate_and_score_completions``)."""
    metrics = {}
    for i, name in enumerate(reward_func_names):
        metrics[f"generated/rewards/{name}/mean"] = torch.nanmean(rewards_per_func[:, i]).item()
    weights = reward_weights.to(rewards_per_func.device).unsqueeze(0)
    rewards = (rewards_per_func * weights).nansum(dim=1)
    rewards[torch.isnan(rewards_per_func).all(dim=1)] = torch.nan  # unscorable completions, excluded as TRL does
    metrics["generated/reward_mean"] = torch.nanmean(rewards).item()
    metrics["generated/reward_std"] = nanstd(rewards).item()
    return metrics

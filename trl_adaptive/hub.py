"""The per-prompt statistics of a run on the Hub: a ``datasets.Dataset`` pushed next to the model, with a card, and
loaded back as the next run's warm start.

Everything here is produced offline and is tested for content and format; only :func:`push_statistics_to_hub` talks
to the Hub, through ``Dataset.push_to_hub`` and ``DatasetCard.push_to_hub`` (huggingface_hub's own code). The model
card itself (TRL's card plus the adaptive section) is ``trl_adaptive/trainer/model_card.py``.

    trainer.train()
    trainer.push_to_hub()                                   # model + card (AdaptiveGRPOTrainer.create_model_card)
    push_statistics_to_hub(trainer, "me/run-1-prompt-statistics")
    ...
    stats = load_statistics("me/run-1-prompt-statistics")  # next run
    AdaptiveGRPOTrainer(..., statistics=stats)
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from . import __version__
from .allocation import STATUS_LABELS, prompts_per_status
from .report.run_files import FINAL_STATISTICS_FILE
from .stats import PromptStatistics

CARD_TAGS = ("trl-adaptive", "adaptive-rollout-allocation")


# ---------------------------------------------------------------------------------------------------------------------
# The per-prompt statistics as a dataset
# ---------------------------------------------------------------------------------------------------------------------
def status_table(status: Mapping[str, int]) -> list[str]:
    """Markdown rows of a prompt-status count (:func:`~trl_adaptive.allocation.prompts_per_status`): labels, counts."""
    return [
        "| " + " | ".join(STATUS_LABELS[k] for k in status) + " |",
        "|" + "---|" * len(status),
        "| " + " | ".join(str(v) for v in status.values()) + " |",
    ]


def _statistics_of(source: Any) -> PromptStatistics:
    if isinstance(source, PromptStatistics):
        return source
    statistics = getattr(source, "prompt_statistics", None)
    if not isinstance(statistics, PromptStatistics):
        raise TypeError(f"Expected an AdaptiveGRPOTrainer or a PromptStatistics, got {type(source).__name__}.")
    return statistics


def statistics_dataset(source: Any):
    """The per-prompt statistics of a trainer (or a :class:`PromptStatistics`) as a ``datasets.Dataset``: one row
    per prompt with its id, prompt fingerprint, success rate and counts (``PromptStatistics.to_dataset``)."""
    return _statistics_of(source).to_dataset()


def statistics_card_text(dataset: Any, model_repo_id: str | None = None) -> str:
    """Markdown body of the statistics dataset's card: what the columns are and how to warm-start from them."""
    model = (
        f"[`{model_repo_id}`](https://huggingface.co/{model_repo_id})"
        if model_repo_id
        else "an AdaptiveGRPOTrainer run"
    )
    rates = np.asarray(dataset["success_rate"], dtype=np.float64) if len(dataset) else np.zeros(0)
    status = prompts_per_status(rates)
    lines = [
        "# Per-prompt statistics",
        "",
        f"Per-prompt success statistics of {model}, written by trl-adaptive {__version__}: one row per",
        f"training prompt ({len(dataset)} rows), keyed by the prompt id the trainer used, with a fingerprint of the",
        "prompt so that a warm start refuses statistics of other prompts.",
        "",
        "Columns: " + ", ".join(f"`{c}`" for c in dataset.column_names) + ".",
        "",
        *status_table(status),
        "",
        "Warm-start the next run:",
        "",
        "```python",
        "from trl_adaptive.hub import load_statistics",
        "",
        'statistics = load_statistics("<this repo>")',
        "trainer = AdaptiveGRPOTrainer(..., statistics=statistics)",
        "```",
        "",
    ]
    return "\n".join(lines)


def push_statistics_to_hub(
    source: Any,
    repo_id: str,
    *,
    model_repo_id: str | None = None,
    private: bool | None = None,
    token: str | None = None,
    commit_message: str = "Upload per-prompt statistics",
) -> str:
    """Push the per-prompt statistics as a dataset repo (``Dataset.push_to_hub``) with a card; returns its URL.

    Call it on the main process only (``trainer.accelerator.is_main_process``).
    """
    from huggingface_hub import DatasetCard

    dataset = statistics_dataset(source)
    dataset.push_to_hub(repo_id, private=private, token=token, commit_message=commit_message)
    card = DatasetCard.load(repo_id, repo_type="dataset", token=token)  # keeps the metadata push_to_hub wrote
    card.text = statistics_card_text(dataset, model_repo_id)
    tags = list(card.data.tags or [])
    card.data.tags = tags + [t for t in CARD_TAGS if t not in tags]
    card.push_to_hub(repo_id, repo_type="dataset", token=token, commit_message="Describe the per-prompt statistics")
    return f"https://huggingface.co/datasets/{repo_id}"


def load_statistics(source: str | os.PathLike[str], **expected_config: float) -> PromptStatistics:
    """Per-prompt statistics of an earlier run, for ``AdaptiveGRPOTrainer(..., statistics=...)``.

    Args:
        source: a ``prompt_statistics.json`` (``PromptStatistics.save``), a ``.parquet`` file or a folder written by
            ``Dataset.save_to_disk`` holding :func:`statistics_dataset`, a run's output folder (its
            ``prompt_statistics.json``), or a Hub dataset id pushed by :func:`push_statistics_to_hub`.
        **expected_config: e.g. ``success_threshold=1.0``; each must equal the saved value (the counts would mean
            something else otherwise).
    """
    path = Path(source)
    if path.is_dir() and (path / FINAL_STATISTICS_FILE).is_file() and not (path / "dataset_info.json").is_file():
        path = path / FINAL_STATISTICS_FILE
    if path.suffix == ".json" and path.is_file():
        return PromptStatistics.load(path, **expected_config)
    from datasets import Dataset, load_dataset, load_from_disk

    if path.is_file() and path.suffix == ".parquet":
        dataset = Dataset.from_parquet(str(path))
    elif path.is_dir() and (path / "dataset_info.json").is_file():
        dataset = load_from_disk(str(path))
    elif path.exists():
        dataset = load_dataset(str(path), split="train")
    else:
        dataset = load_dataset(str(source), split="train")
    return PromptStatistics.from_dataset(dataset, **expected_config)


__all__ = [
    "CARD_TAGS",
    "load_statistics",
    "push_statistics_to_hub",
    "statistics_card_text",
    "statistics_dataset",
    "status_table",
]

"""One function per figure of a run report: plain data in, a matplotlib Figure out (no file reading here).

Several runs are overlaid (line and bar plots) or put side by side with shared axes (status bars, transition
matrices). Figure numbers refer to Knapsack RL (arXiv 2509.25849).
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only; never open a window
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402

from ..allocation.status import SEEN_STATUSES, STATUS_LABELS, STATUSES  # noqa: E402

# Red (never solved) to green (always solved), grey for prompts without a rate yet.
STATUS_COLORS = {
    "unseen": "#9e9e9e",
    "p0": "#c62828",
    "p0_0.2": "#ef6c00",
    "p0.2_0.8": "#f9a825",
    "p0.8_1": "#7cb342",
    "p1": "#2e7d32",
}


def _run_colors(labels) -> dict[str, str]:
    cycle = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    return {label: cycle[i % len(cycle)] for i, label in enumerate(labels)}


def _pick_epochs(epochs: list[int], limit: int = 6) -> list[int]:
    """At most ``limit`` epochs, evenly spread, always the first and the last (one panel each)."""
    if len(epochs) <= limit:
        return epochs
    return [epochs[round(i)] for i in np.linspace(0, len(epochs) - 1, limit)]


def _epoch_panels(n: int, width: float = 3.4, height: float = 2.8, **kwargs):
    fig, axes = plt.subplots(1, n, figsize=(max(width * n, 4.5), height), squeeze=False, **kwargs)
    return fig, axes[0]


def plot_allocation_histogram(counts: dict[str, dict[int, np.ndarray]]) -> Figure:
    """Figure 5 per epoch: how many prompt draws got each number of completions n_i; runs side by side."""
    epochs = _pick_epochs(sorted({e for per_run in counts.values() for e in per_run}))
    colors = _run_colors(counts)
    top = max(int(c.max()) for per_run in counts.values() for c in per_run.values())
    # One bar per value of n_i while they fit, else 40 bins of equal width.
    edges = np.arange(-0.5, top + 1.5, 1.0) if top <= 48 else np.linspace(-0.5, top + 0.5, 41)
    centres, width = (edges[:-1] + edges[1:]) / 2, (edges[1] - edges[0]) * 0.8 / len(counts)
    fig, axes = _epoch_panels(len(epochs), sharey=True)
    for ax, epoch in zip(axes, epochs, strict=True):
        for k, (label, per_run) in enumerate(counts.items()):
            if epoch in per_run:
                height, _ = np.histogram(per_run[epoch], bins=edges)
                offset = (k - (len(counts) - 1) / 2) * width
                ax.bar(centres + offset, height, width, color=colors[label], label=label)
        ax.set_title(f"epoch {epoch + 1}")
        ax.set_xlabel("completions per prompt (n_i)")
    axes[0].set_ylabel("prompt draws")
    axes[0].legend(fontsize=8)
    fig.suptitle("Allocation histogram per epoch")
    fig.tight_layout()
    return fig


def plot_counts_by_status(by_status: dict[str, dict[int, dict[str, tuple[float, int]]]]) -> Figure:
    """Mean completions per prompt by the status the allocator saw (its last-epoch rate), per epoch and run."""
    epochs = _pick_epochs(sorted({e for per_run in by_status.values() for e in per_run}))
    colors = _run_colors(by_status)
    width = 0.8 / len(by_status)
    fig, axes = _epoch_panels(len(epochs), width=3.8, height=3.0, sharey=True)
    for ax, epoch in zip(axes, epochs, strict=True):
        present = [s for s in STATUSES if any(s in per_run.get(epoch, {}) for per_run in by_status.values())]
        x = np.arange(len(present))
        for k, (label, per_run) in enumerate(by_status.items()):
            values = [per_run.get(epoch, {}).get(s, (np.nan, 0))[0] for s in present]
            ax.bar(x + (k - (len(by_status) - 1) / 2) * width, values, width, color=colors[label], label=label)
        ax.set_xticks(x, [STATUS_LABELS[s] for s in present], rotation=30, ha="right", fontsize=8)
        ax.set_title(f"epoch {epoch + 1}")
        draws = [v for per_run in by_status.values() for v in per_run.get(epoch, {}).values()]
        mean = sum(m * n for m, n in draws) / max(sum(n for _, n in draws), 1)  # budget / prompts: uniform's n
        ax.axhline(
            mean, color="0.4", linestyle="--", linewidth=1, label="mean (uniform)" if epoch == epochs[0] else None
        )
    axes[0].set_ylabel("mean completions per prompt")
    axes[0].legend(fontsize=8)
    fig.suptitle("Completions per prompt by the success rate the allocator saw")
    fig.tight_layout()
    return fig


def plot_gradient_ratios(series: dict[str, dict[str, list[float]]], epoch_starts: list[int]) -> Figure:
    """Figure 6 and its split: effective-gradient ratio per step; zero-gradient shares, all correct and all wrong."""
    colors = _run_colors(series)
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.2), sharex=True)
    for k, (label, s) in enumerate(series.items()):
        style = {"color": colors[label], "linewidth": max(2.8 - 0.8 * k, 1.0)}  # earlier runs wider: overlaps show
        left.plot(s["step"], s["effective"], marker=".", label=label, **style)
        right.plot(s["step"], s["all_correct"], marker=".", label=f"{label}: all correct", **style)
        right.plot(s["step"], s["all_wrong"], marker="x", linestyle="--", label=f"{label}: all wrong", **style)
    for ax in (left, right):
        for step in epoch_starts:
            ax.axvline(step - 0.5, color="0.7", linestyle=":", linewidth=1)
        ax.set_xlabel("training step (dotted: epoch start)")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_ylim(-0.02, 1.02)
    left.set_title("effective-gradient ratio")
    left.set_ylabel("share of completions")
    right.set_title("zero-gradient share: all correct / all wrong")
    left.legend(fontsize=8)
    right.legend(fontsize=7, ncol=max(1, len(series) // 2))
    fig.tight_layout()
    return fig


def plot_rewards(series: dict[str, dict[str, list[float]]], epoch_starts: list[int]) -> Figure:
    """Mean reward per step: of the completions trained on (TRL's ``reward``, solid) and of every completion generated
    (``generated/reward_mean``, dashed); under Seq and dynamic sampling the trained ones are a chosen subset."""
    colors = _run_colors(series)
    fig, ax = plt.subplots(figsize=(6, 3.2))
    for label, s in series.items():
        ax.plot(s["step"], s["trained"], marker=".", color=colors[label], label=f"{label}: trained")
        if not np.isnan(s["generated"]).all():
            style = {"marker": "x", "linestyle": "--", "color": colors[label]}
            ax.plot(s["step"], s["generated"], label=f"{label}: generated", **style)
    for step in epoch_starts:
        ax.axvline(step - 0.5, color="0.7", linestyle=":", linewidth=1)
    ax.set_xlabel("training step (dotted: epoch start)")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_ylabel("mean reward")
    ax.set_title("reward: completions trained on / every completion generated")
    ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


def plot_tokens_axis(ratios: dict[str, dict[str, list[float]]], rewards: dict[str, dict[str, list[float]]]) -> Figure:
    """Effective-gradient ratio (left) and mean reward (right: trained solid, generated dashed) against the
    cumulative tokens generated: runs compared at equal cost. Each series holds ``tokens`` (x) and its values; the
    reward panel is left out when no run logged a reward."""
    colors = _run_colors(ratios | rewards)
    panels = 2 if rewards else 1
    fig, axes = plt.subplots(1, panels, figsize=(5 * panels, 3.2), squeeze=False)
    left = axes[0][0]
    width = {label: max(2.8 - 0.8 * k, 1.0) for k, label in enumerate(colors)}  # earlier runs wider: overlaps show
    for label, s in ratios.items():
        left.plot(s["tokens"], s["effective"], marker=".", color=colors[label], linewidth=width[label], label=label)
    left.set_ylim(-0.02, 1.02)
    left.set_title("effective-gradient ratio")
    left.set_ylabel("share of completions")
    if rewards:
        right = axes[0][1]
        for label, s in rewards.items():
            style = {"color": colors[label], "linewidth": width[label]}
            right.plot(s["tokens"], s["trained"], marker=".", label=f"{label}: trained", **style)
            if not np.isnan(s["generated"]).all():
                style |= {"marker": "x", "linestyle": "--"}
                right.plot(s["tokens"], s["generated"], label=f"{label}: generated", **style)
        right.set_title("mean reward")
        right.set_ylabel("mean reward")
    for ax in axes[0]:
        ax.set_xlabel("cumulative generated tokens")
        ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


def plot_expected_tokens(pairs: dict[str, tuple[list[float], list[float]]]) -> Figure:
    """Per prompt draw: the expected tokens per completion the batch was allocated with (x) against the mean tokens per
    completion it then generated (y); on the diagonal the expectation was right."""
    colors = _run_colors(pairs)
    fig, ax = plt.subplots(figsize=(4.6, 4.0))
    for label, (expected, actual) in pairs.items():
        ax.scatter(expected, actual, s=10, alpha=0.6, color=colors[label], label=f"{label} ({len(expected)} draws)")
    values = [v for e, a in pairs.values() for v in e + a]
    pad = max(0.05 * (max(values) - min(values)), 0.5)
    lo, hi = min(values) - pad, max(values) + pad  # both axes on the data's range: the diagonal stays at 45 degrees
    ax.plot([lo, hi], [lo, hi], color="0.5", linestyle="--", linewidth=1)
    ax.set_xlim(lo, hi)
    ax.set_ylim(lo, hi)
    ax.set_xlabel("expected tokens per completion")
    ax.set_ylabel("tokens per completion generated")
    ax.set_title("expected vs actual tokens per prompt")
    ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


def plot_prompt_status(status: dict[str, dict[int, dict[str, int]]]) -> Figure:
    """Figure 8 per epoch: prompts per status by the success rate they reached in that epoch; one panel per run."""
    fig, axes = _epoch_panels(len(status), width=3.6, height=3.0, sharey=True)
    for ax, (label, per_epoch) in zip(axes, status.items(), strict=True):
        epochs = sorted(per_epoch)
        bottom = np.zeros(len(epochs))
        for s in SEEN_STATUSES:
            values = np.array([per_epoch[e][s] for e in epochs], dtype=float)
            ax.bar([e + 1 for e in epochs], values, bottom=bottom, color=STATUS_COLORS[s], label=STATUS_LABELS[s])
            bottom += values
        ax.set_xticks([e + 1 for e in epochs])
        ax.set_xlabel("epoch")
        ax.set_title(label)
    axes[0].set_ylabel("prompts")
    axes[-1].legend(fontsize=7, loc="center left", bbox_to_anchor=(1.0, 0.5))
    fig.suptitle("Prompt status per epoch")
    fig.tight_layout()
    return fig


def plot_transition_matrix(matrices: dict[str, tuple[np.ndarray, int, int]]) -> Figure:
    """Figure 7: share of each first-epoch status that ends in each last-epoch status (row-normalised), per run."""
    fig, axes = _epoch_panels(len(matrices), width=4.2, height=3.8)
    names = [STATUS_LABELS[s] for s in SEEN_STATUSES]
    for ax, (label, (matrix, first, last)) in zip(axes, matrices.items(), strict=True):
        rows = matrix.sum(axis=1, keepdims=True)
        share = np.divide(matrix, rows, out=np.zeros(matrix.shape), where=rows > 0)
        ax.imshow(share, cmap="Blues", vmin=0, vmax=1)
        for i in range(len(SEEN_STATUSES)):
            for j in range(len(SEEN_STATUSES)):
                if rows[i, 0]:
                    color = "white" if share[i, j] > 0.6 else "black"
                    ax.text(
                        j, i, f"{share[i, j]:.0%}\n({matrix[i, j]})", ha="center", va="center", fontsize=7, color=color
                    )
        ax.set_xticks(range(len(names)), names, rotation=35, ha="right", fontsize=7)
        ax.set_yticks(range(len(names)), names, fontsize=7)
        ax.set_xlabel(f"status in epoch {last + 1}")
        ax.set_ylabel(f"status in epoch {first + 1}")
        ax.set_title(label)
    fig.suptitle("Prompt-status transitions, first to last epoch")
    fig.tight_layout()
    return fig


def save(fig: Figure, path: str | Path, dpi: int = 90) -> None:
    """Write a PNG and free the figure."""
    fig.savefig(path, dpi=dpi)
    plt.close(fig)

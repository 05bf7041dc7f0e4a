"""``trl_adaptive.report``: a run folder's files (``run_files``), and the run report built from them (``build``:
reading a run; ``tables`` and ``tokens``: what is counted; ``plots``: the figures; ``summary``: the markdown page).
``trl-adaptive report RUN_DIR`` writes it (docs/report.md). Imports no torch or trl; matplotlib only to draw.
"""

from .build import (
    RATIO_KEYS,
    REWARD_KEYS,
    STATUS_LABELS,
    RunData,
    counts_by_status,
    counts_per_epoch,
    epoch_rates,
    epoch_starts,
    load_run,
    ratio_from_allocations,
    ratio_series,
    reward_series,
    status_per_epoch,
    summarize,
    summary_markdown,
    token_series,
    transition_matrix,
    visit_staleness,
    write_report,
)

__all__ = [
    "RATIO_KEYS",
    "REWARD_KEYS",
    "RunData",
    "STATUS_LABELS",
    "counts_by_status",
    "counts_per_epoch",
    "epoch_rates",
    "epoch_starts",
    "load_run",
    "ratio_from_allocations",
    "ratio_series",
    "reward_series",
    "status_per_epoch",
    "summarize",
    "summary_markdown",
    "token_series",
    "transition_matrix",
    "visit_staleness",
    "write_report",
]

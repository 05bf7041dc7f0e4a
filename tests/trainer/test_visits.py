"""The live staleness metrics (``trainer/state.py``) against the run report's rule, and their saved state."""

from __future__ import annotations

import numpy as np

from trl_adaptive.report.tables import visit_staleness
from trl_adaptive.trainer.state import VisitClock


def _records(seed: int) -> list[dict]:
    """Batches of 4 of 10 prompts, some given 0 completions (a plan that skipped them)."""
    rng = np.random.default_rng(seed)
    return [
        {"prompt_ids": rng.choice(10, 4, replace=False).tolist(), "generated": rng.choice([0, 2, 4], 4).tolist()}
        for _ in range(30)
    ]


def test_the_clock_logs_what_the_report_computes_from_the_allocation_log():
    for seed in range(5):
        records, clock = _records(seed), VisitClock()
        logged = [clock.visit(np.array(r["prompt_ids"]), np.array(r["generated"])) for r in records]
        report = visit_staleness(records)
        revisits = sum(m["prompts/revisited"] for m in logged)
        assert revisits == report["revisits"]
        weighted = sum(m.get("prompts/batches_since_last_visit_mean", 0.0) * m["prompts/revisited"] for m in logged)
        assert np.isclose(weighted / revisits, report["batches_since_last_visit_mean"])
        assert (
            max(m.get("prompts/batches_since_last_visit_max", 0) for m in logged)
            == report["batches_since_last_visit_max"]
        )


def test_a_restored_clock_goes_on_as_the_uninterrupted_one():
    records = _records(7)
    whole, first = VisitClock(), VisitClock()
    for r in records[:12]:
        whole.visit(np.array(r["prompt_ids"]), np.array(r["generated"]))
        first.visit(np.array(r["prompt_ids"]), np.array(r["generated"]))
    resumed = VisitClock()
    resumed.load_state_dict(first.state_dict())
    for r in records[12:]:
        ids, generated = np.array(r["prompt_ids"]), np.array(r["generated"])
        assert resumed.visit(ids, generated) == whole.visit(ids, generated)

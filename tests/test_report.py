"""Run reports (``trl_adaptive.report``, ``trl-adaptive report``) rendered from short real runs of the tiny model.

Two real runs (knapsack and uniform, 2 epochs, checkpoints every 2 steps) are trained once per module; every test
copies what it needs, deletes or truncates files, and renders. A last test renders a 2-process run. The first tests
need no training: the report of a folder of JSON files imports no torch, trl or transformers.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from helpers import REPO
from helpers.launch import launch_two_ranks
from helpers.trainer import build_trainer

from trl_adaptive.allocation import STATUSES
from trl_adaptive.cli import main as cli_main
from trl_adaptive.report import (
    RunData,
    counts_by_status,
    epoch_rates,
    load_run,
    ratio_from_allocations,
    status_per_epoch,
    summarize,
    token_series,
    transition_matrix,
    visit_staleness,
    write_report,
)
from trl_adaptive.report.run_files import (
    ALLOCATION_LOG_FILE,
    CHECKPOINT_PREFIX,
    TRAINER_STATE_FILE,
    allocation_record_problem,
    read_allocation_log,
)
from trl_adaptive.stats import PromptStatistics, prompt_fingerprint

FIGURES = {
    "allocation_histogram.png",
    "allocation_by_status.png",
    "gradient_ratios.png",
    "prompt_status.png",
    "transition_matrix.png",
    "reward.png",  # the runs log generated/reward_mean
    "tokens.png",  # allocations.jsonl has token counts
    "expected_tokens.png",  # epoch 2's prompts had length estimates
}
TWO_RANK_SCRIPT = REPO / "tests" / "scripts" / "train_two_ranks.py"
HEAVY = ("torch", "trl", "transformers")


def _heavy_imports(args: list[str]) -> tuple[subprocess.CompletedProcess, list[str]]:
    """Run ``python -X importtime ARGS``; the top-level packages of HEAVY it imported (from the importtime lines)."""
    done = subprocess.run([sys.executable, "-X", "importtime", *args], capture_output=True, text=True, timeout=120)
    # Lines read "import time: self [us] | cumulative | name", the name indented by its nesting depth.
    names = [line.rsplit("|", 1)[1].strip() for line in done.stderr.splitlines() if line.startswith("import time:")]
    assert len(names) > 50, done.stderr[-2000:]  # the parse found the modules
    return done, sorted({name.split(".")[0] for name in names} & set(HEAVY))


# Tokens of _write_json_run's runs with tokens, per batch and prompt: generated (4 completions each) and expected per
# completion (None: no estimate yet, the first batch).
JSON_RUN_TOKENS = [[40, 24], [36, 30], [44, 20], [32, 28]]
JSON_RUN_EXPECTED = [[None, None], [9.0, 9.0], [10.0, 6.0], [9.0, 7.5]]


def _write_json_run(run_dir: Path, tokens: bool = False) -> Path:
    """A run folder written by hand: 2 epochs of 2 batches of 2 prompts, and TRL's trainer_state.json; with
    ``tokens``, each line has the trainer's token keys (JSON_RUN_TOKENS, JSON_RUN_EXPECTED)."""
    run_dir.mkdir(parents=True)
    records, logs = [], []
    rates = [None] * 4
    for step, (epoch, ids, successes) in enumerate(
        [(0, [0, 1], [0, 4]), (0, [2, 3], [2, 1]), (1, [0, 1], [3, 4]), (1, [2, 3], [0, 4])]
    ):
        counts = [4, 4]
        records.append(
            {"step": step, "epoch": epoch, "prompt_ids": ids, "counts": counts, "successes": successes,
             "attempts": counts, "success_rates": [rates[i] for i in ids], "engine": "transformers"}
        )  # fmt: skip
        if tokens:
            records[-1] |= {"expected_tokens": JSON_RUN_EXPECTED[step], "generated_tokens": JSON_RUN_TOKENS[step]}
        rates[ids[0]], rates[ids[1]] = successes[0] / 4, successes[1] / 4
        logs.append({"step": step + 1, "allocation/effective_gradient_ratio": 0.5})
    lines = "".join(json.dumps(record) + "\n" for record in records)
    (run_dir / ALLOCATION_LOG_FILE).write_text(lines, encoding="utf-8")
    state = {"global_step": len(records), "log_history": logs}
    (run_dir / TRAINER_STATE_FILE).write_text(json.dumps(state), encoding="utf-8")
    return run_dir


@pytest.mark.parametrize(
    "module",
    [
        "trl_adaptive.report",
        "trl_adaptive.report.run_files",
        "trl_adaptive.trainer.output_files",
        "trl_adaptive.cli",
    ],
)
def test_reading_runs_imports_no_torch(module):
    done, heavy = _heavy_imports(["-c", f"import {module}"])
    assert done.returncode == 0, done.stderr[-2000:]
    assert heavy == [], f"import {module} imported {heavy}"


def test_cli_reports_a_json_run_folder_without_torch(tmp_path):
    run_dir, out = _write_json_run(tmp_path / "run"), tmp_path / "out"
    done, heavy = _heavy_imports(["-m", "trl_adaptive.cli", "report", str(run_dir), "-o", str(out)])
    assert done.returncode == 0, done.stderr[-2000:]
    assert heavy == [], f"trl-adaptive report imported {heavy}"
    assert f"wrote {out / 'summary.md'} and 5 figures" in done.stdout
    (s,) = json.loads((out / "report.json").read_text())["runs"]
    assert s["steps"] == 4 and s["epochs"] == 2 and s["ratio_source"] == "trainer_state.json"
    assert s["converted_from_p0"] == s["p0_in_first_epoch"] == 1  # prompt 0: p = 0 in epoch 1, 0.75 in epoch 2
    assert "No prompt_statistics.json" in " ".join(s["missing"])


def test_a_line_cut_short_by_a_crash_loses_no_later_record(tmp_path):
    """A crash mid-line leaves no line end; the resumed run's next record starts a line of its own."""
    from trl_adaptive.trainer.output_files import append_allocation_record

    def record(step):
        return {"step": step, "epoch": 0, "prompt_ids": [0], "counts": [4], "success_rates": [None], "successes": [1],
                "attempts": [4]}  # fmt: skip

    for step in range(3):
        append_allocation_record(str(tmp_path), record(step))
    path = tmp_path / ALLOCATION_LOG_FILE
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps(record(3))[:20])  # the crash
    for step in (3, 4):  # resumed from the step-3 checkpoint
        append_allocation_record(str(tmp_path), record(step))
    assert [r["step"] for r in read_allocation_log(str(path))] == [0, 1, 2, 3, 4]


def test_generated_counts_are_read_beside_the_trained_ones_and_older_lines_still_read(tmp_path):
    """allocations.jsonl's generated / generated_successes / generated_attempts: optional (older lines lack them),
    checked like the trained ones when there, and the per-epoch rates (prompt status, transitions) come from them,
    as the statistics store counts, where a line has them."""
    old = {"step": 0, "epoch": 0, "prompt_ids": [0, 1], "counts": [4, 4], "success_rates": [None, None],
           "successes": [4, 2], "attempts": [4, 4]}  # fmt: skip
    assert allocation_record_problem(old) is None
    new = old | {"generated": [4, 12], "generated_successes": [4, 3], "generated_attempts": [4, 12]}
    assert allocation_record_problem(new) is None
    partial = old | {"generated": [4, 12], "generated_successes": [4, 3]}
    assert "'generated_attempts' is missing" in allocation_record_problem(partial)
    assert "generated_successes above generated_attempts for prompt 1 (13 > 12)" in allocation_record_problem(
        new | {"generated_successes": [4, 13]}
    )
    assert "'generated' holds -1" in allocation_record_problem(new | {"generated": [4, -1]})
    assert epoch_rates([old]) == {0: {0: 1.0, 1: 0.5}}
    assert epoch_rates([new]) == {0: {0: 1.0, 1: 0.25}}


def test_the_generated_reward_is_plotted_when_logged(tmp_path):
    """reward.png: TRL's reward (trained) and generated/reward_mean per step; not drawn for logs that predate it."""
    run_dir = _write_json_run(tmp_path / "run")
    assert "reward.png" not in write_report([load_run(run_dir)], tmp_path / "before")["figures"]
    state = json.loads((run_dir / TRAINER_STATE_FILE).read_text())
    for step, row in enumerate(state["log_history"]):
        row |= {"reward": 0.5, "generated/reward_mean": 0.25 + 0.1 * step}
    (run_dir / TRAINER_STATE_FILE).write_text(json.dumps(state), encoding="utf-8")
    report = write_report([load_run(run_dir)], tmp_path / "after")
    assert "reward.png" in report["figures"]
    _assert_png(tmp_path / "after" / "reward.png")


def test_token_keys_are_optional_and_checked_when_there():
    """allocations.jsonl's expected_tokens (per completion, null without an estimate) and generated_tokens (null when
    the driver gave no counts): absent from older lines, both or neither, one entry per prompt, no tokens for a prompt
    without completions."""
    old = {"step": 0, "epoch": 0, "prompt_ids": [0, 1], "counts": [4, 4], "success_rates": [None, None],
           "successes": [4, 2], "attempts": [4, 4], "generated": [4, 0], "generated_successes": [4, 0],
           "generated_attempts": [4, 0]}  # fmt: skip
    new = old | {"expected_tokens": [12.5, None], "generated_tokens": [50, 0]}
    assert allocation_record_problem(old) is None and allocation_record_problem(new) is None
    assert allocation_record_problem(new | {"generated_tokens": [None, None]}) is None
    assert "'generated_tokens' is missing" in allocation_record_problem(old | {"expected_tokens": [1.0, 1.0]})
    assert "'expected_tokens' holds -1.0" in allocation_record_problem(new | {"expected_tokens": [-1.0, 2.0]})
    assert "'generated_tokens' holds 2.5" in allocation_record_problem(new | {"generated_tokens": [2.5, 0]})
    assert "'generated_tokens' must be a list with one entry" in allocation_record_problem(
        new | {"generated_tokens": [50]}
    )
    assert "generated_tokens is 7 for prompt 1, which had no completion generated" in allocation_record_problem(
        new | {"generated_tokens": [50, 7]}
    )


def test_a_log_with_tokens_gets_the_tokens_axis_and_figures(tmp_path):
    """The tokens of a hand-written log, counted here: per batch 64, 66, 64, 60 generated; mixed groups (0 < s < 4)
    per batch: 0, 2, 1, 0 of 2 prompts, so 12 effective completions; expected per completion against actual."""
    run_dir = _write_json_run(tmp_path / "run", tokens=True)
    state = json.loads((run_dir / TRAINER_STATE_FILE).read_text())
    for step, row in enumerate(state["log_history"]):
        row |= {"reward": 0.5, "generated/reward_mean": 0.5, "tokens/trained": float(sum(JSON_RUN_TOKENS[step]))}
    (run_dir / TRAINER_STATE_FILE).write_text(json.dumps(state), encoding="utf-8")
    run = load_run(run_dir)
    ratios, rewards = token_series(run)
    per_batch = [sum(t) for t in JSON_RUN_TOKENS]
    assert ratios["step"] == rewards["step"] == [1, 2, 3, 4]
    assert ratios["tokens"] == rewards["tokens"] == np.cumsum(per_batch).tolist()
    report = write_report([run], tmp_path / "out")
    assert {"tokens.png", "expected_tokens.png"} <= set(report["figures"])
    for name in ("tokens.png", "expected_tokens.png"):
        _assert_png(tmp_path / "out" / name)
    (s,) = report["runs"]
    assert s["generated_tokens"] == sum(per_batch) and s["generated_tokens_per_batch"] == sum(per_batch) / 4
    assert s["trained_tokens_per_batch"] == sum(per_batch) / 4  # logged tokens/trained
    assert s["generated_tokens_per_completion"] == sum(per_batch) / 32
    assert s["tokens_per_effective_completion"] == sum(per_batch) / 12
    expected = [e for row in JSON_RUN_EXPECTED for e in row if e is not None]
    pairs = zip(np.ravel(JSON_RUN_TOKENS), [e for row in JSON_RUN_EXPECTED for e in row], strict=True)
    actual = [t / 4 for t, e in pairs if e is not None]
    assert s["expected_tokens_draws"] == 6
    assert s["actual_over_expected_tokens"] == pytest.approx(sum(actual) / sum(expected))
    assert s["expected_tokens_mean_abs_error"] == pytest.approx(np.mean(np.abs(np.subtract(actual, expected))))
    summary = (tmp_path / "out" / "summary.md").read_text()
    assert "## Tokens" in summary and f"| run | {sum(per_batch)} |" in summary
    assert not any("token counts" in note for note in s["missing"]), s["missing"]


def test_a_log_without_tokens_still_reports_and_says_why_there_is_no_tokens_axis(tmp_path):
    """Lines written before tokens were recorded: every other figure, no token figures, a note with the count; one
    old line among new ones (a run resumed by a newer version) is named the same way; so are unknown counts."""
    old_run = _write_json_run(tmp_path / "old")
    report = write_report([load_run(old_run)], tmp_path / "out-old")
    assert "gradient_ratios.png" in report["figures"] and "tokens.png" not in report["figures"]
    (s,) = report["runs"]
    assert "4 of 4 generation batches in allocations.jsonl have no token counts" in " ".join(s["missing"])
    assert "generated_tokens" not in s and "## Tokens" not in (tmp_path / "out-old" / "summary.md").read_text()
    mixed = _write_json_run(tmp_path / "mixed", tokens=True)
    lines = (mixed / ALLOCATION_LOG_FILE).read_text().splitlines()
    first = json.loads(lines[0])
    unknown = json.loads(lines[1]) | {"generated_tokens": [None, 30]}
    for old_first, why in [(True, "1 of 4 generation batches"), (False, "lack the token count of some completions")]:
        head = {k: v for k, v in first.items() if not k.endswith("_tokens")} if old_first else first
        rows = [head, unknown if not old_first else json.loads(lines[1]), *map(json.loads, lines[2:])]
        (mixed / ALLOCATION_LOG_FILE).write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
        report = write_report([load_run(mixed)], tmp_path / f"out-{old_first}")
        assert "tokens.png" not in report["figures"] and why in " ".join(report["runs"][0]["missing"])


def _summary_notes(out: Path) -> str:
    (s,) = json.loads((out / "report.json").read_text())["runs"]
    return " ".join(s["missing"])


def test_unreadable_allocation_lines_are_counted_and_named(tmp_path, capsys):
    """Bad lines in the middle of allocations.jsonl (garbage, a missing key, a wrong type, non-UTF-8 bytes, successes
    above attempts) are left out, counted and named by line number; the valid records are read as before."""
    run_dir, out = _write_json_run(tmp_path / "run"), tmp_path / "out"
    path = run_dir / ALLOCATION_LOG_FILE
    good = path.read_bytes().splitlines(keepends=True)
    record = json.loads(good[0])
    bad = [
        b"garbage\n",
        json.dumps({k: v for k, v in record.items() if k != "counts"}).encode() + b"\n",
        json.dumps({**record, "step": "two"}).encode() + b"\n",
        b'{"step": 0, "epoch": 0, "prompt_ids": [0], "counts": [4], "\xff\xfe": 1}\n',
        json.dumps({**record, "step": 7, "successes": [5, 0]}).encode() + b"\n",
    ]
    path.write_bytes(b"".join(good[:2] + bad + good[2:]))  # bad lines are lines 3 to 7
    assert cli_main(["report", str(run_dir), "-o", str(out)]) == 0
    err = capsys.readouterr().err
    for text in (err, _summary_notes(out)):
        assert "5 of 9 lines" in text and "lines 3, 4, 5, 6, 7" in text, text
        assert "'counts'" in text and "step" in text and "UTF-8" in text and "successes" in text, text
    (s,) = json.loads((out / "report.json").read_text())["runs"]
    assert s["generation_batches"] == 4 and s["epochs"] == 2 and s["converted_from_p0"] == 1


@pytest.mark.parametrize("content", [b"garbage\nmore garbage\n", b"\xff\xfe\x00\n", b'{"step": 0}\n[1, 2]\n'])
def test_an_allocation_log_of_garbage_is_not_empty(tmp_path, capsys, content):
    """Nothing usable in allocations.jsonl is an error that says so (exit 1), not an empty log with exit 0."""
    run_dir = _write_json_run(tmp_path / "run")
    (run_dir / ALLOCATION_LOG_FILE).write_bytes(content)
    assert cli_main(["report", str(run_dir), "-o", str(tmp_path / "out")]) == 1
    err = capsys.readouterr().err
    assert "allocations.jsonl" in err and "could not be read" in err and "empty" not in err, err
    assert "Traceback" not in err


@pytest.mark.parametrize(
    "damage, expected",
    [
        (lambda state: b"{not json", "truncated or corrupt"),
        (lambda state: b"\xff\xfe garbage", "truncated or corrupt"),
        (lambda state: json.dumps({**state, "epoch": "one"}).encode(), "epoch"),
        (
            lambda state: json.dumps({**state, "columns": {**state["columns"], "total_successes": [9, 0]}}).encode(),
            "total_successes exceeds total_attempts",
        ),
    ],
)
def test_damaged_statistics_are_reported_as_damaged_not_missing(tmp_path, capsys, damage, expected):
    """prompt_statistics.json is read through PromptStatistics' own checks: a damaged file is named with why."""
    run_dir, out = _write_json_run(tmp_path / "run"), tmp_path / "out"
    stats = PromptStatistics()
    stats.update([0, 0, 1], [1.0, 0.0, 0.0])
    (run_dir / "prompt_statistics.json").write_bytes(damage(stats.state_dict()))
    assert cli_main(["report", str(run_dir), "-o", str(out)]) == 0
    err = capsys.readouterr().err
    notes = _summary_notes(out)
    for text in (err, notes):
        assert "prompt_statistics.json could not be read" in text and expected in text, text
        assert "No prompt_statistics.json" not in text
    (s,) = json.loads((out / "report.json").read_text())["runs"]
    assert "never_solved" not in s  # nothing taken from a file loading refuses


@pytest.mark.parametrize(
    "content",
    [
        b"\xff\xfe garbage",
        b"[1, 2]",
        json.dumps({"global_step": "4", "log_history": []}).encode(),
        json.dumps({"global_step": 4, "log_history": [{"allocation/effective_gradient_ratio": 0.5}]}).encode(),
        json.dumps(
            {"global_step": 4, "log_history": [{"step": 1, "allocation/effective_gradient_ratio": "x"}]}
        ).encode(),
    ],
)
def test_a_damaged_trainer_state_is_named_without_a_traceback(tmp_path, capsys, content):
    run_dir, out = _write_json_run(tmp_path / "run"), tmp_path / "out"
    (run_dir / TRAINER_STATE_FILE).write_bytes(content)
    assert cli_main(["report", str(run_dir), "-o", str(out)]) == 0  # allocations.jsonl still gives the ratios
    err = capsys.readouterr().err
    assert "trainer_state.json could not be read" in err, err
    (s,) = json.loads((out / "report.json").read_text())["runs"]
    assert s["ratio_source"] == "allocations.jsonl" and s["steps"] == 4


def test_checkpoint_prefix_is_transformers():
    from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

    assert CHECKPOINT_PREFIX == PREFIX_CHECKPOINT_DIR


def _train(model_dir: Path, output_dir: Path, allocator: str) -> Path:
    # 8 prompts, 2 per generation batch of 8 completions: 4 steps per epoch, 2 epochs, a checkpoint every 2 steps.
    config = {"max_steps": -1, "num_train_epochs": 2, "save_strategy": "steps", "save_steps": 2}
    trainer = build_trainer(model_dir, output_dir, allocator=allocator, max_rollouts=6, **config)
    trainer.train()
    trainer.save_state()
    return output_dir


@pytest.fixture(scope="module")
def runs(tiny_model_dir, tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("report-runs")
    return {name: _train(tiny_model_dir, root / name, name) for name in ("knapsack", "uniform")}


def _copy(run: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(run, tmp_path / run.name))


def _assert_png(path: Path) -> None:
    import matplotlib.image

    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", path
    assert 5_000 < path.stat().st_size < 300_000, (path, path.stat().st_size)  # drawn, and small enough to commit
    height, width = matplotlib.image.imread(path).shape[:2]
    assert 200 < height < 1200 and 300 < width < 2000, (path, width, height)


def test_staleness_counts_generation_batches_since_each_prompts_previous_completions():
    records = [
        {"prompt_ids": [0, 1], "counts": [2, 2], "generated": [4, 2]},
        {"prompt_ids": [2, 3], "counts": [4, 0], "generated": [4, 2]},  # 3 generated for, none trained: a visit
        {"prompt_ids": [0, 3], "counts": [2, 2], "generated": [2, 0]},  # 3 given nothing: not a visit
        {"prompt_ids": [3, 1], "counts": [2, 2], "generated": [2, 2]},
    ]
    assert visit_staleness(records) == {
        "first_visits": 4,
        "revisits": 3,  # 0 after 2 batches, 3 after 2, 1 after 3
        "batches_since_last_visit_mean": 7 / 3,
        "batches_since_last_visit_max": 3,
    }
    assert visit_staleness(records[:1])["batches_since_last_visit_mean"] is None


def test_status_tables_bucket_at_the_boundaries():
    """Every table of the report puts a rate in the bucket of ``allocation.status``: 0, (0, 0.2], (0.2, 0.8), ..."""
    boundaries = [None, 0.0, 0.2, 0.2 + 1e-9, 0.8 - 1e-9, 0.8, 1.0]  # null: no rate yet
    record = {"step": 0, "epoch": 0, "prompt_ids": list(range(7)), "counts": [2, 3, 4, 5, 6, 7, 8],
              "success_rates": boundaries}  # fmt: skip
    assert counts_by_status([record])[0] == {
        "unseen": (2.0, 1), "p0": (3.0, 1), "p0_0.2": (4.0, 1), "p0.2_0.8": (5.5, 2), "p0.8_1": (7.0, 1),
        "p1": (8.0, 1),
    }  # fmt: skip
    # Rates reached in an epoch: prompt i solves successes[i] of 5 in epoch 0, then all or none in epoch 1.
    epochs = [
        {"epoch": 0, "prompt_ids": [0, 1, 2, 3, 4], "successes": [0, 1, 2, 4, 5], "attempts": [5] * 5},
        {"epoch": 1, "prompt_ids": [0, 1, 2, 3, 4], "successes": [5, 5, 0, 0, 5], "attempts": [5] * 5},
    ]
    assert status_per_epoch(epochs)[0] == {"p0": 1, "p0_0.2": 1, "p0.2_0.8": 1, "p0.8_1": 1, "p1": 1}
    matrix, first, last = transition_matrix(epochs)
    assert (first, last) == (0, 1) and matrix.tolist() == [
        [0, 0, 0, 0, 1],  # p = 0 -> p = 1
        [0, 0, 0, 0, 1],
        [1, 0, 0, 0, 0],
        [1, 0, 0, 0, 0],
        [0, 0, 0, 0, 1],
    ]


@pytest.mark.trainer
def test_complete_run_renders_every_figure(runs, tmp_path):
    run = load_run(runs["knapsack"])
    assert run.notes == [], run.notes
    assert run.allocator == "knapsack" and run.log_source == "trainer_state.json"
    report = write_report([run], tmp_path)
    assert set(report["figures"]) == FIGURES
    for name in FIGURES:
        _assert_png(tmp_path / name)
    summary = (tmp_path / "summary.md").read_text()
    assert all(f"({name})" in summary for name in FIGURES)
    (s,) = json.loads((tmp_path / "report.json").read_text())["runs"]
    assert s["epochs"] == 2 and s["generation_batches"] == 8 and s["completions_per_batch"] == 8
    assert s["transition"]["first_epoch"] == 1 and s["transition"]["last_epoch"] == 2
    assert sum(map(sum, s["transition"]["counts"])) == 8  # every prompt, seen in both epochs
    assert sum(s["status_per_epoch"]["1"].values()) == 8
    assert set(s["counts_by_status"]["1"]) == {"unseen"}  # epoch 1: no rates yet, everyone gets the mean
    logged = {key: [h[key] for h in run.log_history if key in h] for key in ("tokens/generated", "tokens/trained")}
    assert len(logged["tokens/generated"]) == 8 and s["generated_tokens"] == sum(logged["tokens/generated"])
    assert s["trained_tokens_per_batch"] == pytest.approx(np.mean(logged["tokens/trained"]))
    assert s["expected_tokens_draws"] == 6 + 8  # every draw after the first batch (the population estimate, then own)


@pytest.mark.trainer
def test_ratio_from_allocations_matches_logged_metric(runs):
    """For 0/1 rewards the ratios rebuilt from allocations.jsonl equal the trainer's logged metric, step by step."""
    run = load_run(runs["knapsack"])
    derived = ratio_from_allocations(run.records)
    logged = [h for h in run.log_history if "allocation/effective_gradient_ratio" in h]
    assert derived["step"] == [h["step"] for h in logged]
    pairs = [("effective", "effective_gradient_ratio"), ("all_wrong", "zero_gradient_ratio_all_wrong")]
    pairs.append(("effective_per_generated", "effective_gradient_ratio_per_generated"))
    for name, key in pairs:
        np.testing.assert_allclose(derived[name], [h[f"allocation/{key}"] for h in logged], atol=1e-6)
    np.testing.assert_allclose(
        derived["all_correct"], [h["allocation/zero_gradient_ratio_all_correct"] for h in logged], atol=1e-6
    )


@pytest.mark.trainer
def test_cli_overlays_two_runs(runs, tmp_path, capsys):
    out = tmp_path / "cmp"
    assert cli_main(["report", str(runs["knapsack"]), str(runs["uniform"]), "-o", str(out)]) == 0
    assert "wrote" in capsys.readouterr().out
    report = json.loads((out / "report.json").read_text())
    assert [r["label"] for r in report["runs"]] == ["knapsack", "uniform"]
    assert set(report["figures"]) == FIGURES
    for name in FIGURES:
        _assert_png(out / name)
    uniform = report["runs"][1]
    assert uniform["max_count"] == 4 and set(uniform["counts_by_status"]["2"]) <= set(STATUSES)


@pytest.mark.trainer
def test_interrupted_run_uses_newest_checkpoint(runs, tmp_path):
    """As if killed during step 7: no final files, checkpoint-6 is the newest, a half-written last log line."""
    run_dir = _copy(runs["knapsack"], tmp_path)
    for name in ("trainer_state.json", "prompt_statistics.json"):
        (run_dir / name).unlink()
    shutil.rmtree(run_dir / "checkpoint-8")
    with open(run_dir / "allocations.jsonl", "a") as f:
        f.write('{"step": 8, "epoch": 2, "prompt_ids": [0, 1], "cou')  # a crash mid-write
    run = load_run(run_dir)
    assert run.log_source == "checkpoint-6/trainer_state.json"
    assert run.statistics_source == "checkpoint-6/adaptive_state.json"
    notes = " ".join(run.notes)
    assert "end at step 6, allocations.jsonl at step 8" in notes
    assert "No prompt_statistics.json" in notes and "checkpoint-6/adaptive_state.json" in notes
    report = write_report([run], tmp_path / "report")
    assert set(report["figures"]) == FIGURES
    (s,) = report["runs"]
    assert s["ratio_source"] == "checkpoint-6/trainer_state.json to step 6, then allocations.jsonl"
    assert s["steps"] == 8 and s["generation_batches"] == 8  # the ratio goes on past the last log
    assert "end at step 6" in (tmp_path / "report" / "summary.md").read_text()


@pytest.mark.trainer
def test_missing_allocation_log_is_reported(runs, tmp_path, capsys):
    run_dir = _copy(runs["knapsack"], tmp_path)
    (run_dir / "allocations.jsonl").unlink()
    out = tmp_path / "report"
    assert cli_main(["report", str(run_dir), "-o", str(out)]) == 0
    err = capsys.readouterr().err
    assert "No allocations.jsonl" in err and "log_allocations=False" in err
    assert sorted(p.name for p in out.glob("*.png")) == ["gradient_ratios.png", "reward.png"]
    assert "No allocations.jsonl" in (out / "summary.md").read_text()


@pytest.mark.trainer
def test_missing_trainer_state_falls_back_to_allocation_log(runs, tmp_path):
    run_dir = _copy(runs["uniform"], tmp_path)
    for path in run_dir.rglob("trainer_state.json"):
        path.unlink()
    run = load_run(run_dir)
    assert run.log_history is None
    assert any("No trainer_state.json" in note and "stopped before its first checkpoint" in note for note in run.notes)
    s = summarize(run)
    assert s["ratio_source"] == "allocations.jsonl" and s["steps"] == 8
    assert "gradient_ratios.png" in write_report([run], tmp_path / "report")["figures"]


def test_nothing_to_report(tmp_path, capsys):
    assert cli_main(["report", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert "Nothing to report" in err and "allocations.jsonl" in err and "trainer_state.json" in err
    assert cli_main(["report", str(tmp_path / "absent")]) == 1
    assert "is not a folder" in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.multiprocess
def test_report_from_two_process_run(tiny_model_dir, tmp_path):
    """On 2 ranks only the main process writes allocations.jsonl: one line per global generation batch."""
    reports = launch_two_ranks(TWO_RANK_SCRIPT, tiny_model_dir, tmp_path, "skewed", "3")
    run_dir = next(tmp_path.glob("attempt*/output"))
    records = read_allocation_log(str(run_dir / "allocations.jsonl"))
    lines = (run_dir / "allocations.jsonl").read_text().splitlines()
    assert len(lines) == len(records) == 3  # not one per rank
    logs = [h for h in reports[0]["adaptive"]["log_history"] if "tokens/generated" in h]
    for record, step, log in zip(records, reports[0]["adaptive"]["steps"], logs, strict=True):
        assert record["counts"] == step["counts"] and sum(record["counts"]) == 16  # the global batch, both ranks
        # both ranks' tokens: TRL's mean length is over every rank's completions too
        assert sum(record["generated_tokens"]) == log["tokens/generated"] == log["completions/mean_length"] * 16
    run = load_run(run_dir)
    report = write_report([run], tmp_path / "report")
    assert {"allocation_histogram.png", "gradient_ratios.png", "prompt_status.png"} <= set(report["figures"])
    assert any("No trainer_state.json" in note for note in run.notes)  # save_strategy="no" and no save_state()


def test_never_solved_counts_only_attempted_prompts():
    """The trainer fingerprints every prompt up front; one never tried (even with a prior) is not "never solved"."""
    stats = PromptStatistics()
    stats.set_fingerprints(list(range(10)), [prompt_fingerprint(str(i)) for i in range(10)])
    stats.set_prior([5, 6], [0.9, 0.9], weight=8)
    stats.update([0, 0, 1, 1, 2], [1.0, 1.0, 1.0, 0.0, 0.0])  # prompts 0 and 1 solved, 2 not
    run = RunData(label="r", path=Path("."), statistics=stats.state_dict(), statistics_source="prompt_statistics.json")
    out = summarize(run)
    assert (out["never_solved"], out["prompts_attempted"], out["prompts_in_statistics"]) == (1, 3, 10)

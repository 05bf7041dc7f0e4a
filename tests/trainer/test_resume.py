"""Exact and crash-safe resume: the next allocation after a resume, the resume matrix on 1 and 2 processes,
interrupted saves, bad state files. (A streaming train set's resume: test_dropin_streaming.py.)

A checkpoint is taken at EVERY step of a 3-epoch run, so the matrix covers mid-epoch checkpoints, checkpoints on an
epoch's last step (written before ``on_epoch_end``) and the final one; see ``tests/scripts/resume_matrix.py``.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
import transformers.trainer
from helpers import REPO
from helpers.allocation import RecordingAllocator, holds_state, run_steps
from helpers.launch import launch_two_ranks
from helpers.prompt_sources import LeastPickedPool  # noqa: F401  (registers "test_least_picked")
from helpers.trainer import build_trainer, make_dataset, reward_length, tiny_config_kwargs

from trl_adaptive import AdaptiveGRPOTrainer
from trl_adaptive.report.run_files import ADAPTIVE_STATE_FILE, ALLOCATION_LOG_FILE
from trl_adaptive.sampling.source import SourceContext
from trl_adaptive.stats import PromptStatistics
from trl_adaptive.strategies import (
    build_procedure,
    build_prompt_source,
    get_allocator,
    registered_prompt_sources,
    registered_strategies,
)
from trl_adaptive.trainer.output_files import newest_complete_checkpoint

pytestmark = pytest.mark.trainer  # every test here builds a trainer (make test-fast skips them)

SCRIPTS = REPO / "tests" / "scripts"


def test_resume_restores_statistics_and_next_allocation(tiny_model_dir, tmp_path):
    """Train 2 epochs saving at step 5; a run resumed from checkpoint-5 allocates exactly as the uninterrupted one."""

    def run(output_dir, resume=None):
        allocator = RecordingAllocator(get_allocator("knapsack", max_rollouts=6))
        trainer = build_trainer(
            tiny_model_dir,
            output_dir,
            allocator_object=allocator,
            max_steps=8,
            save_strategy="steps",
            save_steps=5,
            allocator="knapsack",
            max_rollouts=6,
        )
        trainer.train(resume_from_checkpoint=resume)
        return allocator.history, trainer

    full_history, full = run(tmp_path / "full")
    checkpoint = tmp_path / "full" / "checkpoint-5"
    state = json.loads((checkpoint / "adaptive_state.json").read_text())
    assert state["allocator"]["name"] == "knapsack" and state["statistics"]
    resumed_history, resumed = run(tmp_path / "full", resume=str(checkpoint))

    assert resumed_history == full_history[5:]
    # Epoch 2 allocates from epoch 1's rates: at least one step is not uniform, else this test would be vacuous.
    assert any(len(set(counts)) > 1 for _, counts in full_history[4:])
    assert resumed.prompt_statistics.state_dict() == full.prompt_statistics.state_dict()
    np.testing.assert_array_equal(resumed.train_dataset["success_rate"], full.train_dataset["success_rate"])
    # the staleness metrics go on from the checkpoint's clock (a fresh clock would log no revisit at step 6)
    staleness = [
        {k: v for k, v in log.items() if k.startswith("prompts/")} for log in full.state.log_history if "step" in log
    ]
    assert staleness[0] == {"prompts/revisited": 0.0} and any(
        "prompts/batches_since_last_visit_max" in s for s in staleness
    )
    resumed_staleness = [
        {k: v for k, v in log.items() if k.startswith("prompts/")}
        for log in resumed.state.log_history
        if "step" in log and log["step"] > 5
    ]
    assert resumed_staleness == staleness[5:]
    # allocations.jsonl: one line per generation batch of the run that went on (steps 5-7 once, not twice); the
    # uninterrupted run's whole log is archived beside it
    lines = [json.loads(line) for line in (tmp_path / "full" / ALLOCATION_LOG_FILE).read_text().splitlines()]
    archived = (tmp_path / "full" / "allocations.previous-1.jsonl").read_text().splitlines()
    assert [line["step"] for line in lines] == list(range(8)) and len(archived) == 8
    assert [(line["prompt_ids"], line["counts"]) for line in lines] == [(ids, counts) for ids, counts in full_history]


def test_a_fresh_run_in_a_used_output_dir_starts_its_own_allocation_log(tiny_model_dir, tmp_path):
    _trainer(tiny_model_dir, tmp_path, max_steps=3, save_strategy="no").train()
    first = (tmp_path / ALLOCATION_LOG_FILE).read_text()
    with pytest.warns(UserWarning, match=r"already held allocations\.jsonl of an earlier run: moved to .*previous-1"):
        _trainer(tiny_model_dir, tmp_path, max_steps=2, save_strategy="no").train()
    assert (tmp_path / "allocations.previous-1.jsonl").read_text() == first  # nothing lost
    assert [json.loads(line)["step"] for line in (tmp_path / ALLOCATION_LOG_FILE).read_text().splitlines()] == [0, 1]


def _check_matrix(report: dict, mode: str, rank: int = 0) -> None:
    full = report["full"]
    steps = sorted(int(step) for step in report["resumed"])
    assert steps == list(range(1, 7)), steps  # 3 epochs x 2 steps, a checkpoint at each
    assert full["epoch_count"] == 3
    if rank == 0:
        history = full["allocations"]
        assert [step for step, _, _ in history] == list(range(6))
        if mode in ("knapsack", "stream"):
            # Epochs 2 and 3 allocate from measured rates; without a skewed allocation this test checks nothing.
            assert any(len(set(counts)) > 1 for _, _, counts in history[2:]), history
        if mode == "pilot_commit":
            assert any(0 in counts for _, _, counts in history), history  # an evicted prompt gets nothing
        if mode in ("dynamic", "cero", "cero_dynamic"):
            assert any(len(ids) > 2 for _, ids, _ in history), history  # some step drew further prompts
        if mode == "greso_revisit":  # the floor put a prompt GRESO skipped back in, so its counts were exercised
            assert full["revisit_forced"] > 0, history
        if mode == "mopps":  # the selection, not the sampler, makes the batches: some epoch sees a prompt twice
            epochs = [history[i][1] + history[i + 1][1] for i in range(0, len(history), 2)]
            assert any(len(set(ids)) < len(ids) for ids in epochs), history
        if mode == "pilot":
            # Round two skews the counts, and the posterior has forgotten (fractional evidence) before the end.
            assert any(len(set(counts)) > 1 for _, _, counts in history), history
            evidence = full["statistics"]["columns"]["posterior_failures"]
            assert any(0 < x != int(x) for x in evidence), evidence
    for step in steps:
        resumed = report["resumed"][str(step)]
        if rank == 0:
            assert resumed["allocations"] == full["allocations"][step:], f"resumed from checkpoint-{step}"
        assert resumed["statistics"] == full["statistics"], f"statistics after resuming from checkpoint-{step}"
        assert resumed["column"] == full["column"], f"success_rate column after resuming from checkpoint-{step}"
        assert resumed["epoch_count"] == 3


# Every mode of tests/scripts/resume_matrix.py runs on one process; all but cero and pilot_commit also on two (as
# before this list was shared).
TWO_PROCESS_MODES = ["knapsack", "dynamic", "seq", "pilot", "cero_dynamic", "prompt_source", "greso", "greso_revisit",
                     "mopps", "value_pool", "stream"]  # fmt: skip
ONE_PROCESS_MODES = [*TWO_PROCESS_MODES[:4], "cero", "pilot_commit", *TWO_PROCESS_MODES[4:]]


@pytest.mark.slow
@pytest.mark.parametrize("mode", ONE_PROCESS_MODES)
def test_resume_matrix_one_process(tiny_model_dir, tmp_path, mode):

    sys.path.insert(0, str(SCRIPTS))
    from resume_matrix import run_matrix

    report = json.loads(json.dumps(run_matrix(str(tiny_model_dir), tmp_path, mode)))  # as the 2-rank reports
    _check_matrix(report, mode)


def test_every_strategy_that_holds_state_between_steps_has_a_resume_mode():
    """The matrix is written by hand; a registered strategy whose procedure keeps state from step to step (beside
    the statistics store) fails here until it has a mode there."""
    sys.path.insert(0, str(SCRIPTS))
    from resume_matrix import MODES

    stateful = []
    for name in registered_strategies():
        procedure = build_procedure(name)
        run_steps(procedure, PromptStatistics(), range(3))
        if holds_state(procedure.state_dict()):
            stateful.append(name)
    assert {"cero", "pilot_commit"} <= set(stateful)  # the check sees state where there is some
    missing = set(stateful) - {mode["allocator"] for mode in MODES.values()}
    assert not missing, f"add a mode for {sorted(missing)} to tests/scripts/resume_matrix.py and the tests above"


def test_every_prompt_source_that_holds_state_between_steps_has_a_resume_mode():
    """As above for the prompt sources: one that keeps state from step to step fails here until it has a mode."""
    sys.path.insert(0, str(SCRIPTS))
    from resume_matrix import MODES

    stateful = [name for name in registered_prompt_sources() if _source_holds_state(build_prompt_source(name))]
    assert "test_least_picked" in stateful  # the check sees state where there is some
    missing = set(stateful) - {mode.get("prompt_source") for mode in MODES.values()}
    assert not missing, f"add a mode for {sorted(missing)} to tests/scripts/resume_matrix.py and the tests above"


def _source_holds_state(source) -> bool:
    """Three steps of 4 prompts out of 16, every completion solved at half the prompts: any state left?"""
    store, rng = PromptStatistics(), np.random.default_rng(0)
    for step in range(3):
        offered = np.arange(4 * step, 4 * step + 4)

        def draw(exclude, number):
            rest = np.setdiff1d(np.arange(16), exclude)
            return np.sort(rng.choice(rest, size=min(number, len(rest)), replace=False))

        ids = source.compose(SourceContext(offered, store.batch, draw, rng, step, group_size=4)).prompt_ids
        group_ids = np.repeat(np.arange(len(ids)), 4)
        rewards = (ids[group_ids] % 2).astype(np.float64)
        source.end_step(ids, group_ids, rewards, 1.0)
        store.update(ids[group_ids], rewards)
    return _holds_values(source.own_state())


def _holds_values(value) -> bool:
    """Whether a JSON value holds anything but empty containers (``{"picked": {}}`` holds nothing)."""
    if isinstance(value, dict | list):
        return any(_holds_values(v) for v in (value.values() if isinstance(value, dict) else value))
    return True


@pytest.mark.slow
@pytest.mark.multiprocess
@pytest.mark.parametrize("mode", TWO_PROCESS_MODES)
def test_resume_matrix_two_processes(tiny_model_dir, tmp_path, mode):
    reports = launch_two_ranks(SCRIPTS / "resume_matrix.py", tiny_model_dir, tmp_path, mode)
    for rank, report in enumerate(reports):
        _check_matrix(report, mode, rank)
    assert reports[0]["full"]["statistics"] == reports[1]["full"]["statistics"]


# ---------------------------------------------------------------------------------------------------------------------
# Crash safety: a save interrupted at every point between its writes
# ---------------------------------------------------------------------------------------------------------------------
class Killed(BaseException):
    """Stands for a SIGKILL at one instant of a save: nothing after it runs (BaseException: no handler catches it)."""


def _trainer(model_dir, output_dir, **overrides) -> AdaptiveGRPOTrainer:
    """Knapsack on 4 prompts, a checkpoint at every step."""
    config = {"max_steps": 4, "save_strategy": "steps", "save_steps": 1, **overrides}
    return build_trainer(model_dir, output_dir, make_dataset(4), allocator="knapsack", max_rollouts=6, **config)


def _kill_at(monkeypatch, point: str, at_step: int) -> None:
    """Raise Killed at ``point`` of the save of checkpoint ``at_step``."""

    def wrap(owner, name, before=True):
        original = getattr(owner, name)

        def wrapper(*args, **kwargs):
            trainer = args[0] if args and isinstance(args[0], AdaptiveGRPOTrainer) else None
            step = trainer.state.global_step if trainer is not None else _kill_at.trainer.state.global_step
            if step == at_step and before:
                raise Killed(point)
            result = original(*args, **kwargs)
            if step == at_step and not before:
                raise Killed(point)
            return result

        monkeypatch.setattr(owner, name, wrapper)

    if point == "before_model":
        wrap(AdaptiveGRPOTrainer, "save_model")
    elif point == "before_optimizer":
        wrap(AdaptiveGRPOTrainer, "_save_optimizer_and_scheduler")
    elif point == "before_rng":
        wrap(AdaptiveGRPOTrainer, "_save_rng_state")
    elif point == "before_trainer_state":
        wrap(transformers.trainer.TrainerState, "save_to_json")
    elif point == "before_rotation":
        wrap(transformers.trainer, "rotate_checkpoints")
    elif point == "after_rotation":
        wrap(transformers.trainer, "rotate_checkpoints", before=False)
    else:
        raise ValueError(point)


@pytest.mark.parametrize(
    "point",
    ["before_model", "before_optimizer", "before_rng", "before_trainer_state", "before_rotation", "after_rotation"],
)
def test_a_save_killed_at_any_point_loses_nothing(tiny_model_dir, tmp_path, monkeypatch, point):
    """save_total_limit=1 keeps one checkpoint; a kill during the save of checkpoint-3 must leave a complete one."""
    reference = _trainer(tiny_model_dir, tmp_path / "reference", save_total_limit=1)
    reference.train()

    run_dir = tmp_path / "killed"
    killed = _trainer(tiny_model_dir, run_dir, save_total_limit=1)
    _kill_at.trainer = killed
    _kill_at(monkeypatch, point, at_step=3)
    with pytest.raises(Killed):
        killed.train()
    monkeypatch.undo()
    # The final statistics file is written even though training was interrupted.
    assert (run_dir / "prompt_statistics.json").exists()

    newest = newest_complete_checkpoint(str(run_dir))
    expected = "checkpoint-3" if point in ("before_rotation", "after_rotation") else "checkpoint-2"
    assert newest is not None and Path(newest).name == expected

    resumed = _trainer(tiny_model_dir, run_dir, save_total_limit=1)
    if expected == "checkpoint-2":
        with pytest.warns(UserWarning, match="incomplete checkpoint"):
            resumed.train(resume_from_checkpoint=True)
    else:
        resumed.train(resume_from_checkpoint=True)
    assert resumed.prompt_statistics.state_dict() == reference.prompt_statistics.state_dict()


def test_pushed_checkpoint_already_holds_the_state_file(tiny_model_dir, tmp_path, monkeypatch):
    """hub_strategy="checkpoint" uploads the checkpoint folder: the state file must exist when the upload starts."""
    seen: list[list[str]] = []
    monkeypatch.setattr(AdaptiveGRPOTrainer, "init_hf_repo", lambda self, token=None: None)  # no Hub here
    monkeypatch.setattr(
        AdaptiveGRPOTrainer, "_push_from_checkpoint", lambda self, folder: seen.append(sorted(os.listdir(folder)))
    )
    trainer = _trainer(
        tiny_model_dir, tmp_path, max_steps=2, push_to_hub=True, hub_model_id="me/run", hub_strategy="checkpoint"
    )
    trainer.train()
    assert len(seen) == 2 and all(ADAPTIVE_STATE_FILE in files and "trainer_state.json" in files for files in seen)


@pytest.mark.parametrize(
    "content", ["", '{"format_version": 2, "allocator": {"name": "knaps', '{"format_version": 2}']
)
def test_corrupt_state_file_names_the_file_and_the_fix(tiny_model_dir, tmp_path, content):
    _trainer(tiny_model_dir, tmp_path, max_steps=2).train()
    checkpoint = tmp_path / "checkpoint-2"
    (checkpoint / ADAPTIVE_STATE_FILE).write_text(content)
    with pytest.raises((ValueError, FileNotFoundError), match=r"checkpoint-2.*(earlier checkpoint|Resume from)"):
        _trainer(tiny_model_dir, tmp_path, max_steps=3).train(resume_from_checkpoint=str(checkpoint))


def test_resume_with_other_prompts_under_the_same_ids_is_refused(tiny_model_dir, tmp_path):
    _trainer(tiny_model_dir, tmp_path, max_steps=2).train()
    other = make_dataset(8).select(range(4, 8))  # different texts under ids 0..3
    trainer = build_trainer(tiny_model_dir, tmp_path, other, allocator="knapsack", max_rollouts=6, max_steps=3)
    with pytest.raises(ValueError, match=r"prompt \(text or images\) differs"):
        trainer.train(resume_from_checkpoint=str(tmp_path / "checkpoint-2"))


def test_resume_true_without_a_complete_checkpoint_explains(tiny_model_dir, tmp_path):
    (tmp_path / "checkpoint-7").mkdir()  # an interrupted first save
    with pytest.raises(ValueError, match="no complete checkpoint"):
        _trainer(tiny_model_dir, tmp_path).train(resume_from_checkpoint=True)
    shutil.rmtree(tmp_path / "checkpoint-7")


# ---------------------------------------------------------------------------------------------------------------------
# A resume that fails changes nothing; resume_from_checkpoint=True skips states that do not load
# ---------------------------------------------------------------------------------------------------------------------
def _files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _break_statistics(checkpoint: Path) -> None:
    """A state file that parses but holds a column one entry short (it cannot be loaded)."""
    state = json.loads((checkpoint / ADAPTIVE_STATE_FILE).read_text())
    state["statistics"]["columns"]["total_attempts"].pop()
    (checkpoint / ADAPTIVE_STATE_FILE).write_text(json.dumps(state))


@pytest.mark.parametrize("fault", ["mistyped_path", "other_success_threshold", "damaged_state", "invalid_state"])
def test_a_failed_resume_changes_no_file_of_the_run(tiny_model_dir, tmp_path, fault):
    """A resume that fails before its first step leaves prompt_statistics.json (and every other file) as it was."""
    _trainer(tiny_model_dir, tmp_path, max_steps=2).train()
    checkpoint, overrides = tmp_path / "checkpoint-2", {}
    if fault == "mistyped_path":
        checkpoint = tmp_path / "checkpoint-20"
    elif fault == "other_success_threshold":
        overrides = {"success_threshold": 0.5}
    elif fault == "damaged_state":
        (checkpoint / ADAPTIVE_STATE_FILE).write_text('{"format_version": 2, "allocator": {"name": "knaps')
    else:
        _break_statistics(checkpoint)
    before = _files(tmp_path)
    assert json.loads(before["prompt_statistics.json"])["prompt_ids"]  # the run's statistics, not an empty store
    with pytest.raises((ValueError, FileNotFoundError)):
        _trainer(tiny_model_dir, tmp_path, max_steps=3, **overrides).train(resume_from_checkpoint=str(checkpoint))
    assert _files(tmp_path) == before


def test_resume_true_skips_a_newest_state_that_does_not_load(tiny_model_dir, tmp_path):
    """The newest checkpoint's state parses but cannot be loaded: a warning names it and why, and the run resumes
    from the previous one, ending as the uninterrupted run did."""
    reference = _trainer(tiny_model_dir, tmp_path / "reference")
    reference.train()
    _trainer(tiny_model_dir, tmp_path / "run").train()
    _break_statistics(tmp_path / "run" / "checkpoint-4")
    resumed = _trainer(tiny_model_dir, tmp_path / "run")
    with pytest.warns(UserWarning, match=r"checkpoint-4 \(.*total_attempts.*resuming from .*checkpoint-3"):
        resumed.train(resume_from_checkpoint=True)
    assert resumed.prompt_statistics.state_dict() == reference.prompt_statistics.state_dict()


def test_resume_true_when_no_checkpoint_loads_names_why_without_a_circular_remedy(tiny_model_dir, tmp_path):
    _trainer(tiny_model_dir, tmp_path, max_steps=2).train()
    before = _files(tmp_path)
    match = r"checkpoint-2, checkpoint-1 \(.*success_threshold=1.0 but this run has success_threshold=0.5"
    with pytest.raises(ValueError, match=match) as error:
        _trainer(tiny_model_dir, tmp_path, max_steps=3, success_threshold=0.5).train(resume_from_checkpoint=True)
    assert "Resume from an earlier checkpoint" not in str(error.value)  # there is none to fall back to
    assert _files(tmp_path) == before


# ---------------------------------------------------------------------------------------------------------------------
# What a new user tried: an explicit damaged path, a plain GRPOTrainer's checkpoint
# ---------------------------------------------------------------------------------------------------------------------
def test_an_explicit_damaged_checkpoint_is_refused_without_claiming_to_resume(tiny_model_dir, tmp_path):
    """No "resuming from ..." warning precedes the refusal; the error names the complete checkpoint beside it."""
    _trainer(tiny_model_dir, tmp_path, max_steps=4).train()
    (tmp_path / "checkpoint-4" / ADAPTIVE_STATE_FILE).write_text('{"format_vers')  # an interrupted save
    (tmp_path / "checkpoint-3" / ADAPTIVE_STATE_FILE).unlink()
    trainer = _trainer(tiny_model_dir, tmp_path, max_steps=5)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        with pytest.raises(FileNotFoundError, match=r"Cannot resume from .*checkpoint-4: it is incomplete") as error:
            trainer.train(resume_from_checkpoint=str(tmp_path / "checkpoint-4"))
    assert "resuming from" not in " ".join(str(w.message) for w in seen).lower()
    assert "Resume from " + str(tmp_path / "checkpoint-2") in str(error.value)


def test_a_grpo_trainer_checkpoint_is_refused_naming_the_fresh_start_that_works(tiny_model_dir, tmp_path):
    """A plain GRPOTrainer's checkpoint has no adaptive state: both ways of resuming say to start fresh from its
    weights with model=<checkpoint>, and that works."""
    from trl import GRPOConfig, GRPOTrainer

    config = tiny_config_kwargs(str(tmp_path / "grpo"), max_steps=1, save_strategy="steps", save_steps=1)
    GRPOTrainer(str(tiny_model_dir), reward_length, GRPOConfig(**config), train_dataset=make_dataset(4)).train()
    checkpoint = tmp_path / "grpo" / "checkpoint-1"
    fix = f"AdaptiveGRPOTrainer(model='{checkpoint}', ...) without resume_from_checkpoint"
    trainer = _trainer(tiny_model_dir, tmp_path / "grpo", max_steps=2)
    with pytest.raises(ValueError, match="was written by GRPOTrainer") as error:
        trainer.train(resume_from_checkpoint=str(checkpoint))
    assert fix in str(error.value)
    with pytest.raises(ValueError, match="were written by GRPOTrainer") as error:
        trainer.train(resume_from_checkpoint=True)
    assert fix in str(error.value)
    fresh = _trainer(str(checkpoint), tmp_path / "fresh", max_steps=1)
    fresh.train()
    assert fresh.state.global_step == 1


def test_train_called_twice_closes_the_second_runs_epochs(tiny_model_dir, tmp_path):
    """A second train() on the same trainer (a notebook's) continues from its statistics, and its epochs close:
    the success-rate column and the rates the knapsack reads are the second run's last epoch's."""
    trainer = _trainer(tiny_model_dir, tmp_path, max_steps=-1, num_train_epochs=1, save_strategy="no")
    trainer.train()
    store, ids = trainer.prompt_statistics, np.arange(4)
    first = store.batch(ids)
    assert store.epoch == 1
    trainer.train()
    second = store.batch(ids)
    assert store.epoch == 2 and trainer.adaptive_state.epochs_closed == 1
    np.testing.assert_array_equal(second.attempts, 2 * first.attempts)  # every prompt, each run, the same count
    column = np.array(trainer.train_dataset["success_rate"])
    np.testing.assert_allclose(column, store.success_rates(ids))
    saved = PromptStatistics.load(tmp_path / "prompt_statistics.json", **store.config)
    assert saved.state_dict() == store.state_dict() and saved.epoch == 2

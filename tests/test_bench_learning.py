"""The accuracy-per-token benchmark (bench/bench_learning.py, bench/learning/): its task, exact evaluation, model
cache and statistics, its GPU arguments, and ``make bench-learning QUICK=1`` end to end (it fails unless uniform
learns, so this test can fail)."""

from __future__ import annotations

import dataclasses
import json
import sys

import numpy as np
import pytest
from helpers import REPO
from helpers.launch import run_command

sys.path.insert(0, str(REPO / "bench"))

import bench_learning  # noqa: E402
from learning import analysis, oracle, runs, skills, task  # noqa: E402
from learning.model import Pretraining, build_tokenizer, pretrain, pretrained_model  # noqa: E402

# A hang guard, not a deadline: pretraining (~220 s alone) and two runs take 5-15 min on 2 shared cores.
HANG_GUARD_S = 2 * 60 * 60


def test_reward_is_exactly_the_reversal():
    assert task.reward_reversal(["cba", "abc", "cbaabc", "cba "], ["cba"] * 4) == [1.0, 0.0, 0.0, 0.0]


def test_prompts_are_seeded_and_span_every_length():
    rows = task.Prompts.draw(400, seed=3).rows
    assert rows == task.Prompts.draw(400, seed=3).rows != task.Prompts.draw(400, seed=4).rows
    assert {r["letters"] for r in rows} == set(range(task.MIN_LETTERS, task.MAX_LETTERS + 1))
    assert all(r["prompt"] == r["answer"][::-1] + "=" and len(r["answer"]) == r["letters"] for r in rows)


def test_pretraining_corpus_follows_its_shares_and_wrong_answers():
    ids, mask = task.pretraining_batch(np.random.default_rng(0), 20_000)
    correct = {k: [] for k in task.CORRECT_SHARE}
    for row, learn in zip(ids, mask, strict=True):
        k = int(np.flatnonzero(row == task.EQUALS)[0])
        prompt, completion = row[:k], row[learn == 1]
        assert completion[-1] == task.EOS and (row[: k + 1 + len(completion)] != task.PAD).all()
        answer = completion[:-1]
        wrong = prompt if k <= task.WRONG_COPY_MAX else np.concatenate([prompt[::-1], prompt])
        right = np.array_equal(answer, prompt[::-1])
        assert right or np.array_equal(answer, wrong)
        correct[k].append(right)
    for k, share in task.CORRECT_SHARE.items():
        if k > 1:  # one letter reversed is the letter copied: k = 1 cannot tell right from wrong
            assert abs(np.mean(correct[k]) - share) < 4 * np.sqrt(share * (1 - share) / len(correct[k])) + 1e-3


def test_skills_answers():
    assert [skills.answer(op, "cabdj") for op in "RSNP"] == ["jdbac", "abcdj", "dbcea", "acdbj"]
    assert skills.answer("P", "cabd") == "acdb" and skills.answer("N", "j") == "a"


def test_skills_prompts_are_seeded_and_never_answered_by_a_copy():
    rows = skills.Prompts.draw(600, seed=5).rows
    assert rows == skills.Prompts.draw(600, seed=5).rows != skills.Prompts.draw(600, seed=6).rows
    assert {r["skill"] for r in rows} == set(skills.OPERATIONS.values())
    assert {r["letters"] for r in rows} == set(range(skills.MIN_LETTERS, skills.MAX_LETTERS + 1))
    for r in rows:
        text = r["prompt"][1:-1]
        assert r["answer"] != text and len(r["answer"]) == len(text) == r["letters"] and text[0] == r["first"]
        assert r["answer"] == skills.answer(r["prompt"][0], text)


def test_skills_corpus_follows_its_shares_and_answers_as_long_as_the_prompt():
    """Right or wrong (the copy), every answer has the prompt's length: lengths say nothing about difficulty."""
    inverse = {i: c for c, i in skills.VOCAB.items()}
    ids, mask = skills.pretraining_batch(np.random.default_rng(0), 20_000)
    right: dict[tuple, list] = {}
    for row, learn in zip(ids, mask, strict=True):
        text = "".join(inverse[int(i)] for i in row[1 : int(np.flatnonzero(row == skills.EQUALS)[0])])
        completion = "".join(inverse[int(i)] for i in row[learn == 1])
        assert completion.endswith("<eos>") and len(completion) - len("<eos>") == len(text)
        operation, answer = inverse[int(row[0])], completion[: -len("<eos>")]
        assert answer in (text, skills.answer(operation, text))
        right.setdefault((operation, text[0]), []).append(answer != text)
    for (operation, first), seen in right.items():
        share = skills.correct_share(operation, first)
        assert abs(np.mean(seen) - share) < 4.5 * np.sqrt(share * (1 - share) / len(seen)) + 2e-3
    assert skills.correct_share("N", "a") > 0.97 and skills.correct_share("P", "j") < 0.01


def test_heldout_groups_are_the_tasks_and_the_initial_difficulty_bins():
    rows = [{"skill": "sort"}, {"skill": "sort"}, {"skill": "shift"}]
    groups = runs.group_labels(rows, np.array([0.1, 0.5, 0.95]), skills)
    assert {k: v.tolist() for k, v in groups.items()} == {
        "0.2<=p0<0.8": [1], "p0<0.2": [0], "p0>=0.8": [2], "skill=shift": [2], "skill=sort": [0, 1],
    }  # fmt: skip
    assert list(runs.group_labels([{"letters": 3}], np.array([1.0]), task)) == ["letters=3", "p0>=0.8"]


def test_group_summary_shows_a_regression_paired_by_seed():
    settings = bench_learning.RunSettings(token_budget=1000, checkpoints=4)
    records = []
    for s in range(3):
        for method, solved_end in (("uniform", 0.95), ("drifts", 0.85)):
            record = _record(method, s, 0.6 + 0.1 * s)
            record["group_curves"] = {"p0>=0.8": [0.9, solved_end], "p0<0.2": [0.1, 0.2 + 0.01 * s]}
            record["group_sizes"] = {"p0>=0.8": 10, "p0<0.2": 20}
            records.append(record)
    summary = analysis.summarize(records, settings)
    solved = summary["groups"]["p0>=0.8"]["drifts"]
    assert solved["paired_vs_uniform"]["mean"] == pytest.approx(-0.1) and solved["change"]["mean"] == pytest.approx(
        -0.05
    )
    assert solved["rows"] == 10 and summary["groups"]["p0<0.2"]["drifts"]["paired_vs_uniform"][
        "mean"
    ] == pytest.approx(0)
    assert "| drifts (paired vs uniform) | -0.050" not in summary["table"] and "-0.100 ± 0.000" in summary["table"]


def test_regimes_set_the_task_and_its_pool():
    parse = bench_learning.build_parser().parse_args
    assert bench_learning.settings_from(parse(["--task", "skills"])).task == "skills"
    large = bench_learning.settings_from(parse(["--task", "large_pool"]))
    assert large.task == "reversal" and large.train_prompts == 4 * bench_learning.RunSettings().train_prompts


def test_tokenizer_is_one_token_per_character_and_round_trips():
    tokenizer = build_tokenizer()
    ids = tokenizer("cab=")["input_ids"]
    assert ids == [task.VOCAB[c] for c in "cab="]
    assert tokenizer.decode(ids[:3] + [task.EOS, task.PAD], skip_special_tokens=True) == "cab"


@pytest.fixture(scope="module")
def briefly_pretrained():
    return pretrain(Pretraining(hidden_size=32, layers=2, heads=2, steps=60, batch_size=64), log_every=0)


@pytest.mark.slow  # pretrains a small model first: 25-45 s on 2 cores, half of what make test-fast may take
def test_expected_accuracy_is_what_sampling_measures(briefly_pretrained):
    """The exact expected reward equals the sampled one (within 4.5 standard errors per prompt)."""
    import torch

    model, tokenizer = briefly_pretrained, build_tokenizer()
    rows = task.Prompts.draw(6, seed=11).rows
    exact = task.expected_accuracy(model, tokenizer, rows)
    assert ((exact > 0) & (exact < 1)).all(), exact
    samples = 600
    torch.manual_seed(0)
    batch = tokenizer([r["prompt"] for r in rows] * samples, return_tensors="pt", padding=True)
    with torch.no_grad():
        out = model.generate(
            **batch, do_sample=True, temperature=1.0, top_k=0, top_p=1.0, max_new_tokens=task.MAX_COMPLETION_TOKENS
        )
    texts = tokenizer.batch_decode(out[:, batch["input_ids"].shape[1] :], skip_special_tokens=True)
    sampled = np.reshape(task.reward_reversal(texts, [r["answer"] for r in rows] * samples), (samples, -1)).mean(0)
    error = np.sqrt(np.maximum(exact * (1 - exact), 1e-3) / samples)
    assert (np.abs(sampled - exact) < 4.5 * error).all(), (exact, sampled)


def test_pretrained_model_is_cached_by_its_settings(tmp_path):
    spec = Pretraining(hidden_size=16, layers=1, heads=1, steps=2, batch_size=8)
    path = pretrained_model(spec, cache_dir=tmp_path)
    assert (path / "config.json").is_file() and (path / "pretraining.json").is_file()
    assert pretrained_model(spec, cache_dir=tmp_path) == path and len(list(tmp_path.iterdir())) == 1
    assert Pretraining(hidden_size=16, layers=1, heads=1, steps=3, batch_size=8).key() != spec.key()
    from transformers import AutoModelForCausalLM, AutoTokenizer

    assert AutoTokenizer.from_pretrained(path)("ab=")["input_ids"] == [3, 4, 2]
    assert AutoModelForCausalLM.from_pretrained(path).config.vocab_size == len(task.VOCAB)


def test_tokens_to_reach_and_intervals():
    curve = [[0, 0.5, 0], [1000, 0.6, 1], [2000, 0.8, 2]]
    assert analysis.tokens_to_reach(curve, 0.7) == pytest.approx(1500)
    assert analysis.tokens_to_reach(curve, 0.4) == 0.0 and analysis.tokens_to_reach(curve, 0.81) is None
    stat = analysis.interval([1.0, 2.0, 3.0])
    assert stat["mean"] == 2.0 and stat["half_width"] == pytest.approx(4.303 * 1.0 / np.sqrt(3))
    assert analysis.interval([None, float("nan")])["n"] == 0


def _record(method, seed, final, tokens=1000):
    return {
        "method": method, "seed": seed, "curve": [[0, 0.5, 0], [tokens, final, 10]], "steps": 10,
        "generated_completions": 200,
        "generated_tokens": 1000, "trained_completions": 100, "effective_gradient_ratio": 0.5,
        "train_seconds": 1.0,
    }  # fmt: skip


def test_summary_pairs_each_method_with_uniform_by_seed():
    settings = bench_learning.RunSettings(token_budget=1000, checkpoints=4)
    records = [_record("uniform", s, 0.6 + 0.1 * s) for s in range(3)]
    records += [_record("better", s, 0.65 + 0.1 * s, tokens=1000) for s in range(3)]
    records += [_record("worse", s, 0.55 + 0.1 * s, tokens=1000) for s in range(3)]
    summary = analysis.summarize(records, settings)
    better = summary["methods"]["better"]
    assert better["paired_difference_at"]["1.0"]["mean"] == pytest.approx(0.05)
    assert better["paired_difference_at"]["1.0"]["half_width"] == pytest.approx(0.0, abs=1e-12)  # same gap each seed
    assert better["accuracy_at"]["1.0"]["half_width"] > 0.1  # unpaired, the seeds' spread shows
    # uniform's final accuracy 0.6 + 0.1 s is reached at (0.1 + 0.1 s) / (0.15 + 0.1 s) of the budget
    assert better["tokens_to_uniform_final_ratio"]["1"]["mean"] == pytest.approx(
        np.mean([0.1 / 0.15, 0.2 / 0.25, 0.3 / 0.35])
    )
    assert better["tokens_to_uniform_final_ratio"]["0.667"]["mean"] == pytest.approx(
        better["tokens_to_uniform_final_ratio"]["1"]["mean"]  # straight curves: the same ratio at 2/3
    )
    # a slower method: uniform's accuracy at 2/3 of the budget is reached at 4/3 (seed 0: past the budget, not
    # observed), 1.333 and 1.2 times uniform's tokens; uniform's final accuracy never
    worse = summary["methods"]["worse"]["tokens_to_uniform_final_ratio"]
    assert worse["0.667"]["seeds_reaching"] == 2 and worse["0.667"]["mean"] == pytest.approx((0.2 / 0.15 + 1.2) / 2)
    assert worse["1"]["seeds_reaching"] == 0 and worse["1"]["mean"] is None
    assert better["paired_difference_at_equal_steps"]["mean"] == pytest.approx(0.05)  # both end at step 10
    assert better["tokens_per_completion"]["mean"] == 5.0
    assert better["generated_per_trained"]["mean"] == 2.0 and summary["table"].count("| worse |") == 2


def test_gpu_arguments_scale_the_batch_and_budget():
    """The lent-GPU command parses here (a renamed flag fails CI, not a scarce lease)."""
    args = bench_learning.build_parser().parse_args(["--gpu", "--seeds", "3", "--methods", "knapsack", "cero"])
    settings, cpu = bench_learning.settings_from(args), bench_learning.RunSettings()
    assert settings.device == "cuda" and args.seeds == 3 and args.methods == ["knapsack", "cero"]
    assert settings.prompts_per_step == 4 * cpu.prompts_per_step and settings.token_budget == 4 * cpu.token_budget
    assert bench_learning.settings_from(bench_learning.build_parser().parse_args([])) == cpu
    with pytest.raises(SystemExit):
        bench_learning.build_parser().parse_args(["--methods", "not_a_method"])


@pytest.mark.benchmark
@pytest.mark.timeout(HANG_GUARD_S + 60)
def test_quick_benchmark_learns_and_writes_its_results(tmp_path):
    """``make bench-learning QUICK=1``: uniform and knapsack, one seed; uniform must rise by 15 points. Not in `make
    test`: `make bench-learning-check` (its own CI step) runs it; the only time limit is a hang guard."""
    out = tmp_path / "quick"
    result = run_command(["make", "-s", "bench-learning", "QUICK=1", f"OUT={out}"], timeout_s=HANG_GUARD_S)
    assert result.returncode == 0, result.stdout[-4000:]
    results = json.loads((out / "results.json").read_text())
    runs = {r["method"]: r for r in results["runs"]}
    assert set(runs) == {"uniform", "knapsack"} and all(r["seed"] == 0 for r in runs.values())
    for run in runs.values():
        tokens = [point[0] for point in run["curve"]]
        assert tokens == sorted(tokens) and tokens[-1] >= run["settings"]["token_budget"]
        assert run["generated_completions"] == run["trained_completions"]  # both train what they generate
    assert runs["uniform"]["curve"][-1][1] - runs["uniform"]["curve"][0][1] >= 0.15
    assert results["summary"]["methods"]["knapsack"]["seeds"] == [0]
    assert (out / "accuracy_per_token.png").stat().st_size > 10_000


def test_the_sweep_pairs_each_setting_against_the_reference_and_its_own_uniform(tmp_path, monkeypatch):
    """bench_learning_sweep.py: every run is paired against uniform at the reference setting (bench_learning's) and
    against uniform at its own setting; the reference uniform keeps the name the summary pairs against."""
    import bench_learning_sweep as sweep
    from learning import model

    gains = {(16, 1): 0.0, (8, 1): 0.1, (16, 4): 0.2}  # uniform's gain by (prompts per step, steps per generation)

    def fake_run_all(methods, seeds, settings, model_path, out, cached_only=False):
        assert settings.token_budget == 1000 and out.parent.name == "out"
        gain = gains[settings.prompts_per_step, settings.steps_per_generation]
        # uniform_greso adds 0.02 at every setting, the default 0.01
        extra = {"uniform": 0.0, "uniform_greso": 0.02, "bayes_knapsack_uniform_tokens": 0.01}
        return [_record(m, s, 0.6 + gain + extra[m] + 0.01 * s) for s in seeds for m in methods]

    monkeypatch.setattr(sweep, "run_all", fake_run_all)
    monkeypatch.setattr(model, "pretrained_model", lambda **kwargs: tmp_path)
    argv = ["--task", "skills", "--seeds", "3", "--methods", "uniform_greso", "bayes_knapsack_uniform_tokens",
            "--setting", "prompts_per_step=8",
            "--setting", "steps_per_generation=4", "--token_budget", "1000",
            "--output_dir", str(tmp_path / "out")]  # fmt: skip
    assert sweep.main(argv) == 0
    saved = json.loads((tmp_path / "out" / "sweep.json").read_text())
    methods = saved["summary"]["methods"]
    # the reference setting runs --reference_methods only (uniform by default)
    settings = ["prompts_per_step=8", "steps_per_generation=4"]
    others = ["uniform", "uniform_greso", "bayes_knapsack_uniform_tokens"]
    assert set(methods) == {"uniform"} | {f"{m}@{s}" for m in others for s in settings}
    assert methods["uniform@steps_per_generation=4"]["paired_difference_at"]["1.0"]["mean"] == pytest.approx(0.2)
    assert methods["uniform_greso@prompts_per_step=8"]["paired_difference_at"]["1.0"]["mean"] == pytest.approx(0.12)
    same = saved["same_setting"]
    assert set(same) == {f"{m}@{s}" for m in others for s in settings}
    for setting in settings:
        assert list(same[f"uniform@{setting}"]) == [
            "final_vs_bayes_knapsack_uniform_tokens",
            "mean_vs_bayes_knapsack_uniform_tokens",
        ]
        greso, default = same[f"uniform_greso@{setting}"], same[f"bayes_knapsack_uniform_tokens@{setting}"]
        assert greso["final_vs_uniform"]["mean"] == pytest.approx(0.02)
        assert greso["final_vs_bayes_knapsack_uniform_tokens"]["mean"] == pytest.approx(0.01)
        assert default["final_vs_uniform"]["mean"] == pytest.approx(0.01) and len(default) == 2  # not vs itself
    assert "| uniform_greso@steps_per_generation=4 |" in (tmp_path / "out" / "sweep.md").read_text()


def test_sweep_settings_parse_and_scale_the_step_cap():
    import bench_learning_sweep as sweep

    assert sweep.parse_setting("prompts_per_step=4,learning_rate=1e-4") == {
        "prompts_per_step": 4,
        "learning_rate": 1e-4,
    }
    with pytest.raises(Exception, match="KEY one of"):
        sweep.parse_setting("batch=4")
    quarter = sweep.settings_for("large_pool", {"prompts_per_step": 4}, None)
    assert quarter.train_prompts == 512 and quarter.max_steps == 4 * runs.RunSettings().max_steps
    assert sweep.settings_for("skills", {"steps_per_generation": 4}, 500).max_steps == 4 * runs.RunSettings().max_steps
    assert (
        sweep.setting_label({}) == "reference"
        and sweep.setting_label({"learning_rate": 1e-4}) == "learning_rate=0.0001"
    )
    with pytest.raises(ValueError, match="must divide"):
        runs.RunSettings(steps_per_generation=3)


def test_cached_only_returns_the_runs_on_disk_and_runs_nothing(tmp_path):
    settings = runs.RunSettings(prompts_per_step=4)
    (tmp_path / "runs").mkdir()
    record = {**_record("uniform", 0, 0.7), "settings": dataclasses.asdict(settings)}
    (tmp_path / "runs" / "uniform-seed0.json").write_text(json.dumps(record))
    found = bench_learning.run_all(["uniform", "uniform_greso"], [0, 1], settings, "", tmp_path, cached_only=True)
    assert found == [record]  # seed 1 and uniform_greso are not on disk: skipped, not run (no model to run them)
    other = runs.RunSettings(prompts_per_step=8)  # another setting's cache is not this one's
    assert bench_learning.run_all(["uniform"], [0], other, "", tmp_path, cached_only=True) == []


def test_cached_runs_without_a_newer_setting_read_it_as_its_default():
    saved = dataclasses.asdict(runs.RunSettings())
    del saved["steps_per_generation"]  # a run cached before the field existed
    assert bench_learning.same_settings(saved, runs.RunSettings())
    assert not bench_learning.same_settings(saved, runs.RunSettings(steps_per_generation=2))
    assert not bench_learning.same_settings(None, runs.RunSettings())


@pytest.fixture
def oracle_registered():
    """The oracle's names registered for the test, the package's registry restored after it."""
    from trl_adaptive import strategies

    saved = dict(strategies._STRATEGIES), dict(strategies._PROMPT_SOURCES)
    oracle.register()
    yield
    for registry, entries in zip((strategies._STRATEGIES, strategies._PROMPT_SOURCES), saved, strict=True):
        registry.clear()
        registry.update(entries)


def test_importing_the_benchmark_leaves_the_registry_as_it_ships():
    from trl_adaptive.strategies import registered_prompt_sources, registered_strategies

    assert "oracle_knapsack" not in registered_strategies() and "oracle_pool" not in registered_prompt_sources()
    assert runs.uses_oracle("oracle_both") and not runs.uses_oracle("uniform_greso")


def test_the_oracle_allocates_and_selects_by_the_true_success_probability(monkeypatch, oracle_registered):
    """oracle_knapsack is Knapsack RL on the table's p (not the store's epoch rate); oracle_pool keeps the pool's
    prompts of highest true Value(G, p); both are config names, registered through the public extension points."""
    from trl_adaptive import PromptStatistics
    from trl_adaptive.allocation import KnapsackAllocator
    from trl_adaptive.sampling.source import SourceContext
    from trl_adaptive.strategies import get_allocator, prompt_source

    true_p = np.array([0.0, 0.5, 0.9, 1.0, 0.3, 0.99, 0.01, 0.6])
    monkeypatch.setattr(oracle.TRUE_SUCCESS, "p", true_p)
    store = PromptStatistics()  # never updated: every epoch rate is NaN, so the plain knapsack is uniform
    stats = store.batch(np.array([0, 1, 2, 3]))
    expected = KnapsackAllocator().allocate(np.clip(true_p[:4], 1e-12, 1 - 1e-12), budget=32).counts
    np.testing.assert_array_equal(get_allocator("oracle_knapsack").allocate(stats, budget=32).counts, expected)
    assert KnapsackAllocator().allocate(stats, budget=32).counts.tolist() == [8, 8, 8, 8]

    offered = np.array([0, 3])
    ctx = SourceContext(
        offered=offered,
        statistics=store.batch,
        draw=lambda exclude, number: np.setdiff1d(np.arange(8), exclude)[:number],
        rng=np.random.default_rng(0),
        step=0,
        group_size=8,
    )
    batch = prompt_source("oracle_pool")(pool_factor=4).compose(ctx)
    assert sorted(batch.examined.tolist()) == list(range(8))
    value = oracle.value(8, np.clip(true_p, 1e-12, 1 - 1e-12))
    assert set(batch.prompt_ids.tolist()) == set(np.argsort(-value)[:2].tolist()) == {1, 4}
    monkeypatch.setattr(oracle.TRUE_SUCCESS, "p", None)
    with pytest.raises(RuntimeError, match="before TrueSuccessCallback scored"):
        get_allocator("oracle_knapsack").allocate(stats, budget=32)


def test_every_method_shares_the_oracles_gain():
    """share_of_<oracle>: the method's paired final gain over the oracle's, and its token saving over the oracle's;
    none where the oracle's own gain is within its interval (no ceiling to share)."""
    method = {
        "paired_difference_at": {"1.0": {"mean": 0.01, "half_width": 0.02}},
        "tokens_to_uniform_final_ratio": {"0.667": {"mean": 0.9, "half_width": 0.1}},
    }
    ceiling = {
        "paired_difference_at": {"1.0": {"mean": 0.04, "half_width": 0.01}},
        "tokens_to_uniform_final_ratio": {"0.667": {"mean": 0.8, "half_width": 0.05}},
    }
    share = analysis.oracle_share(method, ceiling)
    assert share["final_accuracy"] == pytest.approx(0.25) and share["token_saving"] == pytest.approx(0.5)
    ceiling["paired_difference_at"]["1.0"]["half_width"] = 0.05  # level within its interval: nothing to share
    ceiling["tokens_to_uniform_final_ratio"]["0.667"]["half_width"] = 0.3
    assert analysis.oracle_share(method, ceiling) == {"final_accuracy": None, "token_saving": None}


def test_a_difficulty_mix_draws_only_its_lengths_and_the_default_draw_is_unchanged():
    rows = task.Prompts.draw(400, seed=3, lengths=bench_learning.REGIMES["hard_mix"]["lengths"]).rows
    counts = np.bincount([r["letters"] for r in rows], minlength=11)
    assert set(np.flatnonzero(counts)) == {1, 2, 9, 10} and counts[9] + counts[10] > 0.7 * len(rows)
    assert task.Prompts.draw(50, seed=3).rows == task.Prompts.draw(50, seed=3, lengths=[]).rows
    args = bench_learning.build_parser().parse_args(["--task", "hard_mix", "--num_generations", "32"])
    settings = bench_learning.settings_from(args)
    assert (settings.num_generations, settings.prompts_per_step, settings.lengths[-1]) == (32, 4, 2)


def test_the_oracle_benchmark_runs_at_the_tuned_setting_and_maps_each_arm_against_the_best_uniform():
    import bench_oracle

    settings = bench_oracle.table_settings("skills_g32")
    assert (settings.steps_per_generation, settings.num_generations, settings.prompts_per_step) == (4, 32, 4)
    assert bench_oracle.table_settings("hard_mix").lengths
    assert bench_oracle.table_settings("reversal").train_batch == 32  # 128 completions in 4 optimizer steps
    # skills: uniform at G=32 is 0.1 better than at G=8, where the default gains 0.05 and the oracle 0.02
    default, oracle_arm = analysis.DEFAULT_METHOD, "oracle_knapsack"
    at_8 = [_record(m, s, base + 0.01 * s) for s in range(3) for m, base in
            (("uniform", 0.6), (default, 0.65), (oracle_arm, 0.62))]  # fmt: skip
    at_32 = [_record("uniform", s, 0.7 + 0.01 * s) for s in range(3)]
    text = bench_oracle.map_table({"skills": at_8, "skills_g32": at_32}, budget=1000)
    row = next(line for line in text.splitlines() if line.startswith("| skills, 8 "))
    assert "| +0.050 ± 0.000 | +0.020 ± 0.000 | skills_g32 (G=32) | -0.050 ± 0.000 | -0.080 ± 0.000 |" in row

"""The Hub side of a run: the model card (TRL's GRPO card plus the adaptive section,
``trl_adaptive.trainer.model_card``) and the per-prompt statistics dataset and its warm start (``trl_adaptive.hub``).
Everything is produced offline; nothing is pushed."""

from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from helpers.trainer import build_trainer, make_dataset
from huggingface_hub import ModelCard

from trl_adaptive import AdaptiveGRPOTrainer, PromptStatistics
from trl_adaptive.allocation import prompts_per_status
from trl_adaptive.hub import load_statistics, statistics_card_text, statistics_dataset, status_table
from trl_adaptive.stats import prompt_fingerprint
from trl_adaptive.strategies import registered_strategies, strategy
from trl_adaptive.trainer.model_card import (
    CARD_METRICS,
    CARD_SECTION_TITLE,
    PAPERS,
    adaptive_card_section,
    cited_papers,
    extend_model_card,
)


def _trainer(model_dir: Path, output_dir: Path, dataset=None, **overrides) -> AdaptiveGRPOTrainer:
    """Knapsack on the 8 prompts of ``make_dataset``, 2 prompts x 4 completions per step: 4 steps per epoch."""
    config = {"max_steps": 8, "per_device_train_batch_size": 8, "num_generations": 4, "max_rollouts": 6, **overrides}
    return build_trainer(model_dir, output_dir, dataset, allocator="knapsack", epsilon_high=0.28, **config)


@pytest.fixture(scope="module")
def trained(tiny_model_dir, tmp_path_factory):
    """A knapsack run of 2 epochs on the tiny model (seconds)."""
    trainer = _trainer(tiny_model_dir, tmp_path_factory.mktemp("run"))
    trainer.train()
    return trainer


# ---------------------------------------------------------------------------------------------------------------------
# Model card
# ---------------------------------------------------------------------------------------------------------------------
def _bibtex_blocks(text: str) -> list[str]:
    return re.findall(r"```bibtex\n(.*?)\n```", text, flags=re.S)


@pytest.mark.trainer
def test_model_card_is_trls_card_plus_the_adaptive_section(trained):
    trained.create_model_card(dataset_name="BytedTsinghua-SIA/DAPO-Math-17k", statistics_repo_id="me/run-stats")
    path = Path(trained.args.output_dir) / "README.md"
    card = ModelCard.load(path)  # front matter parses
    text = card.text

    # TRL's card is all there: its metadata, tags, template sections and the GRPO / TRL citations.
    assert card.data.library_name == "transformers"
    assert card.data.datasets == "BytedTsinghua-SIA/DAPO-Math-17k"
    assert card.data.model_name == Path(trained.args.output_dir).name
    for tag in ("generated_from_trainer", "trl", "grpo", "trl-adaptive", "allocator-knapsack"):
        assert tag in card.data.tags
    for heading in ("## Quick start", "## Training procedure", "### Framework versions", "## Citations"):
        assert heading in text
    assert "This model was trained with GRPO" in text and "@article{shao2024deepseekmath," in text
    assert "Cite TRL as:" in text

    # The adaptive section sits before the citations and names trainer, allocator, hyperparameters and budget.
    section = text[text.index(CARD_SECTION_TITLE) : text.index("## Citations")]
    assert "`AdaptiveGRPOTrainer`" in section
    assert (
        "| allocator | `knapsack` (Knapsack RL, [arXiv 2509.25849](https://huggingface.co/papers/2509.25849)) |"
        in (section)
    )
    for hyperparameter in ("`min_rollouts=2`", "`max_rollouts=6`", "`fallback=True`", "`solver='greedy'`"):
        assert hyperparameter in section
    assert "| budget | 8 completions per generation batch over 2 prompts (4 per prompt on average) |" in section
    assert "clip epsilon 0.2 / 0.28" in section
    assert "[`me/run-stats`](https://huggingface.co/datasets/me/run-stats)" in section

    # Final allocation statistics: the last and mean logged values, and the prompt-status counts of the store.
    logged = [log for log in trained.state.log_history if "allocation/effective_gradient_ratio" in log]
    assert len(logged) == 8
    for key, label in CARD_METRICS:
        if key in logged[-1]:
            values = [log[key] for log in logged]
            assert f"| {label} | `{key}` | {values[-1]:.4g} | {np.mean(values):.4g} |" in section
    ids = np.asarray(trained.train_dataset["prompt_id"])
    status = prompts_per_status(trained.prompt_statistics.success_rates(ids))
    assert sum(status.values()) == 8 and status["unseen"] == 0  # 2 epochs closed
    assert "| " + " | ".join(str(v) for v in status.values()) + " |" in section
    assert "after 2 completed epoch(s)" in section

    # Citations: Knapsack RL (the allocator) and DAPO (token-level loss, clip-higher), before TRL's own.
    blocks = _bibtex_blocks(text)
    keys = [re.match(r"@(\w+)\{([^,]+),", block).group(2) for block in blocks]
    assert keys == ["shao2024deepseekmath", "li2025knapsackrl", "yu2025dapo", "vonwerra2020trl"]
    assert text.index("Cite Knapsack RL as:") < text.index("Cite TRL as:")


@pytest.mark.trainer
def test_model_card_written_twice_has_one_section(trained, tmp_path):
    trained.create_model_card()
    path = Path(trained.args.output_dir) / "README.md"
    once = path.read_text()
    extend_model_card(path, trained.allocation_summary(), trained.args)  # again on the extended file
    twice = path.read_text()
    assert twice.count(CARD_SECTION_TITLE) == 1
    assert twice.count("@article{li2025knapsackrl,") == 1
    assert twice == once


@pytest.mark.parametrize(
    ("allocator", "loss_type", "epsilon_high", "expected"),
    [
        ("knapsack", "dapo", 0.28, ["knapsack_rl", "dapo"]),
        ("reinforce_ada_est", "grpo", None, ["reinforce_ada"]),
        ("cero", "dapo", None, ["cero", "dapo"]),
        ("uniform", "grpo", None, []),  # GRPO itself: TRL's card already cites DeepSeekMath
        ("uniform", "bnpo", 0.28, ["dapo"]),
    ],
)
def test_cited_papers_follow_the_allocator_and_loss(allocator, loss_type, epsilon_high, expected):
    assert [paper.key for paper in cited_papers(allocator, loss_type, epsilon_high)] == expected


def test_bibtex_entries_are_well_formed():
    for paper in PAPERS.values():
        entry = paper.bibtex
        assert entry.count("{") == entry.count("}"), paper.key
        assert re.match(r"@article\{\w+,\n", entry), paper.key
        fields = dict(re.findall(r"^\s{4}(\w+)\s+= (.+?),?$", entry, flags=re.M))
        assert set(fields) == {"title", "author", "year", "eprint"}, paper.key
        assert paper.title in fields["title"]
        assert fields["eprint"] == f"{{arXiv:{paper.arxiv_id}}}"
    assert PAPERS["knapsack_rl"].arxiv_id == "2509.25849"
    assert PAPERS["reinforce_ada"].arxiv_id == "2510.04996"
    assert PAPERS["cero"].arxiv_id == "2606.05606"
    # Every registered strategy's papers are on the card's list (uniform: GRPO, no extra paper).
    assert {key for name in registered_strategies() for key in strategy(name).papers} <= set(PAPERS)


def test_every_strategy_class_names_the_paper_the_card_cites():
    """A strategy's class docstring and its model card cite the same paper (name and arXiv id)."""
    for name in registered_strategies():
        cls = strategy(name).allocator or strategy(name).procedure
        doc = " ".join((cls.__doc__ or "").split())
        assert "Paper: " in doc, f"{cls.__name__}'s docstring names no paper"
        for key in strategy(name).papers:
            paper = PAPERS[key]
            assert paper.name in doc and f"arXiv {paper.arxiv_id}" in doc, (cls.__name__, paper.key)


def test_card_section_before_any_logged_batch():
    """The card can be written before training (e.g. a first checkpoint push): it says so instead of inventing."""
    args = SimpleNamespace(
        allocator_kwargs=None,
        success_threshold=1.0,
        equal_prompt_weighting=False,
        loss_type="grpo",
        epsilon=0.2,
        epsilon_high=None,
        beta=0.0,
    )
    summary = {
        "allocator": "cero",
        "hyperparameters": {"min_rollouts": 2, "max_rollouts": 16},
        "budget": 64,
        "prompts_per_batch": 8,
        "num_generations": 8,
        "global_step": 0,
        "logged_batches": 0,
        "metrics": {},
        "num_prompts": 100,
        "epochs_closed": 0,
        "prompt_status": prompts_per_status(np.full(100, np.nan)),
    }
    section = adaptive_card_section(summary, args)
    assert "No generation batch was logged." in section
    assert "| allocator | `cero` (CERO, [arXiv 2606.05606](https://huggingface.co/papers/2606.05606)) |" in section
    assert "| 100 | 0 | 0 | 0 | 0 | 0 |" in section
    assert "clip epsilon 0.2 / 0.2" in section
    assert "| posterior | Beta(1.0, 1.0) weak prior, never forgets |" in section
    assert "pilot round" not in section and "dynamic sampling" not in section
    args.posterior_half_life, args.posterior_prior_a, args.posterior_prior_b, args.pilot_rollouts = 8.0, 0.5, 0.5, 2
    section = adaptive_card_section({**summary, "allocator": "bayes_knapsack"}, args)
    assert "| posterior | Beta(0.5, 0.5) weak prior, half-life 8.0 generation batches |" in section
    assert "| pilot round | 2 completions per prompt, then the rest by the knapsack |" in section


# ---------------------------------------------------------------------------------------------------------------------
# Per-prompt statistics as a dataset, and the warm start
# ---------------------------------------------------------------------------------------------------------------------
@pytest.mark.trainer
def test_statistics_dataset_has_one_row_per_prompt(trained):
    dataset = statistics_dataset(trained)
    for column in ("prompt_id", "prompt_fingerprint", "success_rate", "total_successes", "total_attempts"):
        assert column in dataset.column_names
    assert len(dataset) == 8
    store = trained.prompt_statistics
    ids = np.asarray(dataset["prompt_id"])
    np.testing.assert_array_equal(np.asarray(dataset["success_rate"]), store.success_rates(ids))
    np.testing.assert_array_equal(np.asarray(dataset["total_attempts"]), store.batch(ids).attempts)
    prompts = dict(zip(trained.train_dataset["prompt_id"], trained.train_dataset["prompt"], strict=True))
    assert dataset["prompt_fingerprint"] == [prompt_fingerprint(prompts[i]) for i in ids.tolist()]
    # Every completion of the run was counted once: 8 steps x 8 completions.
    assert sum(dataset["total_attempts"]) == 64
    assert statistics_dataset(store).to_dict() == dataset.to_dict()


@pytest.mark.trainer
def test_statistics_load_back_from_every_format(trained, tmp_path):
    expected = trained.prompt_statistics.state_dict()
    dataset = statistics_dataset(trained)
    dataset.to_parquet(str(tmp_path / "stats.parquet"))
    dataset.save_to_disk(str(tmp_path / "saved"))
    trained.prompt_statistics.save(tmp_path / "prompt_statistics.json")
    sources = [tmp_path / "stats.parquet", tmp_path / "saved", tmp_path / "prompt_statistics.json", tmp_path]
    for source in sources:
        assert load_statistics(source, success_threshold=1.0).state_dict() == expected, source
    with pytest.raises(ValueError, match="success_threshold"):
        load_statistics(tmp_path / "stats.parquet", success_threshold=0.5)


@pytest.mark.trainer
def test_warm_start_from_the_statistics_dataset(trained, tiny_model_dir, tmp_path):
    """The next run starts from the pushed statistics: its first allocation already sees last run's success rates;
    statistics measured on other prompts are refused."""
    dataset = statistics_dataset(trained)
    dataset.to_parquet(str(tmp_path / "stats.parquet"))
    statistics = load_statistics(tmp_path / "stats.parquet", success_threshold=1.0)
    warm = _trainer(tiny_model_dir, tmp_path / "next", trainer_kwargs={"statistics": statistics}, max_steps=1)
    ids = np.asarray(warm.train_dataset["prompt_id"])
    np.testing.assert_array_equal(
        warm.prompt_statistics.success_rates(ids), trained.prompt_statistics.success_rates(ids)
    )
    np.testing.assert_array_equal(
        np.asarray(warm.train_dataset["success_rate"]), trained.prompt_statistics.success_rates(ids)
    )

    other_prompts = make_dataset(8).map(lambda row: {"prompt": row["prompt"] + " (reworded)"})
    with pytest.raises(ValueError, match=r"prompt \(text or images\) differs"):
        statistics = load_statistics(tmp_path / "stats.parquet")
        _trainer(
            tiny_model_dir, tmp_path / "other", other_prompts, trainer_kwargs={"statistics": statistics}, max_steps=1
        )


@pytest.mark.trainer
def test_statistics_card_text(trained):
    dataset = statistics_dataset(trained)
    text = statistics_card_text(dataset, model_repo_id="me/model")
    assert text.startswith("# Per-prompt statistics\n")
    assert "[`me/model`](https://huggingface.co/me/model)" in text
    assert "(8 rows)" in text
    for column in dataset.column_names:
        assert f"`{column}`" in text
    assert "load_statistics(" in text and "AdaptiveGRPOTrainer(..., statistics=statistics)" in text
    status = prompts_per_status(np.asarray(dataset["success_rate"], dtype=np.float64))
    assert "\n".join(status_table(status)) in text


def test_status_table_has_a_label_and_a_count_per_bucket():
    from trl_adaptive.allocation import STATUS_LABELS, STATUSES

    rows = status_table(prompts_per_status([0.0, 0.1, 1.0, float("nan")]))
    assert rows == [
        "| " + " | ".join(STATUS_LABELS[name] for name in STATUSES) + " |",
        "|---|---|---|---|---|---|",
        "| 1 | 1 | 1 | 0 | 0 | 1 |",
    ]


def test_statistics_of_a_plain_store():
    store = PromptStatistics()
    store.update([3, 3, 5], [1.0, 0.0, 1.0])
    store.end_epoch()
    dataset = statistics_dataset(store)
    assert dataset["prompt_id"] == [3, 5] and dataset["success_rate"] == [0.5, 1.0]
    with pytest.raises(TypeError, match="AdaptiveGRPOTrainer or a PromptStatistics"):
        statistics_dataset(object())


@pytest.mark.trainer
def test_allocation_summary_matches_the_log(trained):
    summary = trained.allocation_summary()
    logged = [
        log["allocation/effective_gradient_ratio"] for log in trained.state.log_history if "allocation/budget" in log
    ]
    assert summary["metrics"]["allocation/effective_gradient_ratio"] == {
        "last": logged[-1],
        "mean": pytest.approx(float(np.mean(logged))),
    }
    assert (summary["budget"], summary["prompts_per_batch"], summary["global_step"]) == (8, 2, 8)
    assert summary["hyperparameters"]["max_rollouts"] == 6
    assert summary["hyperparameters"]["token_budget"] == "uniform"  # the wrapper's, beside the allocator's own

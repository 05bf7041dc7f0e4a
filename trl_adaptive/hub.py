"""The Hub side of a run: TRL's GRPO model card plus an "Adaptive allocation" section, and the per-prompt statistics
as a ``datasets.Dataset`` that can be pushed next to the model and loaded as the next run's warm start.

Everything here is produced offline and is tested for content and format; only :func:`push_statistics_to_hub` talks
to the Hub, through ``Dataset.push_to_hub`` and ``DatasetCard.push_to_hub`` (huggingface_hub's own code).

    trainer.train()
    trainer.push_to_hub()                                   # model + card (AdaptiveGRPOTrainer.create_model_card)
    push_statistics_to_hub(trainer, "me/run-1-prompt-statistics")
    ...
    stats = load_statistics("me/run-1-prompt-statistics")  # next run
    AdaptiveGRPOTrainer(..., statistics=stats)

The card is TRL's own (``trl.trainer.base_trainer._BaseTrainer.create_model_card`` with its ``lm_model_card.md``
template) with two additions spliced into the text: the "Adaptive allocation" section before "## Citations", and
the BibTeX of the allocator's paper (and DAPO's, for the token-level loss / clip-higher) after TRL's GRPO citation.
"""

from __future__ import annotations

import dataclasses
import math
import os
import typing
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from . import __version__
from .allocation import prompts_per_status
from .stats import PromptStatistics

CARD_SECTION_TITLE = "## Adaptive allocation"
CARD_TAGS = ("trl-adaptive", "adaptive-rollout-allocation")
STATISTICS_FILE = "prompt_statistics.parquet"


@dataclass(frozen=True)
class Paper:
    """A paper the card cites: its title, arXiv id and BibTeX entry."""

    key: str
    name: str
    title: str
    arxiv_id: str
    bibtex: str

    @property
    def url(self) -> str:
        return f"https://huggingface.co/papers/{self.arxiv_id}"


# Titles and authors from the papers themselves (shared/papers/*.txt; Knapsack RL's and DAPO's author lists as the
# CERO paper's reference list gives them).
PAPERS: dict[str, Paper] = {
    "knapsack_rl": Paper(
        key="knapsack_rl",
        name="Knapsack RL",
        title="Knapsack RL: Unlocking Exploration of LLMs via Optimizing Budget Allocation",
        arxiv_id="2509.25849",
        bibtex="""\
@article{li2025knapsackrl,
    title        = {{Knapsack RL: Unlocking Exploration of LLMs via Optimizing Budget Allocation}},
    author       = {Z. Li and C. Chen and T. Yang and T. Ding and R. Sun and G. Zhang and W. Huang and Z. Luo},
    year         = 2025,
    eprint       = {arXiv:2509.25849},
}""",
    ),
    "reinforce_ada": Paper(
        key="reinforce_ada",
        name="Reinforce-Ada",
        title="Reinforce-Ada: An Adaptive Sampling Framework under Non-linear RL Objectives",
        arxiv_id="2510.04996",
        bibtex="""\
@article{xiong2025reinforceada,
    title        = {{Reinforce-Ada: An Adaptive Sampling Framework under Non-linear RL Objectives}},
    author       = {Wei Xiong and Chenlu Ye and Baohao Liao and Hanze Dong and Xinxing Xu and Christof Monz and
                    Jiang Bian and Nan Jiang and Tong Zhang},
    year         = 2025,
    eprint       = {arXiv:2510.04996},
}""",
    ),
    "cero": Paper(
        key="cero",
        name="CERO",
        title="Cross-Epoch Adaptive Rollout Optimization for RL Post-Training",
        arxiv_id="2606.05606",
        bibtex="""\
@article{zong2026cero,
    title        = {{Cross-Epoch Adaptive Rollout Optimization for RL Post-Training}},
    author       = {Yiming Zong and Yige Wang and Jiashuo Jiang},
    year         = 2026,
    eprint       = {arXiv:2606.05606},
}""",
    ),
    "dapo": Paper(
        key="dapo",
        name="DAPO",
        title="DAPO: An Open-Source LLM Reinforcement Learning System at Scale",
        arxiv_id="2503.14476",
        bibtex="""\
@article{yu2025dapo,
    title        = {{DAPO: An Open-Source LLM Reinforcement Learning System at Scale}},
    author       = {Q. Yu and Z. Zhang and R. Zhu and Y. Yuan and X. Zuo and Y. Yue and W. Dai and T. Fan and
                    G. Liu and L. Liu and others},
    year         = 2025,
    eprint       = {arXiv:2503.14476},
}""",
    ),
}
# The paper behind each registered allocator ("uniform" is GRPO, which TRL's card already cites).
ALLOCATOR_PAPERS: dict[str, tuple[str, ...]] = {
    "knapsack": ("knapsack_rl",),
    "bayes_knapsack": ("knapsack_rl",),  # Knapsack RL's objective, in expectation under a posterior (ours)
    "reinforce_ada_est": ("reinforce_ada",),
    "reinforce_ada_seq_pos": ("reinforce_ada",),
    "reinforce_ada_seq_balance": ("reinforce_ada",),
    "cero": ("cero",),
    "pilot_commit": (),  # databricks/pilot-commit's rule (code, no paper to cite)
    "uniform": (),
}
# Logged metrics summarised on the card: (log key, label).
CARD_METRICS = (
    ("allocation/effective_gradient_ratio", "effective-gradient ratio, Knapsack RL Eq. 4"),
    ("allocation/zero_gradient_ratio_all_correct", "zero-gradient ratio, all correct"),
    ("allocation/zero_gradient_ratio_all_wrong", "zero-gradient ratio, all wrong"),
    ("allocation/effective_prompt_ratio", "effective-prompt ratio"),
    ("allocation/count_mean", "completions per prompt, mean"),
    ("allocation/count_max", "completions per prompt, max"),
    ("allocation/prompts_skipped", "prompts skipped per batch"),
    ("allocation/solve_time_s", "allocator time per batch (s)"),
)
STATUS_LABELS = {
    "unseen": "unseen",
    "p0": "p = 0",
    "p0_0.2": "0 < p <= 0.2",
    "p0.2_0.8": "0.2 < p < 0.8",
    "p0.8_1": "0.8 <= p < 1",
    "p1": "p = 1",
}


# ---------------------------------------------------------------------------------------------------------------------
# What the card reports
# ---------------------------------------------------------------------------------------------------------------------
def allocator_hyperparameters(allocator: Any) -> dict[str, Any]:
    """The allocator's constructor arguments (allocators are dataclasses), e.g. ``{"min_rollouts": 2, ...}``."""
    if dataclasses.is_dataclass(allocator):
        return {f.name: getattr(allocator, f.name) for f in dataclasses.fields(allocator) if f.init}
    return {k: v for k, v in vars(allocator).items() if not k.startswith("_")}


def allocation_summary(trainer: Any) -> dict[str, Any]:
    """Final allocation statistics of a run: budget, last and run-mean of the logged allocation metrics, and the
    prompt-status counts over the whole training set (from the last completed epoch's success rates).

    Reads ``trainer.args``, ``trainer.allocator``, ``trainer.prompt_statistics``, ``trainer.state.log_history`` and
    ``trainer.train_dataset``; no training state is changed.
    """
    args = trainer.args
    budget = int(args.generation_batch_size)
    logged = [log for log in trainer.state.log_history if CARD_METRICS[0][0] in log]
    metrics = {}
    for key, _ in CARD_METRICS:
        values = [float(log[key]) for log in logged if key in log and math.isfinite(float(log[key]))]
        if values:
            metrics[key] = {"last": values[-1], "mean": float(np.mean(values))}
    ids = trainer._all_prompt_ids()
    status = prompts_per_status(trainer.prompt_statistics.success_rates(ids))
    return {
        "allocator": trainer.allocator.name,
        "hyperparameters": allocator_hyperparameters(trainer.allocator),
        "budget": budget,
        "prompts_per_batch": budget // int(args.num_generations),
        "num_generations": int(args.num_generations),
        "global_step": int(trainer.state.global_step),
        "logged_batches": len(logged),
        "metrics": metrics,
        "num_prompts": len(ids),
        "epochs_closed": int(trainer.prompt_statistics.epoch),
        "prompt_status": status,
    }


def cited_papers(allocator_name: str, loss_type: str | None = None, epsilon_high: float | None = None) -> list[Paper]:
    """Papers to cite besides TRL's own (GRPO / DeepSeekMath and TRL): the allocator's, and DAPO's when its
    token-level loss (``loss_type="dapo"``) or clip-higher (``epsilon_high``) is used."""
    keys = list(ALLOCATOR_PAPERS.get(allocator_name, ()))
    if loss_type == "dapo" or epsilon_high is not None:
        keys.append("dapo")
    return [PAPERS[key] for key in keys]


def _format_value(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return repr(value) if isinstance(value, str) else str(value)


def _round_rows(name: str, args: Any) -> list[str]:
    """Card rows for the settings only some allocators read: the posterior, the pilot, dynamic sampling."""
    rows = []
    if name in ("bayes_knapsack", "cero"):
        half_life = getattr(args, "posterior_half_life", None)
        forgetting = "never forgets" if half_life is None else f"half-life {half_life} generation batches"
        rows.append(
            f"| posterior | Beta({getattr(args, 'posterior_prior_a', 1.0)}, {getattr(args, 'posterior_prior_b', 1.0)})"
            f" weak prior, {forgetting} |"
        )
    if getattr(args, "pilot_rollouts", 0):
        rows.append(f"| pilot round | {args.pilot_rollouts} completions per prompt, then the rest by the knapsack |")
    if getattr(args, "dynamic_sampling", False):
        rows.append(f"| dynamic sampling | on, at most {args.dynamic_sampling_max_rounds} extra rounds per batch |")
    return rows


def adaptive_card_section(summary: Mapping[str, Any], args: Any, statistics_repo_id: str | None = None) -> str:
    """The "Adaptive allocation" section of the model card, as Markdown (from :func:`allocation_summary`)."""
    name = summary["allocator"]
    papers = [PAPERS[key] for key in ALLOCATOR_PAPERS.get(name, ())]
    origin = ", ".join(f"{p.name}, [arXiv {p.arxiv_id}]({p.url})" for p in papers) or "GRPO"
    hyper = ", ".join(f"`{k}={_format_value(v)}`" for k, v in summary["hyperparameters"].items()) or "none"
    extra = f"`{args.allocator_kwargs}`" if args.allocator_kwargs else "none"
    lines = [
        CARD_SECTION_TITLE,
        "",
        f"This model was trained with `AdaptiveGRPOTrainer` (trl-adaptive {__version__}), TRL's `GRPOTrainer` with a",
        "per-prompt number of completions chosen by an allocator under a fixed budget per generation batch.",
        "",
        "| setting | value |",
        "|---|---|",
        "| trainer | `AdaptiveGRPOTrainer` (subclass of TRL's `GRPOTrainer`) |",
        f"| allocator | `{name}` ({origin}) |",
        f"| allocator hyperparameters | {hyper} |",
        f"| `allocator_kwargs` given | {extra} |",
        f"| budget | {summary['budget']} completions per generation batch over {summary['prompts_per_batch']} prompts "
        f"({summary['num_generations']} per prompt on average) |",
        f"| success threshold | a completion succeeds when its total reward is >= {args.success_threshold} |",
        f"| equal prompt weighting | {args.equal_prompt_weighting} |",
        *_round_rows(name, args),
        f"| loss | `loss_type={args.loss_type!r}`, clip epsilon {args.epsilon} / "
        f"{args.epsilon_high if args.epsilon_high is not None else args.epsilon}, beta {args.beta} |",
        "",
        "### Final allocation statistics",
        "",
    ]
    if summary["metrics"]:
        lines += [
            f"Logged over {summary['logged_batches']} logging steps, up to optimizer step {summary['global_step']}:",
            "",
            "| metric | logged as | last | mean over the run |",
            "|---|---|---|---|",
        ]
        for key, label in CARD_METRICS:
            if key in summary["metrics"]:
                value = summary["metrics"][key]
                lines.append(f"| {label} | `{key}` | {value['last']:.4g} | {value['mean']:.4g} |")
    else:
        lines.append("No generation batch was logged.")
    status = summary["prompt_status"]
    lines += [
        "",
        f"Prompt status over the {summary['num_prompts']} training prompts after {summary['epochs_closed']} "
        "completed epoch(s), from each prompt's last-epoch success rate p:",
        "",
        "| " + " | ".join(STATUS_LABELS[k] for k in status) + " |",
        "|" + "---|" * len(status),
        "| " + " | ".join(str(v) for v in status.values()) + " |",
        "",
        "The per-prompt statistics (prompt id, prompt fingerprint, success rate, counts) are in "
        "`prompt_statistics.json`"
        + (
            f" and in the dataset [`{statistics_repo_id}`](https://huggingface.co/datasets/{statistics_repo_id})"
            if statistics_repo_id
            else ""
        )
        + "; `trl_adaptive.hub.load_statistics(...)` loads them as the warm start of a next run.",
    ]
    return "\n".join(lines)


def citations_markdown(papers: Iterable[Paper]) -> str:
    """BibTeX blocks ("Cite X as:") in the style of TRL's card."""
    blocks = []
    for paper in papers:
        blocks.append(f"Cite {paper.name} as:\n\n```bibtex\n{paper.bibtex}\n```")
    return "\n\n".join(blocks)


def extend_model_card(card_path: str | os.PathLike[str], trainer: Any, statistics_repo_id: str | None = None):
    """Add the adaptive section, tags and citations to the card TRL just wrote at ``card_path``; returns the card.

    The section goes before TRL's "## Citations" heading, the BibTeX blocks before its "Cite TRL as:" line (both at
    the end of the text when the template lacks them, so nothing is dropped).
    """
    from huggingface_hub import ModelCard

    card = ModelCard.load(card_path)
    args = trainer.args
    section = adaptive_card_section(allocation_summary(trainer), args, statistics_repo_id)
    papers = cited_papers(trainer.allocator.name, args.loss_type, args.epsilon_high)
    text = card.text
    if CARD_SECTION_TITLE in text:  # written again (every checkpoint): replace the previous section
        start = text.index(CARD_SECTION_TITLE)
        end = text.find("\n## ", start + len(CARD_SECTION_TITLE))
        text = text[:start] + text[end + 1 :] if end != -1 else text[:start]
    text = _insert_before(text, "## Citations", section)
    if papers and papers[0].bibtex.splitlines()[0] not in text:
        text = _insert_before(text, "Cite TRL as:", citations_markdown(papers))
    card.text = text
    tags = list(card.data.tags or [])
    for tag in (*CARD_TAGS, f"allocator-{trainer.allocator.name}"):
        if tag not in tags:
            tags.append(tag)
    card.data.tags = tags
    card.save(card_path)
    return card


def _insert_before(text: str, marker: str, insertion: str) -> str:
    at = text.find(marker)
    if at == -1:
        return text.rstrip("\n") + "\n\n" + insertion + "\n"
    return text[:at] + insertion + "\n\n" + text[at:]


# ---------------------------------------------------------------------------------------------------------------------
# The per-prompt statistics as a dataset
# ---------------------------------------------------------------------------------------------------------------------
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
        "| " + " | ".join(STATUS_LABELS[k] for k in status) + " |",
        "|" + "---|" * len(status),
        "| " + " | ".join(str(v) for v in status.values()) + " |",
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
    if path.is_dir() and (path / "prompt_statistics.json").is_file() and not (path / "dataset_info.json").is_file():
        path = path / "prompt_statistics.json"
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


# ---------------------------------------------------------------------------------------------------------------------
# docs/configuration.md, generated from AdaptiveGRPOConfig
# ---------------------------------------------------------------------------------------------------------------------
def adaptive_config_fields() -> list[dict[str, Any]]:
    """The fields AdaptiveGRPOConfig adds to GRPOConfig: name, type, default, CLI help and docstring paragraph."""
    from trl import GRPOConfig

    from .trainer.config import AdaptiveGRPOConfig

    inherited = {f.name for f in dataclasses.fields(GRPOConfig)}
    doc = _docstring_entries(AdaptiveGRPOConfig.__doc__ or "")
    # Resolved here because HfArgumentParser replaces the string annotations of dataclass fields in place.
    hints = typing.get_type_hints(AdaptiveGRPOConfig)
    fields = []
    for f in dataclasses.fields(AdaptiveGRPOConfig):
        if f.name in inherited:
            continue
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()  # type: ignore[misc]
        fields.append(
            {
                "name": f.name,
                "type": _type_name(hints.get(f.name, f.type)),
                "default": default,
                "help": f.metadata.get("help", ""),
                "doc": doc.get(f.name, ""),
            }
        )
    return fields


def _type_name(annotation: Any) -> str:
    if isinstance(annotation, str):
        return annotation
    if isinstance(annotation, type):
        return annotation.__name__
    return str(annotation).replace("typing.", "")


def _docstring_entries(docstring: str) -> dict[str, str]:
    """``name (`type`, ...):`` entries of a TRL-style config docstring -> their (unwrapped) description."""
    entries: dict[str, str] = {}
    current: str | None = None
    for line in docstring.splitlines():
        stripped = line.strip()
        indent = len(line) - len(line.lstrip())
        if stripped and indent == 4 and " (`" in stripped and stripped.endswith(":"):
            current = stripped.split(" (`", 1)[0]
            entries[current] = ""
        elif current is not None and stripped and indent >= 8:
            entries[current] = (entries[current] + " " + stripped).strip()
        elif current is not None and stripped and indent < 8:
            current = None
    return entries


def configuration_markdown() -> str:
    """The text of docs/configuration.md (``tests/test_hub.py`` checks the file equals it)."""
    lines = [
        "# Configuration reference",
        "",
        "<!-- Generated from AdaptiveGRPOConfig by trl_adaptive.hub.configuration_markdown(); do not edit by hand.",
        "     Regenerate: python -c 'import trl_adaptive.hub as h; h.write_configuration_doc()' -->",
        "",
        "`AdaptiveGRPOConfig` is TRL's `GRPOConfig` (every field, same meaning, see the",
        "[GRPOTrainer docs](https://huggingface.co/docs/trl/grpo_trainer)) plus the fields below. One exception of",
        "meaning: `num_generations` is the **average** number of completions per prompt; a generation batch holds",
        "`generation_batch_size` completions (the budget) over `generation_batch_size / num_generations` prompts.",
        "",
        "Every field is also a command-line flag of `examples/train_dapo.py` (and of any `TrlParser` script) and a",
        "key of a `--config` YAML recipe.",
        "",
        "| field | flag | default | help |",
        "|---|---|---|---|",
    ]
    fields = adaptive_config_fields()
    for f in fields:
        help_text = f["help"].replace("|", r"\|")
        lines.append(f"| `{f['name']}` | `--{f['name']}` | `{f['default']!r}` | {help_text} |")
    lines.append("")
    for f in fields:
        lines += [f"## `{f['name']}`", "", f"Type `{f['type']}`, default `{f['default']!r}`.", ""]
        if f["doc"]:
            lines += [f["doc"], ""]
    return "\n".join(lines)


def write_configuration_doc(path: str | os.PathLike[str] | None = None) -> Path:
    """Regenerate docs/configuration.md (next to this package in a source checkout)."""
    target = Path(path) if path is not None else Path(__file__).resolve().parents[1] / "docs" / "configuration.md"
    target.write_text(configuration_markdown(), encoding="utf-8")
    return target


__all__ = [
    "ALLOCATOR_PAPERS",
    "PAPERS",
    "Paper",
    "adaptive_card_section",
    "allocation_summary",
    "allocator_hyperparameters",
    "cited_papers",
    "configuration_markdown",
    "extend_model_card",
    "load_statistics",
    "push_statistics_to_hub",
    "statistics_card_text",
    "statistics_dataset",
    "write_configuration_doc",
]

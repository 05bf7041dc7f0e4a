"""The model card of a run: TRL's GRPO card plus an "Adaptive allocation" section and the allocator's citation.

The card is TRL's own (``trl.trainer.base_trainer._BaseTrainer.create_model_card`` with its ``lm_model_card.md``
template); :func:`extend_model_card` splices two additions into its text: the "Adaptive allocation" section before
"## Citations", and the BibTeX of the allocator's paper (and DAPO's, for the token-level loss / clip-higher) after
TRL's GRPO citation. ``AdaptiveGRPOTrainer.create_model_card`` calls it; everything here works offline.

    trainer.train()
    trainer.push_to_hub()                         # model + card
    trainer.allocation_summary()                  # the card's numbers, as a dict
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import __version__
from ..allocation import TokenBudgeted, prompts_per_status
from ..hub import CARD_TAGS, status_table
from ..sampling import Procedure
from ..strategies import Strategy, registered_strategies, strategy

CARD_SECTION_TITLE = "## Adaptive allocation"


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


# Titles and authors from the papers themselves (Knapsack RL's and DAPO's author lists as the CERO paper's reference
# list gives them).
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
# Logged metrics summarised on the card: (log key, label).
CARD_METRICS = (
    ("allocation/effective_gradient_ratio", "effective-gradient ratio over trained completions, Knapsack RL Eq. 4"),
    ("allocation/effective_gradient_ratio_per_generated", "effective-gradient ratio over generated completions"),
    ("allocation/zero_gradient_ratio_all_correct", "zero-gradient ratio, all correct"),
    ("allocation/zero_gradient_ratio_all_wrong", "zero-gradient ratio, all wrong"),
    ("allocation/effective_prompt_ratio", "effective-prompt ratio"),
    ("allocation/count_mean", "completions per prompt, mean"),
    ("allocation/count_max", "completions per prompt, max"),
    ("allocation/prompts_skipped", "prompts skipped per batch"),
    ("allocation/solve_time_s", "allocator time per batch (s)"),
)


# ---------------------------------------------------------------------------------------------------------------------
# What the card reports
# ---------------------------------------------------------------------------------------------------------------------
def allocator_hyperparameters(allocator: Any) -> dict[str, Any]:
    """The allocator's constructor arguments (allocators are dataclasses), e.g. ``{"min_rollouts": 2, ...}``; under a
    token budget, the wrapped allocator's and ``token_budget``."""
    if isinstance(allocator, TokenBudgeted):
        return allocator_hyperparameters(allocator.allocator) | {"token_budget": allocator.token_budget}
    if dataclasses.is_dataclass(allocator):
        return {f.name: getattr(allocator, f.name) for f in dataclasses.fields(allocator) if f.init}
    return {k: v for k, v in vars(allocator).items() if not k.startswith("_")}


def allocation_summary(
    *,
    allocator: Any,
    args: Any,
    statistics: Any,
    training_prompts: Any,
    log_history: list[dict],
    global_step: int,
) -> dict[str, Any]:
    """Final allocation statistics of a run: budget, last and run-mean of the logged allocation metrics, and the
    prompt-status counts over the whole training set (from the last completed epoch's success rates).

    ``AdaptiveGRPOTrainer.allocation_summary()`` passes its own (``allocator``, ``args``, ``prompt_statistics``,
    ``training_prompts``, ``state.log_history``, ``state.global_step``); nothing is changed.
    """
    budget = int(args.generation_batch_size)
    logged = [log for log in log_history if CARD_METRICS[0][0] in log]
    metrics = {}
    for key, _ in CARD_METRICS:
        values = [float(log[key]) for log in logged if key in log and math.isfinite(float(log[key]))]
        if values:
            metrics[key] = {"last": values[-1], "mean": float(np.mean(values))}
    ids = training_prompts.known_ids(statistics)
    status = prompts_per_status(statistics.success_rates(ids))
    return {
        "allocator": allocator.name,
        "hyperparameters": allocator_hyperparameters(allocator),
        "budget": budget,
        "prompts_per_batch": budget // int(args.num_generations),
        "num_generations": int(args.num_generations),
        "global_step": int(global_step),
        "logged_batches": len(logged),
        "metrics": metrics,
        "num_prompts": len(ids),
        "epochs_closed": int(statistics.epoch),
        "posterior_half_life": statistics.posterior_half_life,  # the store's: "epoch" / "auto" resolved
        "prompt_status": status,
    }


def cited_papers(allocator_name: str, loss_type: str | None = None, epsilon_high: float | None = None) -> list[Paper]:
    """Papers to cite besides TRL's own (GRPO / DeepSeekMath and TRL): the allocator's, and DAPO's when its
    token-level loss (``loss_type="dapo"``) or clip-higher (``epsilon_high``) is used."""
    keys = list(_registered(allocator_name).papers)
    if loss_type == "dapo" or epsilon_high is not None:
        keys.append("dapo")
    return [PAPERS[key] for key in keys]


# ---------------------------------------------------------------------------------------------------------------------
# The "Adaptive allocation" section
# ---------------------------------------------------------------------------------------------------------------------
def _registered(name: str) -> Strategy:
    """The registered strategy ``name``; for an unregistered allocator object's name, one with no paper that reads
    nothing (the card then cites GRPO only)."""
    return strategy(name) if name in registered_strategies() else Strategy(name, procedure=Procedure)


def _format_value(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return repr(value) if isinstance(value, str) else str(value)


def _round_rows(name: str, args: Any, summary: Mapping[str, Any]) -> list[str]:
    """Card rows for the settings only some allocators read: the posterior, the pilot, dynamic sampling."""
    rows = []
    if "posterior" in _registered(name).reads:
        half_life = summary.get("posterior_half_life", getattr(args, "posterior_half_life", None))
        forgetting = "never forgets" if half_life is None else f"half-life {half_life} generation batches"
        rows.append(
            f"| posterior | Beta({getattr(args, 'posterior_prior_a', 1.0)}, {getattr(args, 'posterior_prior_b', 1.0)})"
            f" weak prior, {forgetting} |"
        )
    if getattr(args, "pilot_rollouts", 0) and _registered(name).is_allocator:  # pilot_commit: its own pilot
        rows.append(f"| pilot round | {args.pilot_rollouts} completions per prompt, then the rest by the knapsack |")
    if getattr(args, "dynamic_sampling", False):
        rows.append(f"| dynamic sampling | on, at most {args.dynamic_sampling_max_rounds} extra rounds per batch |")
    return rows


def _settings_rows(summary: Mapping[str, Any], args: Any) -> list[str]:
    """The "setting | value" rows: trainer, allocator and its paper, budget, success rule, loss."""
    name = summary["allocator"]
    papers = [PAPERS[key] for key in _registered(name).papers]
    origin = ", ".join(f"{p.name}, [arXiv {p.arxiv_id}]({p.url})" for p in papers) or "GRPO"
    hyper = ", ".join(f"`{k}={_format_value(v)}`" for k, v in summary["hyperparameters"].items()) or "none"
    extra = f"`{args.allocator_kwargs}`" if args.allocator_kwargs else "none"
    epsilon_high = args.epsilon_high if args.epsilon_high is not None else args.epsilon
    return [
        "| trainer | `AdaptiveGRPOTrainer` (subclass of TRL's `GRPOTrainer`) |",
        f"| allocator | `{name}` ({origin}) |",
        f"| allocator hyperparameters | {hyper} |",
        f"| `allocator_kwargs` given | {extra} |",
        f"| budget | {summary['budget']} completions per generation batch over {summary['prompts_per_batch']} prompts "
        f"({summary['num_generations']} per prompt on average) |",
        f"| success threshold | a completion succeeds when its total reward is >= {args.success_threshold} |",
        f"| equal prompt weighting | {args.equal_prompt_weighting} |",
        *_round_rows(name, args, summary),
        f"| loss | `loss_type={args.loss_type!r}`, clip epsilon {args.epsilon} / {epsilon_high}, beta {args.beta} |",
    ]


def _metric_lines(summary: Mapping[str, Any]) -> list[str]:
    """The logged allocation metrics, last and mean, as a table (or a line saying none was logged)."""
    if not summary["metrics"]:
        return ["No generation batch was logged."]
    lines = [
        f"Logged over {summary['logged_batches']} logging steps, up to optimizer step {summary['global_step']}:",
        "",
        "| metric | logged as | last | mean over the run |",
        "|---|---|---|---|",
    ]
    for key, label in CARD_METRICS:
        if key in summary["metrics"]:
            value = summary["metrics"][key]
            lines.append(f"| {label} | `{key}` | {value['last']:.4g} | {value['mean']:.4g} |")
    return lines


def _status_lines(summary: Mapping[str, Any], statistics_repo_id: str | None) -> list[str]:
    """The prompt-status counts, and where the per-prompt statistics are for a warm start."""
    where = "`prompt_statistics.json`"
    if statistics_repo_id:
        where += f" and in the dataset [`{statistics_repo_id}`](https://huggingface.co/datasets/{statistics_repo_id})"
    return [
        f"Prompt status over the {summary['num_prompts']} training prompts after {summary['epochs_closed']} "
        "completed epoch(s), from each prompt's last-epoch success rate p:",
        "",
        *status_table(summary["prompt_status"]),
        "",
        f"The per-prompt statistics (prompt id, prompt fingerprint, success rate, counts) are in {where}; "
        "`trl_adaptive.hub.load_statistics(...)` loads them as the warm start of a next run.",
    ]


def adaptive_card_section(summary: Mapping[str, Any], args: Any, statistics_repo_id: str | None = None) -> str:
    """The "Adaptive allocation" section of the model card, as Markdown (from :func:`allocation_summary`)."""
    lines = [
        CARD_SECTION_TITLE,
        "",
        f"This model was trained with `AdaptiveGRPOTrainer` (trl-adaptive {__version__}), TRL's `GRPOTrainer` with a",
        "per-prompt number of completions chosen by an allocator under a fixed budget per generation batch.",
        "",
        "| setting | value |",
        "|---|---|",
        *_settings_rows(summary, args),
        "",
        "### Final allocation statistics",
        "",
        *_metric_lines(summary),
        "",
        *_status_lines(summary, statistics_repo_id),
    ]
    return "\n".join(lines)


def citations_markdown(papers: Iterable[Paper]) -> str:
    """BibTeX blocks ("Cite X as:") in the style of TRL's card."""
    return "\n\n".join(f"Cite {paper.name} as:\n\n```bibtex\n{paper.bibtex}\n```" for paper in papers)


# ---------------------------------------------------------------------------------------------------------------------
# Splicing it into TRL's card
# ---------------------------------------------------------------------------------------------------------------------
def extend_model_card(
    card_path: str | os.PathLike[str], summary: dict[str, Any], args: Any, statistics_repo_id: str | None = None
):
    """Add the adaptive section (from :func:`allocation_summary`'s ``summary``), tags and citations to the card TRL
    just wrote at ``card_path``; returns the card.

    The section goes before TRL's "## Citations" heading, the BibTeX blocks before its "Cite TRL as:" line (both at
    the end of the text when the template lacks them, so nothing is dropped). Written again (every checkpoint), the
    previous section is replaced and the citations are not repeated.
    """
    from huggingface_hub import ModelCard

    card = ModelCard.load(card_path)
    section = adaptive_card_section(summary, args, statistics_repo_id)
    papers = cited_papers(summary["allocator"], args.loss_type, args.epsilon_high)
    text = _insert_before(_without_section(card.text), "## Citations", section)
    if papers and papers[0].bibtex.splitlines()[0] not in text:
        text = _insert_before(text, "Cite TRL as:", citations_markdown(papers))
    card.text = text
    tags = list(card.data.tags or [])
    card.data.tags = tags + [t for t in (*CARD_TAGS, f"allocator-{summary['allocator']}") if t not in tags]
    card.save(card_path)
    return card


def _without_section(text: str) -> str:
    """The card text without an adaptive section written earlier (up to the next "## " heading)."""
    if CARD_SECTION_TITLE not in text:
        return text
    start = text.index(CARD_SECTION_TITLE)
    end = text.find("\n## ", start + len(CARD_SECTION_TITLE))
    return text[:start] + text[end + 1 :] if end != -1 else text[:start]


def _insert_before(text: str, marker: str, insertion: str) -> str:
    at = text.find(marker)
    if at == -1:
        return text.rstrip("\n") + "\n\n" + insertion + "\n"
    return text[:at] + insertion + "\n\n" + text[at:]


__all__ = [
    "CARD_METRICS",
    "CARD_SECTION_TITLE",
    "PAPERS",
    "Paper",
    "adaptive_card_section",
    "allocation_summary",
    "allocator_hyperparameters",
    "cited_papers",
    "citations_markdown",
    "extend_model_card",
]

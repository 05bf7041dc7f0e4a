"""One benchmark run: a method trains the pretrained model through ``AdaptiveGRPOTrainer`` until it has generated a
fixed number of completion tokens, with its exact held-out accuracy recorded after every step.

Every run of a seed starts from the same weights, trains on the same prompts and draws from the same random streams
(TRL's seed); only the method differs. Generated tokens are counted where every generated completion passes: the
reward function (each procedure scores each completion it generates exactly once, rounds included), from the
``completion_ids`` TRL hands it, so a method that generates more than it trains pays for all of it.

A run's ``curve`` is a list of ``[generated_tokens, heldout_accuracy, step]``: before training, then after the step
that crosses each of ``checkpoints`` evenly spaced token counts up to ``token_budget``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from . import oracle, skills, task

# The tasks (modules with the same names: Prompts, reward, row_groups, MAX_COMPLETION_TOKENS, VOCAB, ...).
TASKS = {task.NAME: task, skills.NAME: skills}
# Held-out rows are also reported by the pretrained policy's own accuracy on them (exact, before training), so that a
# method that lets solved prompts drift, or gives up on hard ones, shows it.
DIFFICULTY_BINS = ((0.0, 0.2, "p0<0.2"), (0.2, 0.8, "0.2<=p0<0.8"), (0.8, 1.0 + 1e-9, "p0>=0.8"))

# Every method at the library's defaults, except what names the method and the token budget: a method that names none
# runs without one (generation_token_budget=None), so "bayes_knapsack" is the allocator as its paper has it and the
# library's default ("auto": "uniform" for knapsack and bayes_knapsack) is "bayes_knapsack_uniform_tokens".
# Comparable: same budget of completions per generation batch, same steps of training per batch, same optimiser.
TOKENS_PER_COMPLETION = "token_budget_per_completion"  # -> generation_token_budget = this x completions per step
METHODS: dict[str, dict] = {
    "uniform": {"allocator": "uniform"},
    "knapsack": {"allocator": "knapsack"},
    "bayes_knapsack": {"allocator": "bayes_knapsack"},
    "bayes_knapsack_pilot": {"allocator": "bayes_knapsack", "pilot_rollouts": 2},
    "bayes_knapsack_pilot_jeffreys": {
        "allocator": "bayes_knapsack",
        "pilot_rollouts": 2,
        "posterior_prior_a": 0.5,
        "posterior_prior_b": 0.5,
    },
    "reinforce_ada_est": {"allocator": "reinforce_ada_est"},
    "reinforce_ada_seq_balance": {"allocator": "reinforce_ada_seq_balance"},
    "cero": {"allocator": "cero"},
    "pilot_commit": {"allocator": "pilot_commit"},
    "uniform_dynamic_sampling": {"allocator": "uniform", "dynamic_sampling": True},
    # With a token budget of uniform's tokens per step: 8.6 per completion x the step's completions (uniform's runs
    # average 8.7 generated tokens per completion, 1,108 a step of 128), so these spend what uniform spends.
    "knapsack_token_budget": {"allocator": "knapsack", TOKENS_PER_COMPLETION: 8.6},
    "bayes_knapsack_token_budget": {"allocator": "bayes_knapsack", TOKENS_PER_COMPLETION: 8.6},
    # With generation_token_budget="uniform": each batch may expect what the uniform split of it expects (no number).
    "knapsack_uniform_tokens": {"allocator": "knapsack", "generation_token_budget": "uniform"},
    "bayes_knapsack_uniform_tokens": {"allocator": "bayes_knapsack", "generation_token_budget": "uniform"},
    # Prompt selection before rollout (a prompt source chooses WHICH prompts enter each batch; the pool's prompts that
    # are not chosen cost nothing), with the default allocator and with uniform's.
    "bayes_knapsack_uniform_tokens_mopps": {
        "allocator": "bayes_knapsack",
        "generation_token_budget": "uniform",
        "prompt_source": "mopps",
    },
    "bayes_knapsack_uniform_tokens_greso": {
        "allocator": "bayes_knapsack",
        "generation_token_budget": "uniform",
        "prompt_source": "greso",
    },
    # Which prompts and how many from one value function: the pool's prompts of highest E[Value], then the knapsack.
    "bayes_knapsack_uniform_tokens_value_pool": {
        "allocator": "bayes_knapsack",
        "generation_token_budget": "uniform",
        "prompt_source": "value_pool",
    },
    "uniform_mopps": {"allocator": "uniform", "prompt_source": "mopps"},
    "uniform_greso": {"allocator": "uniform", "prompt_source": "greso"},
    # GRESO under a floor of visits: a prompt skipped at one epoch's offer is generated at the next (a maintenance
    # signal for solved prompts, which regress when selection stops visiting them).
    "uniform_greso_revisit": {
        "allocator": "uniform",
        "prompt_source": "greso",
        "prompt_source_kwargs": {"revisit_epochs": 1},
    },
    # The oracle (oracle.py): every training prompt's TRUE success probability, scored before each generation batch.
    # Knapsack RL's allocation on it; pool selection by its true Value(G, p); both. The ceiling of the objective.
    "oracle_knapsack": {"allocator": "oracle_knapsack"},
    "oracle_pool": {"allocator": "uniform", "prompt_source": "oracle_pool"},
    "oracle_both": {"allocator": "oracle_knapsack", "prompt_source": "oracle_pool"},
    # Do no harm: a floor of 4 completions for every prompt (N_low = 4, not 2), so a solved prompt keeps a chance of
    # a mixed group (at p = 0.95: 19% instead of 10%); the default with it, and the oracle with it.
    "bayes_knapsack_uniform_tokens_floor4": {
        "allocator": "bayes_knapsack",
        "generation_token_budget": "uniform",
        "min_rollouts": 4,
    },
    "oracle_knapsack_floor4": {"allocator": "oracle_knapsack", "min_rollouts": 4},
    # Do no harm, second candidate: the posterior forgets in one epoch (evidence halves every epoch's generation
    # batches: 8 on the 128-prompt tasks, 32 on large_pool), so a solved prompt that drifts is seen to drift; the
    # oracle, which sees p fresh, keeps its solved prompts where the never-forgetting posterior let them slip. The
    # library's default since (posterior_half_life="auto"); the runs before it set None explicitly, as here.
    "bayes_knapsack_uniform_tokens_forget": {
        "allocator": "bayes_knapsack",
        "generation_token_budget": "uniform",
        "posterior_half_life": "epoch",
    },
}
ORACLE_NAMES = (oracle.OracleKnapsack.name, oracle.OraclePool.name)


def uses_oracle(method: str) -> bool:
    """Whether ``method`` reads the true success probability (its trainer needs oracle.TrueSuccessCallback)."""
    return bool({METHODS[method].get("allocator"), METHODS[method].get("prompt_source")} & set(ORACLE_NAMES))


@dataclass
class RunSettings:
    """What every run of the benchmark shares (the CPU defaults; bench_learning.py --gpu scales the batch)."""

    task: str = task.NAME  # a key of TASKS
    train_prompts: int = 128
    heldout_prompts: int = 1024
    prompts_per_step: int = 16  # prompts per generation batch
    num_generations: int = 8
    token_budget: int = 60_000
    checkpoints: int = 20
    max_steps: int = 400
    learning_rate: float = 5e-5
    device: str = "cpu"
    extra_config: dict = field(default_factory=dict)
    # Optimizer steps per generation batch (TRL's steps_per_generation): each step trains on 1/k of the batch.
    steps_per_generation: int = 1
    # The reversal task's string lengths, drawn uniformly from this list (repeats weight a length); empty: every
    # length equally (a difficulty mix, e.g. REGIMES["hard_mix"]: most prompts unsolved, a few solved).
    lengths: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.prompts_per_step * self.num_generations % self.steps_per_generation:
            raise ValueError(
                f"steps_per_generation={self.steps_per_generation} must divide the generation batch of "
                f"{self.prompts_per_step} x {self.num_generations} completions."
            )

    @property
    def train_batch(self) -> int:
        """Completions per optimizer step."""
        return self.prompts_per_step * self.num_generations // self.steps_per_generation


class TokenCountingReward:
    """A task's reward that also counts the completions and tokens it scores (all that is generated)."""

    def __init__(self, corpus=task):
        self.reward = corpus.reward
        self.__name__ = corpus.reward.__name__
        self.tokens = 0
        self.completions = 0

    def __call__(self, completions, answer, completion_ids, **kwargs):
        self.tokens += sum(len(ids) for ids in completion_ids)
        self.completions += len(completion_ids)
        return self.reward(completions, answer)


def group_labels(rows: list[dict], initial_accuracy: np.ndarray, corpus=task) -> dict[str, np.ndarray]:
    """Row indices of every reported group of held-out rows: the task's own (skill, length) and the initial
    difficulty bins of DIFFICULTY_BINS."""
    members: dict[str, list[int]] = {}
    for i, row in enumerate(rows):
        for label in corpus.row_groups(row):
            members.setdefault(label, []).append(i)
    for low, high, label in DIFFICULTY_BINS:
        members[label] = np.flatnonzero((initial_accuracy >= low) & (initial_accuracy < high)).tolist()
    return {label: np.asarray(rows_of, dtype=np.int64) for label, rows_of in sorted(members.items()) if rows_of}


def training_config(method: str, seed: int, settings: RunSettings, output_dir: str):
    from trl_adaptive import AdaptiveGRPOConfig

    batch = settings.prompts_per_step * settings.num_generations
    fields = {"generation_token_budget": None} | METHODS[method]
    if fields["allocator"] == "bayes_knapsack":  # as measured before "auto" (one epoch) became its default
        fields.setdefault("posterior_half_life", None)
    if uses_oracle(method):
        oracle.register()
    if TOKENS_PER_COMPLETION in fields:
        fields["generation_token_budget"] = fields.pop(TOKENS_PER_COMPLETION) * batch
    return AdaptiveGRPOConfig(
        output_dir=output_dir,
        **fields,
        num_generations=settings.num_generations,
        generation_batch_size=batch,
        per_device_train_batch_size=settings.train_batch,
        max_completion_length=TASKS[settings.task].MAX_COMPLETION_TOKENS,
        temperature=1.0,
        beta=0.0,
        learning_rate=settings.learning_rate,
        lr_scheduler_type="constant",
        warmup_steps=0,
        max_steps=settings.max_steps,
        seed=seed,
        data_seed=seed,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        disable_tqdm=True,
        use_cpu=settings.device == "cpu",
        bf16=False,
        **settings.extra_config,
    )


def run(method: str, seed: int, settings: RunSettings, model_path: str, output_dir: str) -> dict:
    """Train ``method`` from ``model_path`` on seed ``seed``'s prompts until ``token_budget``; the run's record."""
    import torch
    from datasets import Dataset
    from transformers import AutoTokenizer, PrinterCallback, TrainerCallback

    from trl_adaptive import AdaptiveGRPOTrainer

    corpus = TASKS[settings.task]
    mix = {"lengths": settings.lengths} if settings.lengths else {}
    train = corpus.Prompts.draw(settings.train_prompts, seed=1000 + seed, **mix).rows
    heldout = corpus.Prompts.draw(settings.heldout_prompts, seed=10**6 + seed, **mix).rows
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    heldout_batches = task.scoring_batches(tokenizer, heldout)  # tokenized once, scored at every checkpoint
    reward = TokenCountingReward(corpus)
    curve: list[list[float]] = []
    groups: dict[str, np.ndarray] = {}
    group_curves: dict[str, list[float]] = {}

    def evaluate(model, tokens: int, step: int) -> None:
        """Held-out accuracy, overall and per group, as the curve's next point."""
        per_row = task.expected_accuracy(model, tokenizer, heldout, heldout_batches)
        if not groups:  # the first evaluation is the pretrained policy's: it defines the difficulty bins
            groups.update(group_labels(heldout, per_row, corpus))
        curve.append([tokens, float(per_row.mean()), step])
        for label, rows_of in groups.items():
            group_curves.setdefault(label, []).append(float(per_row[rows_of].mean()))

    checkpoints = list(np.linspace(0, settings.token_budget, settings.checkpoints + 1)[1:])

    class HeldOut(TrainerCallback):
        """Exact held-out accuracy after the step that crosses each token checkpoint; stop at the budget."""

        def on_step_end(self, args, state, control, model=None, **kwargs):
            if checkpoints and reward.tokens >= checkpoints[0]:
                evaluate(model, reward.tokens, state.global_step)
                while checkpoints and reward.tokens >= checkpoints[0]:
                    checkpoints.pop(0)
            if not checkpoints:
                control.should_training_stop = True

    torch.manual_seed(seed)
    trainer = AdaptiveGRPOTrainer(
        model=model_path,
        reward_funcs=reward,
        args=training_config(method, seed, settings, output_dir),
        train_dataset=Dataset.from_list(train),
    )
    trainer.remove_callback(PrinterCallback)  # the per-step dict of every metric, 80 runs long
    if uses_oracle(method):
        trainer.add_callback(oracle.TrueSuccessCallback(tokenizer, train, settings.steps_per_generation))
    trainer.add_callback(HeldOut())
    evaluate(trainer.model, 0, 0)
    start = time.perf_counter()
    trainer.train()
    seconds = time.perf_counter() - start
    logs = [h for h in trainer.state.log_history if "allocation/effective_gradient_ratio" in h]
    ratio = [h["allocation/effective_gradient_ratio"] for h in logs]
    rounds_generated = sum(h.get("rounds/generated", 0.0) for h in logs)
    return {
        "method": method,
        "seed": seed,
        "curve": curve,
        "group_curves": group_curves,  # {group: accuracy at each curve point}
        "group_sizes": {label: len(rows_of) for label, rows_of in groups.items()},
        "steps": trainer.state.global_step,
        "generated_tokens": reward.tokens,
        "generated_completions": reward.completions,
        "trained_completions": trainer.state.global_step * settings.train_batch,
        "final_heldout_accuracy": curve[-1][1],
        "effective_gradient_ratio": float(np.mean(ratio)) if ratio else None,
        "train_seconds": seconds,
        "reached_token_budget": reward.tokens >= settings.token_budget,
        "rounds_generated": rounds_generated,
    }

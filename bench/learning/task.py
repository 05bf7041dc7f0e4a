"""The task: reverse a string of letters. Verifiable, a spread of difficulty, lengths that differ, and a policy that
RL can improve in minutes on a CPU.

The model is pretrained (model.py) on a corpus in which a prompt of ``k`` letters is followed by its reversal with
probability ``CORRECT_SHARE[k]`` and by a wrong answer otherwise, so the pretrained policy solves short strings almost
always, mid-length ones sometimes and long ones almost never: some prompts solved, many in between, some unsolved.
The wrong answer differs by length, so what RL must learn differs too (a skill per difficulty, with partial transfer):

- ``k <= WRONG_COPY_MAX``: the string copied forwards (the first generated letter decides);
- longer: the reversal followed by the string again (the decision is to stop after ``k`` letters), so failed
  completions are twice as long as correct ones, as failed chains of thought are longer in real runs.

Held-out prompts are drawn from the same distribution and never trained on; success on them rises only by learning
what transfers. Reward: 1.0 when the completion is exactly the reversal, else 0.0. Because exactly one token sequence
is correct (the reversal, then end of sequence), a policy's expected accuracy at temperature 1 is the probability of
that sequence, which ``expected_accuracy`` computes in one forward pass: held-out accuracy without sampling noise.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

NAME = "reversal"
LETTERS = "abcdefghij"
PAD, EOS, EQUALS = 0, 1, 2
VOCAB = {"<pad>": PAD, "<eos>": EOS, "=": EQUALS, **{c: i + 3 for i, c in enumerate(LETTERS)}}
MIN_LETTERS, MAX_LETTERS = 1, 10
# Pretraining share of correct answers by string length: the initial policy's success rate (measured close to it).
CORRECT_SHARE = {1: 0.97, 2: 0.93, 3: 0.85, 4: 0.7, 5: 0.5, 6: 0.3, 7: 0.15, 8: 0.06, 9: 0.02, 10: 0.005}
WRONG_COPY_MAX = 5
# Longest completion: the wrong answer of a 10-letter string (20 letters) and the end-of-sequence token.
MAX_COMPLETION_TOKENS = 2 * MAX_LETTERS + 1


@dataclass(frozen=True)
class Prompts:
    """Prompts as rows for a ``datasets.Dataset``: ``prompt`` ("abc="), ``answer`` ("cba"), ``letters`` (k)."""

    rows: list[dict]

    @classmethod
    def draw(cls, count: int, seed: int, lengths: list[int] | None = None) -> Prompts:
        """``count`` prompts, lengths uniform in [MIN_LETTERS, MAX_LETTERS] (or drawn uniformly from the list
        ``lengths``, repeats weighting a length), letters uniform, from ``seed``."""
        rng = np.random.default_rng(seed)
        if lengths:
            lengths = rng.choice(np.asarray(lengths, dtype=np.int64), size=count)
        else:
            lengths = rng.integers(MIN_LETTERS, MAX_LETTERS + 1, size=count)
        rows = []
        for k in lengths:
            text = "".join(rng.choice(list(LETTERS), size=int(k)))
            rows.append({"prompt": text + "=", "answer": text[::-1], "letters": int(k)})
        return cls(rows)


def reward_reversal(completions: list[str], answer: list[str], **kwargs) -> list[float]:
    """1.0 for exactly the reversal, else 0.0."""
    return [1.0 if completion == expected else 0.0 for completion, expected in zip(completions, answer, strict=True)]


reward = reward_reversal  # the name every task module gives its reward (runs.py)


def corpus_key() -> dict:
    """Everything of the corpus that shapes the pretrained weights (model.py's cache key)."""
    return {"share": CORRECT_SHARE, "copy_max": WRONG_COPY_MAX, "letters": LETTERS}


def row_groups(row: dict) -> list[str]:
    """The groups a held-out row's accuracy is reported in (besides its initial-difficulty bin): its length, the
    skill this task ties to it (copying up to WRONG_COPY_MAX letters, stopping after that)."""
    return [f"letters={row['letters']}"]


def pretraining_batch(rng: np.random.Generator, size: int) -> tuple[np.ndarray, np.ndarray]:
    """``size`` pretraining sequences as token ids (right-padded) and a 0/1 mask of the completion tokens to learn."""
    lengths = rng.integers(MIN_LETTERS, MAX_LETTERS + 1, size=size)
    width = MAX_LETTERS + 1 + MAX_COMPLETION_TOKENS
    ids = np.full((size, width), PAD, dtype=np.int64)
    mask = np.zeros((size, width), dtype=np.int64)
    correct = rng.random(size) < np.array([CORRECT_SHARE[int(k)] for k in lengths])
    letters = rng.integers(3, 3 + len(LETTERS), size=(size, MAX_LETTERS))
    for row, (k, right) in enumerate(zip(lengths, correct, strict=True)):
        text = letters[row, :k]
        if right:
            completion = text[::-1]
        elif k <= WRONG_COPY_MAX:
            completion = text
        else:
            completion = np.concatenate([text[::-1], text])
        sequence = np.concatenate([text, [EQUALS], completion, [EOS]])
        ids[row, : len(sequence)] = sequence
        mask[row, k + 1 : len(sequence)] = 1
    return ids, mask


def scoring_batches(tokenizer, rows: list[dict], batch_size: int = 512) -> list[tuple]:
    """``rows`` as (ids, attention mask, answer-token mask) tensors of at most ``batch_size`` rows, right-padded: each
    row is its prompt, its reversal and end of sequence. Built once per held-out set, read at every evaluation."""
    import torch

    batches = []
    for start in range(0, len(rows), batch_size):
        chunk = rows[start : start + batch_size]
        prompts = [tokenizer(r["prompt"])["input_ids"] for r in chunk]
        answers = [tokenizer(r["answer"])["input_ids"] + [tokenizer.eos_token_id] for r in chunk]
        lengths = torch.tensor([len(p) + len(a) for p, a in zip(prompts, answers, strict=True)])
        width = int(lengths.max())
        ids = torch.full((len(chunk), width), tokenizer.pad_token_id, dtype=torch.long)
        targets = torch.zeros((len(chunk), width), dtype=torch.bool)
        for row, (p, a) in enumerate(zip(prompts, answers, strict=True)):
            ids[row, : len(p) + len(a)] = torch.tensor(p + a)
            targets[row, len(p) : len(p) + len(a)] = True
        attention = (torch.arange(width)[None, :] < lengths[:, None]).long()
        batches.append((ids, attention, targets))
    return batches


def expected_accuracy(model, tokenizer, rows: list[dict], batches: list[tuple] | None = None) -> np.ndarray:
    """Per row, the probability that the model samples exactly the reversal then end of sequence (temperature 1).

    This is the expected reward of ``reward_reversal`` under the policy, computed exactly (teacher forcing), so a
    held-out evaluation has no sampling noise. ``tests/test_bench_learning.py`` checks it against sampling.
    ``batches``: ``scoring_batches(tokenizer, rows)`` when the same rows are scored again and again.
    """
    import torch

    probabilities = []
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    with torch.no_grad():
        for ids, attention, targets in batches or scoring_batches(tokenizer, rows):
            ids = ids.to(device)
            logits = model(input_ids=ids, attention_mask=attention.to(device)).logits[:, :-1].float()
            token_logprobs = torch.log_softmax(logits, -1).gather(-1, ids[:, 1:, None])[..., 0]
            total = (token_logprobs * targets[:, 1:].to(device)).sum(1)
            probabilities.append(total.exp().cpu().numpy())
    model.train(was_training)
    return np.concatenate(probabilities)

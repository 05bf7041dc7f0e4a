"""Accuracy of a model on arithmetic prompts: k sampled answers per prompt, scored by the training reward."""

from __future__ import annotations

from typing import Any

import numpy as np

from .arithmetic import LEVELS, reward_exact_answer


def solve_counts(
    model: Any,
    tokenizer: Any,
    rows: list[dict],
    samples: int = 8,
    temperature: float = 0.7,
    max_new_tokens: int = 8,
    seed: int = 0,
    batch_size: int = 128,
    desc: str = "eval",
) -> np.ndarray:
    """Correct answers out of ``samples`` per row (greedy when ``temperature == 0``, then ``samples`` must be 1)."""
    import torch
    from tqdm.auto import tqdm

    if temperature == 0 and samples != 1:
        raise ValueError("greedy decoding gives one answer per prompt: use samples=1 with temperature=0.")
    jobs = [i for i in range(len(rows)) for _ in range(samples)]
    correct = np.zeros(len(rows), dtype=np.int64)
    padding_side, tokenizer.padding_side = tokenizer.padding_side, "left"
    was_training = model.training
    model.eval()
    torch.manual_seed(seed)
    try:
        for start in tqdm(range(0, len(jobs), batch_size), desc=desc, leave=False):
            chunk = jobs[start : start + batch_size]
            enc = tokenizer([rows[i]["prompt"] for i in chunk], return_tensors="pt", padding=True).to(model.device)
            sampling = (
                {"do_sample": True, "temperature": temperature, "top_k": 0} if temperature else {"do_sample": False}
            )
            with torch.no_grad():
                out = model.generate(
                    **enc, max_new_tokens=max_new_tokens, pad_token_id=tokenizer.pad_token_id, **sampling
                )
            texts = tokenizer.batch_decode(out[:, enc["input_ids"].shape[1] :], skip_special_tokens=True)
            rewards = reward_exact_answer(texts, answer=[rows[i]["answer"] for i in chunk])
            np.add.at(correct, chunk, np.asarray(rewards, dtype=np.int64))
    finally:
        tokenizer.padding_side = padding_side
        model.train(was_training)
    return correct


def accuracy_by_level(rows: list[dict], correct: np.ndarray, samples: int) -> dict[str, float]:
    """Mean accuracy (avg@samples) per level and over all rows."""
    rate = correct / samples
    out = {"all": float(rate.mean())}
    for level in LEVELS:
        mask = np.array([r["level"] == level for r in rows])
        if mask.any():
            out[level] = float(rate[mask].mean())
    return out

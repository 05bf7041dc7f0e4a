"""The benchmark's model: a 4-layer Llama (0.86M parameters) and a character-level tokenizer, pretrained on the task's
corpus (task.py) deterministically from a seed and cached, then loaded by path like any user's model.

    path = pretrained_model()   # first call: about 2-3 minutes on 2 CPU cores; later calls: the cached folder

The cache key is a digest of everything that shapes the weights (corpus, architecture, optimisation, seed), so a
change to any of them builds a new folder instead of reusing a stale one. The folder is written to a temporary name
and renamed when complete: an interrupted build leaves nothing that looks finished.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from . import task

DEFAULT_CACHE = Path(os.environ.get("TRL_ADAPTIVE_CACHE", Path.home() / ".cache" / "trl_adaptive"))


@dataclass(frozen=True)
class Pretraining:
    """What shapes the pretrained weights (all of it goes into the cache key)."""

    hidden_size: int = 128
    layers: int = 4
    heads: int = 4
    steps: int = 700
    batch_size: int = 256
    learning_rate: float = 3e-3
    warmup_steps: int = 50
    seed: int = 0

    def key(self, corpus=task) -> str:
        text = json.dumps({"pretraining": asdict(self), "corpus": corpus.corpus_key(), "version": 1}, sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:12]


def build_tokenizer(corpus=task):
    """One token per character of ``corpus.VOCAB`` (a task module: task.py, skills.py): letters, '=', end of
    sequence and padding (left, as TRL generates)."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    characters = Tokenizer(models.WordLevel(corpus.VOCAB, unk_token=None))
    characters.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    characters.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(
        tokenizer_object=characters, eos_token="<eos>", pad_token="<pad>", padding_side="left"
    )


def build_model(spec: Pretraining, corpus=task):
    import torch
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

    torch.manual_seed(spec.seed)
    config = LlamaConfig(
        vocab_size=len(corpus.VOCAB),
        hidden_size=spec.hidden_size,
        intermediate_size=3 * spec.hidden_size,
        num_hidden_layers=spec.layers,
        num_attention_heads=spec.heads,
        num_key_value_heads=spec.heads,
        max_position_embeddings=64,
        tie_word_embeddings=True,
        eos_token_id=corpus.EOS,
        pad_token_id=corpus.PAD,
        bos_token_id=None,
    )
    model = LlamaForCausalLM(config)
    model.generation_config = GenerationConfig(eos_token_id=corpus.EOS, pad_token_id=corpus.PAD, bos_token_id=None)
    return model


def pretrain(spec: Pretraining, log_every: int = 100, corpus=task):
    """The model after ``spec.steps`` AdamW steps of next-token loss on ``corpus``'s completion tokens (cosine
    schedule)."""
    import torch

    torch.manual_seed(spec.seed)
    model = build_model(spec, corpus)
    optimizer = torch.optim.AdamW(model.parameters(), lr=spec.learning_rate, weight_decay=0.0)
    rng = np.random.default_rng(spec.seed)
    for step in range(spec.steps):
        warmup = min(1.0, (step + 1) / spec.warmup_steps)
        for group in optimizer.param_groups:
            group["lr"] = spec.learning_rate * warmup * 0.5 * (1 + math.cos(math.pi * step / spec.steps))
        ids, mask = corpus.pretraining_batch(rng, spec.batch_size)
        ids, mask = torch.from_numpy(ids), torch.from_numpy(mask)
        width = int((ids != corpus.PAD).sum(1).max())  # drop the columns that are padding in every row
        ids, mask = ids[:, :width], mask[:, :width]
        loss = model(input_ids=ids, attention_mask=(ids != corpus.PAD).long(), labels=ids.masked_fill(mask == 0, -100))
        optimizer.zero_grad()
        loss.loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        if log_every and step % log_every == 0:
            print(f"[pretrain] step {step}/{spec.steps}: loss {loss.loss.item():.3f}", flush=True)
    return model


def pretrained_model(spec: Pretraining | None = None, cache_dir: str | Path | None = None, corpus=task) -> Path:
    """The folder of the pretrained model and tokenizer for ``spec`` on ``corpus``'s task, built on first use."""
    spec = spec or Pretraining()
    target = Path(cache_dir or DEFAULT_CACHE) / f"{corpus.NAME}-llama-{spec.key(corpus)}"
    if (target / "config.json").is_file():
        return target
    model = pretrain(spec, corpus=corpus)
    staging = target.with_name(target.name + f".partial-{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    model.save_pretrained(staging)
    build_tokenizer(corpus).save_pretrained(staging)
    (staging / "pretraining.json").write_text(json.dumps(asdict(spec), indent=1))
    staging.rename(target)
    return target

"""The transformers-based generation engine behind the stand-in vLLM server (see ``server.py`` and docs/serving.md).

``SamplingParams`` validates a ``/v1/completions`` payload like vLLM, ``parse_prompts`` normalises its ``prompt``,
and ``StandInEngine`` decodes batches on CPU with vLLM's sampling semantics and processed logprobs. ``echo_completion``
is the deterministic completion of ``mode="echo"``. The engine is not thread-safe: the server serialises calls.
``HTTPError`` lives here because request validation raises it; the server answers it as a 4xx.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import torch

from .._validate import is_int, is_number

_SAMPLING_EPS = 1e-5  # vLLM treats temperatures below this as greedy
# Fields a real vLLM accepts but the stand-in cannot honour: rejected loudly (400) rather than silently ignored.
_UNSUPPORTED = ("stream", "echo", "prompt_logprobs", "structured_outputs", "guided_regex", "guided_json", "suffix")
# Fields read by ``SamplingParams.from_payload``; anything else is ignored (as vLLM does) and listed in the log.
_KNOWN = {
    "model", "prompt", "n", "max_tokens", "temperature", "top_p", "top_k", "min_p", "repetition_penalty",
    "presence_penalty", "frequency_penalty", "logprobs", "seed", "stop_token_ids", "ignore_eos", "min_tokens",
    "return_token_ids", "return_tokens_as_token_ids", "stop", "best_of", "user", "skip_special_tokens",
}  # fmt: skip


class HTTPError(Exception):
    """An error answered with ``status`` (always 4xx) and a JSON message the client shows to the user."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status, self.message = status, message


def _number(payload: dict[str, Any], key: str, default: float, low: float, high: float = math.inf) -> float:
    value = payload.get(key, default)
    value = default if value is None else value
    if not is_number(value) or not low <= value <= high:
        raise HTTPError(400, f"{key} must be a number in [{low}, {high}], got {value!r}")
    return float(value)


def _optional_integer(payload: dict[str, Any], key: str, low: int) -> int | None:
    value = payload.get(key)
    if value is not None and (not is_int(value) or value < low):
        raise HTTPError(400, f"{key} must be an integer >= {low}, got {value!r}")
    return value


def _integer(payload: dict[str, Any], key: str, default: int, low: int) -> int:
    value = _optional_integer(payload, key, low)
    return default if value is None else value


@dataclass(frozen=True)
class SamplingParams:
    """The ``/v1/completions`` fields the stand-in honours, validated like vLLM (bad values are a 400)."""

    n: int = 1
    max_tokens: int = 16
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    min_p: float = 0.0
    repetition_penalty: float = 1.0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    logprobs: int | None = None
    seed: int | None = None
    min_tokens: int = 0
    stop_token_ids: tuple[int, ...] = ()
    ignore_eos: bool = False
    return_token_ids: bool = False
    return_tokens_as_token_ids: bool = False
    ignored: tuple[str, ...] = ()

    @classmethod
    def from_payload(cls, payload: dict[str, Any]) -> SamplingParams:
        for key in _UNSUPPORTED:
            if payload.get(key) not in (None, False):
                raise HTTPError(400, f"`{key}` is not supported by the stand-in vLLM server")
        if payload.get("stop"):
            raise HTTPError(400, "`stop` strings are not supported by the stand-in vLLM server; use stop_token_ids")
        n = _integer(payload, "n", 1, 1)
        if payload.get("best_of") not in (None, n):
            raise HTTPError(400, "`best_of` other than n is not supported by the stand-in vLLM server")
        top_k = _integer(payload, "top_k", 0, -1)
        stop_ids = payload.get("stop_token_ids") or []
        if not isinstance(stop_ids, list) or not all(is_int(t) for t in stop_ids):
            raise HTTPError(400, "stop_token_ids must be a list of integers")
        return cls(
            n=n,
            max_tokens=_integer(payload, "max_tokens", 16, 1),
            temperature=_number(payload, "temperature", 1.0, 0.0),
            top_p=_number(payload, "top_p", 1.0, 1e-9, 1.0),
            top_k=0 if top_k == -1 else top_k,
            min_p=_number(payload, "min_p", 0.0, 0.0, 1.0),
            repetition_penalty=_number(payload, "repetition_penalty", 1.0, 1e-9),
            presence_penalty=_number(payload, "presence_penalty", 0.0, -2.0, 2.0),
            frequency_penalty=_number(payload, "frequency_penalty", 0.0, -2.0, 2.0),
            logprobs=_optional_integer(payload, "logprobs", 0),
            seed=_optional_integer(payload, "seed", -(2**63)),
            min_tokens=_integer(payload, "min_tokens", 0, 0),
            stop_token_ids=tuple(stop_ids),
            ignore_eos=bool(payload.get("ignore_eos", False)),
            return_token_ids=bool(payload.get("return_token_ids", False)),
            return_tokens_as_token_ids=bool(payload.get("return_tokens_as_token_ids", False)),
            ignored=tuple(sorted(set(payload) - _KNOWN)),
        )


def echo_completion(
    prompt_ids: list[int], max_tokens: int, eos_token_id: int, stop_ids: Iterable[int] = ()
) -> list[int]:
    """The completion ``mode="echo"`` returns: the prompt's last ``max_tokens - 1`` tokens newest-first, then EOS.

    Tokens in ``stop_ids`` (EOS and other stop tokens, e.g. ``<|im_end|>`` of earlier chat turns) are skipped first,
    so the echo never ends early. Being a pure function of the prompt, any completion handed to the wrong prompt (a
    misaligned group, a wrong rank slice) is detectable; copies of one prompt get identical completions.
    """
    stops = set(stop_ids) | {eos_token_id}
    kept = [token for token in prompt_ids if token not in stops]
    tail = kept[max(0, len(kept) - (max_tokens - 1)) :] if max_tokens > 1 else []
    return [*reversed(tail), eos_token_id]


@dataclass
class Completion:
    """One generated sequence: token ids, the processed logprob of each, top-N alternatives, why it ended."""

    token_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    top_logprobs: list[list[tuple[int, float]]] = field(default_factory=list)
    finish_reason: str = "length"


@dataclass
class _Row:
    prompt: list[int]
    generator: torch.Generator | None  # per-request seed (vLLM: child i of a seeded request uses seed + i)
    forced: list[int] | None  # echo mode: the tokens this row must emit


class StandInEngine:
    """Batched CPU decoding with a transformers causal LM, reproducing vLLM's sampling semantics that TRL relies on.

    Processing order follows vLLM V1: penalties, temperature, min-p, top-k, top-p; the returned logprobs are the
    log-softmax of that *processed* distribution (``--logprobs-mode processed_logprobs``), which is what TRL's
    importance-sampling correction expects.
    """

    def __init__(self, model: Any, tokenizer: Any | None, mode: str, max_batch_size: int, seed: int) -> None:
        self.model, self.tokenizer, self.mode, self.max_batch_size = model, tokenizer, mode, max_batch_size
        forward_params = inspect.signature(model.forward).parameters
        # transformers 5.24 renamed the KV-cache argument ``past_key_values`` -> ``cache``.
        self._cache_arg = "cache" if "cache" in forward_params else "past_key_values"
        self._keep_last = "logits_to_keep" in forward_params
        config = model.config
        self.vocab_size = int(config.vocab_size)
        self.max_model_len = int(getattr(config, "max_position_embeddings", 0) or 0) or None
        eos = [getattr(tokenizer, "eos_token_id", None), config.eos_token_id]
        eos.append(getattr(getattr(model, "generation_config", None), "eos_token_id", None))
        flat = [i for e in eos for i in (e if isinstance(e, list) else [e]) if isinstance(i, int)]
        if not flat:
            raise ValueError("the model has no eos_token_id; the stand-in needs one to stop and to echo")
        self.eos_token_id, self.stop_ids = flat[0], frozenset(flat)
        pad = getattr(tokenizer, "pad_token_id", None)
        self.pad_token_id = pad if pad is not None else (config.pad_token_id or self.eos_token_id)
        self._rng = torch.Generator().manual_seed(seed)

    # ------------------------------------------------------------------------------------------- tokens and text
    def tokenize(self, text: str) -> list[int]:
        if self.tokenizer is None:
            raise HTTPError(400, "string prompts need a tokenizer; this server was built without one")
        return list(self.tokenizer(text, add_special_tokens=True)["input_ids"])

    def decode(self, token_ids: list[int]) -> str:
        return "" if self.tokenizer is None else self.tokenizer.decode(token_ids, skip_special_tokens=True)

    def token_name(self, token_id: int, as_ids: bool) -> str:
        if as_ids or self.tokenizer is None:
            return f"token_id:{token_id}"
        return self.tokenizer.decode([token_id])

    def check_lengths(self, prompts: list[list[int]], max_tokens: int) -> None:
        for prompt in prompts:
            if not prompt:
                raise HTTPError(400, "The decoder prompt cannot be empty")
            if any(not 0 <= token < self.vocab_size for token in prompt):
                raise HTTPError(400, f"token id out of vocabulary (size {self.vocab_size})")
            if self.max_model_len is not None and len(prompt) + max_tokens > self.max_model_len:
                raise HTTPError(400, f"prompt ({len(prompt)}) + max_tokens ({max_tokens}) exceed {self.max_model_len}")

    # ------------------------------------------------------------------------------------------- generation
    def generate(self, prompts: list[list[int]], params: SamplingParams) -> list[Completion]:
        """``len(prompts) * n`` completions, prompt-major (all children of prompt 0, then prompt 1, ...)."""
        stops = self.stop_ids | set(params.stop_token_ids)
        rows = [
            _Row(
                prompt,
                None if params.seed is None else torch.Generator().manual_seed(params.seed + child),
                echo_completion(prompt, params.max_tokens, self.eos_token_id, stops) if self.mode == "echo" else None,
            )
            for prompt in prompts
            for child in range(params.n)
        ]
        completions: list[Completion] = []
        with torch.no_grad():
            for start in range(0, len(rows), self.max_batch_size):
                completions.extend(self._decode(rows[start : start + self.max_batch_size], params))
        return completions

    def _forward(
        self, ids: torch.Tensor, mask: torch.Tensor, positions: torch.Tensor, cache: Any
    ) -> tuple[torch.Tensor, Any]:
        kwargs: dict[str, Any] = {"input_ids": ids, "attention_mask": mask, "position_ids": positions}
        kwargs["use_cache"] = True
        if cache is not None:
            kwargs[self._cache_arg] = cache
        if self._keep_last:
            kwargs["logits_to_keep"] = 1
        out = self.model(**kwargs)
        return out.logits[:, -1, :].float(), getattr(out, self._cache_arg)

    def _decode(self, rows: list[_Row], params: SamplingParams) -> list[Completion]:
        width = max(len(row.prompt) for row in rows)
        ids = torch.full((len(rows), width), self.pad_token_id, dtype=torch.long)
        mask = torch.zeros((len(rows), width), dtype=torch.long)
        for i, row in enumerate(rows):  # left padding, so every row's next token sits in the last column
            ids[i, width - len(row.prompt) :] = torch.tensor(row.prompt)
            mask[i, width - len(row.prompt) :] = 1
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        logits, cache = self._forward(ids, mask, positions, None)
        counts = torch.zeros_like(logits)  # output-token counts, for the penalties
        seen = torch.zeros_like(logits, dtype=torch.bool)
        if params.repetition_penalty != 1.0:  # vLLM's repetition penalty covers prompt tokens too
            for i, row in enumerate(rows):
                seen[i, torch.tensor(row.prompt)] = True
        stops = sorted(self.stop_ids | set(params.stop_token_ids))
        results = [Completion() for _ in rows]
        done = [False] * len(rows)
        for step in range(params.max_tokens):
            if step < params.min_tokens and self.mode != "echo":
                logits[:, stops] = -math.inf
            logprobs = self._process(logits, params, counts, seen | (counts > 0))
            chosen = self._choose(logprobs, rows, step, params)
            chosen_logprobs = logprobs.gather(1, chosen[:, None])[:, 0].tolist()
            top = torch.topk(logprobs, min(params.logprobs, logprobs.shape[-1])) if params.logprobs else None
            for i, token in enumerate(chosen.tolist()):
                if done[i]:
                    continue
                result = results[i]
                result.token_ids.append(token)
                result.logprobs.append(chosen_logprobs[i])
                if top is not None:
                    result.top_logprobs.append(list(zip(top.indices[i].tolist(), top.values[i].tolist(), strict=True)))
                else:
                    result.top_logprobs.append([])
                if self._stops(rows[i], step, token, params):
                    done[i], result.finish_reason = True, "stop"
            if all(done) or step == params.max_tokens - 1:
                break
            counts.scatter_add_(1, chosen[:, None], torch.ones_like(logits[:, :1]))
            mask = torch.cat([mask, torch.ones_like(mask[:, :1])], dim=1)
            positions = positions[:, -1:] + 1
            logits, cache = self._forward(chosen[:, None], mask, positions, cache)
        return results

    def _stops(self, row: _Row, step: int, token: int, params: SamplingParams) -> bool:
        if row.forced is not None:
            return step == len(row.forced) - 1
        if token in params.stop_token_ids:
            return True
        return token in self.stop_ids and not params.ignore_eos

    @staticmethod
    def _process(
        logits: torch.Tensor, params: SamplingParams, counts: torch.Tensor, seen: torch.Tensor
    ) -> torch.Tensor:
        """Log-probabilities after penalties, temperature, min-p, top-k and top-p (vLLM's processed logprobs)."""
        if params.repetition_penalty != 1.0:
            penalised = torch.where(logits > 0, logits / params.repetition_penalty, logits * params.repetition_penalty)
            logits = torch.where(seen, penalised, logits)
        if params.frequency_penalty or params.presence_penalty:
            logits = logits - params.frequency_penalty * counts - params.presence_penalty * (counts > 0).float()
        if params.temperature >= _SAMPLING_EPS:
            logits = logits / params.temperature
            if params.min_p > 0:
                probs = logits.softmax(-1)
                logits = logits.masked_fill(probs < params.min_p * probs.max(-1, keepdim=True).values, -math.inf)
            if 0 < params.top_k < logits.shape[-1]:
                kth = torch.topk(logits, params.top_k).values[:, -1:]
                logits = logits.masked_fill(logits < kth, -math.inf)
            if params.top_p < 1.0:
                ordered, order = logits.sort(-1, descending=True)
                probs = ordered.softmax(-1)
                drop = probs.cumsum(-1) - probs > params.top_p  # keeps the token that crosses top_p, and the first
                logits = logits.scatter(1, order, ordered.masked_fill(drop, -math.inf))
        return logits.log_softmax(-1)

    def _choose(self, logprobs: torch.Tensor, rows: list[_Row], step: int, params: SamplingParams) -> torch.Tensor:
        if self.mode == "echo":
            return torch.tensor([row.forced[min(step, len(row.forced) - 1)] for row in rows])  # type: ignore[index]
        if params.temperature < _SAMPLING_EPS:
            return logprobs.argmax(-1)
        probs = logprobs.exp()
        chosen = torch.empty(len(rows), dtype=torch.long)
        shared = [i for i, row in enumerate(rows) if row.generator is None]
        if shared:  # unseeded rows draw from the engine's generator, like vLLM's engine-level seed
            chosen[shared] = torch.multinomial(probs[shared], 1, generator=self._rng)[:, 0]
        for i, row in enumerate(rows):
            if row.generator is not None:
                chosen[i] = torch.multinomial(probs[i], 1, generator=row.generator)[0]
        return chosen


def parse_prompts(prompt: Any, engine: StandInEngine) -> list[list[int]]:
    """OpenAI ``prompt``: a string, a list of strings, one token list, or a list of token lists."""
    if isinstance(prompt, str):
        return [engine.tokenize(prompt)]
    if isinstance(prompt, list) and prompt:
        if all(isinstance(p, str) for p in prompt):
            return [engine.tokenize(p) for p in prompt]
        if all(is_int(t) for t in prompt):
            return [list(prompt)]
        if all(isinstance(p, list) and all(is_int(t) for t in p) for p in prompt):
            return [list(p) for p in prompt]
    raise HTTPError(400, "prompt must be a string, a list of strings, a token-id list or a list of token-id lists")

"""A stand-in for vLLM's OpenAI-style server that speaks exactly the routes TRL 1.16's ``VLLMClient`` calls.

Why it exists: TRL's vLLM *server mode* cannot run without vLLM and a GPU, so nothing about it (request batching,
prompt/completion alignment, weight-sync calls) could be tested on CPU. This server generates with a transformers
model on CPU so tests drive TRL's real client and a real ``GRPOTrainer`` over HTTP, and users can dry-run a
server-mode config on a laptop. It never receives tensors: it samples from the model it loaded (docs/serving.md).

Only the standard library serves HTTP, so the stand-in adds no dependency. Three traps shape the code:

* TRL's client retries HTTP 500/502/503 for ~14 s and then hides the body, so every error is a 4xx with a message;
* a handler thread still running torch while the interpreter shuts down aborts the process, so there is one request
  per connection and ``stop()`` joins every handler thread;
* the model is not thread-safe across concurrent generations, so model calls are serialised with a lock.
"""

from __future__ import annotations

import atexit
import inspect
import json
import logging
import math
import threading
import time
import uuid
import weakref
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

import torch

logger = logging.getLogger(__name__)

Mode = Literal["sample", "echo"]
_Route = Callable[[dict[str, Any]], tuple[Any, dict[str, Any]]]
_RUNNING: weakref.WeakSet[StandInVLLMServer] = weakref.WeakSet()


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
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not low <= value <= high:
        raise HTTPError(400, f"{key} must be a number in [{low}, {high}], got {value!r}")
    return float(value)


def _optional_integer(payload: dict[str, Any], key: str, low: int) -> int | None:
    value = payload.get(key)
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < low):
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
        if not isinstance(stop_ids, list) or not all(isinstance(t, int) and not isinstance(t, bool) for t in stop_ids):
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
        if all(isinstance(t, int) and not isinstance(t, bool) for t in prompt):
            return [list(prompt)]
        if all(isinstance(p, list) and all(isinstance(t, int) and not isinstance(t, bool) for t in p) for p in prompt):
            return [list(p) for p in prompt]
    raise HTTPError(400, "prompt must be a string, a list of strings, a token-id list or a list of token-id lists")


@dataclass(frozen=True)
class RequestRecord:
    """One HTTP request as the server saw it; tests count these to prove batching and weight-sync behaviour."""

    method: str
    route: str
    status: int
    summary: dict[str, Any] = field(default_factory=dict)


class _HTTPServer(ThreadingHTTPServer):
    """Non-daemon handler threads, so ``server_close()`` joins them instead of leaving torch running at exit."""

    daemon_threads = False
    block_on_close = True

    def __init__(self, address: tuple[str, int], app: StandInVLLMServer) -> None:
        super().__init__(address, _Handler)
        self.app = app


class _Handler(BaseHTTPRequestHandler):
    """Parses JSON, dispatches to the app, and always closes the connection after one response (no keep-alive)."""

    server: _HTTPServer
    timeout = 30  # a client that connects and sends nothing must not block ``stop()`` forever

    def do_GET(self) -> None:  # noqa: N802 - name fixed by BaseHTTPRequestHandler
        self._dispatch("GET")

    def do_POST(self) -> None:  # noqa: N802
        self._dispatch("POST")

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - signature fixed by the base class
        logger.debug("%s %s", self.address_string(), format % args)

    def _dispatch(self, method: str) -> None:
        route = urlsplit(self.path).path.rstrip("/") or "/"
        try:
            status, body, summary = 200, *self.server.app._handle(method, route, self._read_json(method))
        except HTTPError as exc:
            status, body, summary = exc.status, _error_body(exc.status, exc.message), {"error": exc.message}
        except Exception as exc:  # any crash: answer 4xx (never 5xx, which TRL's client retries and hides)
            logger.exception("stand-in server failed on %s %s", method, route)
            message = f"internal error in the stand-in server: {type(exc).__name__}: {exc}"
            status, body, summary = 422, _error_body(422, message), {"error": message}
        # Record before answering, so a test that reads the log right after the response sees this request.
        self.server.app._record(RequestRecord(method, route, status, summary))
        data = b"" if body is None else json.dumps(body).encode()
        self.close_connection = True
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(data)

    def _read_json(self, method: str) -> dict[str, Any]:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        if method != "POST" or not raw.strip():
            return {}
        try:
            payload = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise HTTPError(400, f"request body is not valid JSON: {exc}") from exc
        if not isinstance(payload, dict):
            raise HTTPError(400, "request body must be a JSON object")
        return payload


def _error_body(status: int, message: str) -> dict[str, Any]:
    """vLLM's OpenAI-style error shape."""
    return {"error": {"message": message, "type": "BadRequestError" if status == 400 else "Error", "code": status}}


class StandInVLLMServer:
    """HTTP stand-in for ``vllm serve`` with the routes TRL 1.16's ``VLLMClient`` uses, generating on CPU.

    Args:
        model: a local model directory (loaded with its tokenizer, fp32, in eval mode) or an already built causal
            LM, used as is (call ``.eval()`` yourself; it runs under ``torch.no_grad()``).
        host, port: where to listen; ``port=0`` picks a free ephemeral port (read it back from ``port``/``url``).
        tokenizer: needed for string prompts and ``text`` fields when ``model`` is an object; loaded from a path.
        mode: ``"sample"`` (real sampling) or ``"echo"`` (deterministic completion from the prompt, see
            :func:`echo_completion`).
        served_model_name: the id reported by ``/v1/models``; defaults to the model path or class name.
        max_batch_size: rows (prompts x n) decoded together on CPU.
        seed: seeds the generator shared by requests without a ``seed`` (vLLM's engine seed).
    """

    def __init__(
        self,
        model: str | Path | Any,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        tokenizer: Any | None = None,
        mode: Mode = "sample",
        served_model_name: str | None = None,
        max_batch_size: int = 64,
        seed: int = 0,
    ) -> None:
        if mode not in ("sample", "echo"):
            raise ValueError(f"mode must be 'sample' or 'echo', got {mode!r}")
        if isinstance(model, (str, Path)):
            from transformers import AutoModelForCausalLM, AutoTokenizer

            served_model_name = served_model_name or str(model)
            tokenizer = tokenizer or AutoTokenizer.from_pretrained(model)
            model = AutoModelForCausalLM.from_pretrained(model, dtype="float32").eval()
        self.model_name = served_model_name or type(model).__name__
        self.mode: Mode = mode
        self.engine = StandInEngine(model, tokenizer, mode=mode, max_batch_size=max_batch_size, seed=seed)
        self._host, self._requested_port = host, port
        self._httpd: _HTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._model_lock = threading.Lock()
        self._log_lock = threading.Lock()
        self._log: list[RequestRecord] = []
        self._weight_engine_ready = False
        self._updating_weights = False
        self._routes: dict[tuple[str, str], _Route] = {
            ("GET", "/health"): lambda _: (None, {}),
            ("GET", "/v1/models"): self._models,
            ("GET", "/server_info"): self._server_info,
            ("GET", "/get_world_size"): lambda _: ({"world_size": 1}, {}),
            ("POST", "/v1/completions"): self._completions,
            ("POST", "/init_weight_transfer_engine"): self._init_weight_transfer_engine,
            ("POST", "/start_weight_update"): self._start_weight_update,
            ("POST", "/update_weights"): self._update_weights,
            ("POST", "/finish_weight_update"): self._finish_weight_update,
            ("POST", "/reset_prefix_cache"): lambda _: ({"success": True}, {}),
        }

    # ----------------------------------------------------------------------------------------------- lifecycle
    def start(self) -> StandInVLLMServer:
        """Bind and serve in a background thread; returns ``self`` so ``server = StandInVLLMServer(...).start()``."""
        if self._httpd is not None:
            return self
        self._httpd = _HTTPServer((self._host, self._requested_port), self)
        serve = self._httpd.serve_forever  # polls every 0.05 s, so stop() returns promptly
        self._thread = threading.Thread(target=serve, args=(0.05,), name="stand-in-vllm", daemon=True)
        self._thread.start()
        _RUNNING.add(self)
        return self

    def stop(self) -> None:
        """Stop accepting requests and join every handler thread (torch must not run during interpreter exit)."""
        httpd, thread = self._httpd, self._thread
        if httpd is None:
            return
        httpd.shutdown()
        httpd.server_close()  # joins the non-daemon handler threads
        if thread is not None:
            thread.join()
        self._httpd = self._thread = None
        _RUNNING.discard(self)

    def __enter__(self) -> StandInVLLMServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    @property
    def is_running(self) -> bool:
        return self._httpd is not None

    @property
    def host(self) -> str:
        return self._host

    @property
    def port(self) -> int:
        """The bound port (the ephemeral one when constructed with ``port=0``); only valid after ``start()``."""
        if self._httpd is None:
            raise RuntimeError("the server is not running; call start() first")
        return int(self._httpd.server_address[1])

    @property
    def url(self) -> str:
        """Base URL for ``GRPOConfig.vllm_server_base_url`` / ``VLLMClient(base_url=...)``."""
        host = "127.0.0.1" if self._host in ("", "0.0.0.0") else self._host
        return f"http://{host}:{self.port}"

    # ----------------------------------------------------------------------------------------------- request log
    @property
    def requests_log(self) -> list[RequestRecord]:
        """A snapshot of every request served so far, in arrival order."""
        with self._log_lock:
            return list(self._log)

    def requests_to(self, route: str) -> list[RequestRecord]:
        """The logged requests for one route, e.g. ``"/v1/completions"``."""
        return [record for record in self.requests_log if record.route == route]

    def clear_log(self) -> None:
        with self._log_lock:
            self._log.clear()

    def _record(self, record: RequestRecord) -> None:
        with self._log_lock:
            self._log.append(record)

    # ----------------------------------------------------------------------------------------------- routes
    def _handle(self, method: str, route: str, payload: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
        handler = self._routes.get((method, route))
        if handler is None:
            if any(path == route for _, path in self._routes):
                raise HTTPError(405, f"method {method} is not allowed on {route}")
            raise HTTPError(404, f"route {route} is not served by the stand-in vLLM server")
        return handler(payload)

    def _models(self, _: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
        card = {"id": self.model_name, "object": "model", "owned_by": "trl-adaptive-stand-in"}
        return {"object": "list", "data": [{**card, "max_model_len": self.engine.max_model_len}]}, {}

    def _server_info(self, _: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
        # The keys TRL reads: ``weight_transfer_config`` (must not be None) and ``model_config.logprobs_mode``.
        model_config = {"model": self.model_name, "logprobs_mode": "processed_logprobs", "max_logprobs": -1}
        config = {
            "model_config": {**model_config, "max_model_len": self.engine.max_model_len},
            "parallel_config": {"tensor_parallel_size": 1, "data_parallel_size": 1},
            "weight_transfer_config": {"backend": "nccl"},
        }
        return {"vllm_config": config}, {}

    def _completions(self, payload: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
        model = payload.get("model")
        if model is not None and model != self.model_name:
            raise HTTPError(404, f"The model `{model}` does not exist (this server serves `{self.model_name}`).")
        params = SamplingParams.from_payload(payload)
        prompts = parse_prompts(payload.get("prompt"), self.engine)
        self.engine.check_lengths(prompts, params.max_tokens)
        with self._model_lock:
            completions = self.engine.generate(prompts, params)
        choices = [
            self._choice(index, prompts[index // params.n], completion, params)
            for index, completion in enumerate(completions)
        ]
        prompt_tokens = sum(len(prompt) for prompt in prompts)
        completion_tokens = sum(len(completion.token_ids) for completion in completions)
        body = {
            "id": f"cmpl-{uuid.uuid4().hex}",
            "object": "text_completion",
            "created": int(time.time()),
            "model": self.model_name,
            "choices": choices,
            "usage": {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion_tokens,
                "total_tokens": prompt_tokens + completion_tokens,
            },
        }
        summary = {
            "num_prompts": len(prompts),
            "n": params.n,
            "num_choices": len(choices),
            "max_tokens": params.max_tokens,
            "temperature": params.temperature,
            "seed": params.seed,
            "ignored": params.ignored,
        }
        return body, summary

    def _choice(self, index: int, prompt: list[int], completion: Completion, params: SamplingParams) -> dict[str, Any]:
        """One choice in vLLM's completion shape; ``choices`` are prompt-major (index = prompt * n + child)."""
        as_ids = params.return_tokens_as_token_ids
        logprobs = None
        if params.logprobs is not None:
            tokens = [self.engine.token_name(token, as_ids) for token in completion.token_ids]
            top = [
                {self.engine.token_name(token, as_ids): value for token, value in position}
                for position in completion.top_logprobs
            ]
            for position, token, value in zip(top, tokens, completion.logprobs, strict=True):
                position[token] = value  # the sampled token is always included, even outside the top-N
            offsets, offset = [], 0
            for token in tokens:
                offsets.append(offset)
                offset += len(token)
            logprobs = {
                "text_offset": offsets,
                "token_logprobs": completion.logprobs,
                "tokens": tokens,
                "top_logprobs": top,
            }
        return {
            "index": index,
            "text": self.engine.decode(completion.token_ids),
            "logprobs": logprobs,
            "finish_reason": completion.finish_reason,
            "stop_reason": None,
            "prompt_logprobs": None,
            "prompt_token_ids": prompt if params.return_token_ids else None,
            "token_ids": completion.token_ids if params.return_token_ids else None,
        }

    def _init_weight_transfer_engine(self, payload: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
        init_info = payload.get("init_info")
        if not isinstance(init_info, dict):
            raise HTTPError(400, "init_weight_transfer_engine expects {'init_info': {...}}")
        self._weight_engine_ready = True
        return {}, {"init_info": init_info}

    def _start_weight_update(self, _: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
        if not self._weight_engine_ready:
            raise HTTPError(400, "start_weight_update before init_weight_transfer_engine")
        self._updating_weights = True
        return {}, {}

    def _update_weights(self, payload: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
        """Validates the announcement only: the stand-in receives no tensors and keeps sampling its own weights."""
        info = payload.get("update_info")
        if not self._updating_weights:
            raise HTTPError(400, "update_weights outside start_weight_update/finish_weight_update")
        if not isinstance(info, dict) or not all(isinstance(info.get(key), list) for key in _UPDATE_KEYS):
            raise HTTPError(400, f"update_weights expects {{'update_info': {{{', '.join(_UPDATE_KEYS)}}}}} lists")
        if len({len(info[key]) for key in _UPDATE_KEYS}) != 1:
            raise HTTPError(400, "update_info names, dtype_names and shapes differ in length")
        return {}, {"num_params": len(info["names"]), "packed": info.get("packed")}

    def _finish_weight_update(self, _: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
        if not self._updating_weights:
            raise HTTPError(400, "finish_weight_update without start_weight_update")
        self._updating_weights = False
        return {}, {}


_UPDATE_KEYS = ("names", "dtype_names", "shapes")


@atexit.register
def _stop_running_servers() -> None:
    """Servers a caller forgot to stop are stopped before torch is torn down (atexit runs before module teardown)."""
    for server in list(_RUNNING):
        server.stop()

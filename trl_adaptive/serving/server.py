"""A stand-in for vLLM's OpenAI-style server that speaks exactly the routes TRL 1.16's ``VLLMClient`` calls.

Why it exists: TRL's vLLM *server mode* cannot run without vLLM and a GPU, so nothing about it (request batching,
prompt/completion alignment, weight-sync calls) could be tested on CPU. This server generates with a transformers
model on CPU so tests drive TRL's real client and a real ``GRPOTrainer`` over HTTP, and users can dry-run a
server-mode config on a laptop. It never receives tensors: it samples from the model it loaded (docs/serving.md).
This module is the HTTP layer; generation lives in ``engine.py``.

Only the standard library serves HTTP, so the stand-in adds no dependency. Three traps shape the code:

* TRL's client retries HTTP 500/502/503 for ~14 s and then hides the body, so every error is a 4xx with a message;
* a handler thread still running torch while the interpreter shuts down aborts the process, so there is one request
  per connection and ``stop()`` joins every handler thread;
* the model is not thread-safe across concurrent generations, so model calls are serialised with a lock.
"""

from __future__ import annotations

import atexit
import json
import logging
import threading
import time
import uuid
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

from .engine import Completion, HTTPError, SamplingParams, StandInEngine, parse_prompts

logger = logging.getLogger(__name__)

Mode = Literal["sample", "echo"]
_Route = Callable[[dict[str, Any]], tuple[Any, dict[str, Any]]]
_RUNNING: weakref.WeakSet[StandInVLLMServer] = weakref.WeakSet()


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
            ("POST", "/collective_rpc"): self._collective_rpc,
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

    def _collective_rpc(self, payload: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
        """vLLM's dev-mode route, for the one method the CPU weight sync calls: ``reload_weights(weights_path=...)``
        loads ``model.safetensors`` from that folder into the served model (every tensor must match by name)."""
        method = payload.get("method")
        if method is None:
            raise HTTPError(400, "Missing 'method' in request body")  # vLLM's answer, used as a route probe
        folder = (payload.get("kwargs") or {}).get("weights_path")
        if method != "reload_weights" or not isinstance(folder, str):
            raise HTTPError(400, "the stand-in serves collective_rpc only for reload_weights(weights_path=...)")
        from safetensors.torch import load_file

        from .vllm_cpu import WEIGHTS_FILE

        tensors = load_file(str(Path(folder) / WEIGHTS_FILE))
        unexpected = sorted(set(tensors) - set(self.engine.model.state_dict()))
        if unexpected:  # checked first, so a bad file leaves the served weights as they were
            raise HTTPError(400, f"reload_weights: the served model has no parameters named {unexpected[:5]}")
        with self._model_lock:
            self.engine.model.load_state_dict(tensors, strict=False)  # tied weights are saved once
        return [None], {"method": method, "num_tensors": len(tensors)}


_UPDATE_KEYS = ("names", "dtype_names", "shapes")


@atexit.register
def _stop_running_servers() -> None:
    """Servers a caller forgot to stop are stopped before torch is torn down (atexit runs before module teardown)."""
    for server in list(_RUNNING):
        server.stop()

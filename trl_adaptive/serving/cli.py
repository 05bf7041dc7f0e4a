"""``trl-adaptive-serve``: run the CPU stand-in for ``vllm serve`` so a server-mode GRPO config can be dry-run.

Why a console command: pointing a real training script at a local URL is the quickest way to check a server-mode
setup (batch sizes, prompt lengths, request counts) on a laptop before paying for GPUs. The stand-in never receives
weights, so it keeps sampling from the model it loaded; it is a plumbing check, not a training backend.
"""

from __future__ import annotations

import argparse
import logging
import signal
import threading
from typing import Any

_BANNER = """\
Stand-in vLLM server ({mode} mode) for {model}
  listening on {url}   (routes: /health /v1/models /server_info /get_world_size /v1/completions + weight-sync routes)

Point a GRPOConfig at it:
  GRPOConfig(..., use_vllm=True, vllm_mode="server", vllm_server_base_url="{url}", bf16=False)

The training process must apply trl_adaptive's CPU seam (vLLM is not installed, and weight sync is HTTP only):
  python -m trl_adaptive.serving.cpu_seam your_train.py [args]        # unchanged script
  # or, in the script, before building the trainer:
  from trl_adaptive.serving import patch_trl_for_stand_in_server
  patch_trl_for_stand_in_server().start()

Caveat: no tensors are transferred at weight sync; this server samples from the weights it loaded for the whole run.
Press Ctrl-C to stop.
"""


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="trl-adaptive-serve", description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True, help="local model directory (with its tokenizer)")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000, help="0 picks a free port")
    parser.add_argument("--mode", choices=("sample", "echo"), default="sample", help="echo: deterministic completions")
    parser.add_argument("--served-model-name", default=None, help="id reported by /v1/models (default: --model)")
    parser.add_argument("--max-batch-size", type=int, default=64, help="rows decoded together on CPU")
    parser.add_argument("--seed", type=int, default=0, help="seed for requests that carry none")
    parser.add_argument("--log-level", default="WARNING")
    return parser


def main(argv: list[str] | None = None) -> int:
    """Serve until Ctrl-C or SIGTERM; returns the process exit code."""
    args = _parser().parse_args(argv)
    logging.basicConfig(level=args.log_level.upper())
    from .server import StandInVLLMServer  # after argument parsing, so ``--help`` does not import torch

    server = StandInVLLMServer(
        args.model,
        args.host,
        args.port,
        mode=args.mode,
        served_model_name=args.served_model_name,
        max_batch_size=args.max_batch_size,
        seed=args.seed,
    )
    stop = threading.Event()

    def _on_signal(*_: Any) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)
    with server:
        print(_BANNER.format(mode=args.mode, model=args.model, url=server.url), flush=True)
        while not stop.wait(0.5):  # poll, so SIGINT / SIGTERM are handled within half a second
            continue
    print(f"served {len(server.requests_log)} requests; stopped.", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

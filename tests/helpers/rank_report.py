"""How a two-rank test script ends: write this rank's JSON report atomically, then leave without gloo's teardown race.

Letting the interpreter exit with a live gloo group occasionally aborts a rank after its work is done ("terminate
called without an active exception": a joinable C++ thread destroyed at static destruction, a known gloo race on
CPU). Destroying the group after a barrier narrows the window; ``os._exit`` closes it, because it skips C++ static
destructors. Everything a test reads is on disk (written and renamed) before that, and stdout is flushed.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import torch.distributed as dist


def write_report_and_exit(path: Path, report: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    tmp.write_text(json.dumps(report, default=float))
    os.replace(tmp, path)
    if dist.is_available() and dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)

"""``trl_adaptive.report``: a run folder's files (``run_files``), and the run report built from them (``build``:
reading a run; ``tables`` and ``tokens``: what is counted; ``plots``: the figures; ``summary``: the markdown page).
``trl-adaptive report RUN_DIR`` writes it (docs/report.md). Imports no torch or trl; matplotlib only to draw.
"""

from . import build
from .build import *  # noqa: F403  (the package's API is build's: one list of names, in build.__all__)

__all__ = build.__all__

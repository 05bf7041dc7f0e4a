"""Per-prompt success statistics, keyed by a stable integer prompt id, that every allocator reads (NumPy only).

One store, :class:`PromptStatistics`, serves all strategies. Its parts, one module each:

- :mod:`.table`: the row table, prompt ids -> rows of ``float64`` columns;
- :mod:`.estimators`: one estimator per kind of evidence, named as allocators' ``reads`` name them:
  ``epoch_rate`` (:class:`EpochRate`, Knapsack RL's last-epoch rate), ``decayed_rate`` (:class:`DecayedRate`,
  Reinforce-Ada Est's decayed rate) and ``posterior`` (:class:`BetaPosterior`, the Beta posterior with optional
  forgetting that CERO and ``bayes_knapsack`` read);
- :mod:`.lengths`: each prompt's expected generated tokens per completion (:class:`CompletionLength`);
- :mod:`.prior`: a prompt's prior from a dataset's pass-rate column, which each estimator reads its own way;
- :mod:`.fingerprints`: :func:`stable_prompt_ids` and :func:`prompt_fingerprint`, so statistics are never applied
  to other prompts that reuse the same ids;
- :mod:`.serialization`: the JSON format (writes version 4, reads versions 1 to 4); :mod:`.dataset`: the
  ``datasets.Dataset`` export and import.

docs/statistics.md describes the readings, the settings and the file format.
"""

from .estimators import ESTIMATORS, BetaPosterior, DecayedRate, EpochRate
from .fingerprints import prompt_fingerprint, stable_prompt_ids
from .lengths import CompletionLength
from .prior import PriorCounts
from .serialization import FORMAT_NAME, FORMAT_VERSION, READABLE_VERSIONS
from .store import PromptStatistics
from .table import RowTable

__all__ = [
    "ESTIMATORS",
    "FORMAT_NAME",
    "FORMAT_VERSION",
    "READABLE_VERSIONS",
    "BetaPosterior",
    "CompletionLength",
    "DecayedRate",
    "EpochRate",
    "PriorCounts",
    "PromptStatistics",
    "RowTable",
    "prompt_fingerprint",
    "stable_prompt_ids",
]

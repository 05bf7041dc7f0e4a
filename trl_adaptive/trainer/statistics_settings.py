"""The statistics store's settings in ``AdaptiveGRPOConfig``: checked under their config names, and reported when the
chosen strategy does not read the estimator they configure.

Each strategy reads some of the store's estimators (``Strategy.reads`` in ``trl_adaptive.strategies``: an allocator's
``reads`` class attribute, ``"epoch_rate"``, ``"decayed_rate"``, ``"posterior"``; trl_adaptive/stats/estimators.py;
a round procedure decides from its own rounds and reads none). A setting of an estimator the allocator does
not read changes nothing in the run, so setting it away from its default is most likely a mistake: it is warned about.
"""

from __future__ import annotations

import dataclasses
import warnings
from typing import Any

from ..stats import BetaPosterior, DecayedRate, PromptStatistics
from ..strategies import registered_strategies, strategy

# Config field -> the estimator it configures, by the name allocators list in `reads`.
ESTIMATOR_OF_FIELD: dict[str, str] = {
    "est_decay": DecayedRate.name,
    "est_prior_alpha": DecayedRate.name,
    "est_prior_beta": DecayedRate.name,
    "posterior_half_life": BetaPosterior.name,
    "posterior_prior_a": BetaPosterior.name,
    "posterior_prior_b": BetaPosterior.name,
}


def check_statistics_settings(config: Any) -> None:
    """Check the store settings of ``config`` (an ``AdaptiveGRPOConfig``); warn about those left unread.

    Raises:
        ValueError: for an invalid setting, naming its config field and the fix, e.g. ``est_decay=1.5: must lie in
            (0, 1]; ...``.
    """
    DecayedRate.check_settings(config.est_decay, config.est_prior_alpha, config.est_prior_beta, prefix="est_")
    PromptStatistics(**config.statistics_config)  # the other settings have the same names in the store
    for field, value in unread_settings(config).items():
        estimator = ESTIMATOR_OF_FIELD[field]
        readers = [name for name in registered_strategies() if estimator in strategy(name).reads]
        warnings.warn(
            f"{field}={value!r} has no effect: allocator={config.allocator!r} does not read the statistics store's "
            f"{estimator!r} estimator, which {field} configures. Allocators that read it: "
            f"{', '.join(readers) or 'none'}. Choose one of them, or leave {field} at its default.",
            UserWarning,
            stacklevel=4,  # the caller of AdaptiveGRPOConfig(...)
        )


def unread_settings(config: Any) -> dict[str, Any]:
    """The store settings of ``config`` set away from their defaults that ``config.allocator`` does not read."""
    defaults = {f.name: f.default for f in dataclasses.fields(config)}
    reads = strategy(config.allocator).reads
    return {
        field: getattr(config, field)
        for field, estimator in ESTIMATOR_OF_FIELD.items()
        if estimator not in reads and getattr(config, field) != defaults[field]
    }

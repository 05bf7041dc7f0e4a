"""The docstring examples of the NumPy-only modules run as tests: an example that stops being true fails CI.

Modules that import torch or TRL (``trl_adaptive.trainer``, ``serving``) are left out: their examples need a model.
"""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest

PACKAGES = ["allocation", "sampling", "stats", "sim", "report"]
MODULES = ["_validate", "batch"]


def _module_names() -> list[str]:
    names = [f"trl_adaptive.{name}" for name in MODULES]
    for package in PACKAGES:
        module = importlib.import_module(f"trl_adaptive.{package}")
        names.append(module.__name__)
        if hasattr(module, "__path__"):
            names += [info.name for info in pkgutil.walk_packages(module.__path__, f"{module.__name__}.")]
    return sorted(names)


@pytest.mark.parametrize("name", _module_names())
def test_docstring_examples(name):
    result = doctest.testmod(
        importlib.import_module(name), optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE
    )
    assert result.failed == 0, f"{result.failed} of {result.attempted} docstring examples of {name} failed"


def test_the_examples_are_there():
    """A guard against a collection that silently finds nothing (a renamed package, a moved module)."""
    attempted = sum(doctest.testmod(importlib.import_module(n)).attempted for n in _module_names())
    assert attempted >= 100, attempted  # 156 when written

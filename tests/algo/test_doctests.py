"""The docstring examples of the algorithm modules run and are right."""

from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = ["parsing", "labels", "coding_rewards", "adaptation", "registry", "seeds"]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name: str) -> None:
    module = importlib.import_module(f"rla_core.algo.{name}")
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0
    assert result.failed == 0

"""Shared fixtures: engine parametrization and round trips (the watchdog is suite-wide)."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from ckpt import state

# Hypothesis settings (no deadline, no example database) are the suite-wide profile
# loaded in tests/conftest.py.

ENGINES = state.ENGINES  # native too, where its C core is built
ENGINE_PAIRS = list(itertools.product(ENGINES, ENGINES))


def pair_id(pair: tuple[str, str]) -> str:
    return f"{pair[0]}->{pair[1]}"


@pytest.fixture(params=ENGINES)
def engine(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture(params=ENGINE_PAIRS, ids=pair_id)
def engines(request: pytest.FixtureRequest) -> tuple[str, str]:
    """(save engine, load engine): all four combinations."""
    return request.param


def roundtrip(root: Any, engines: tuple[str, str]) -> Any:
    save_with, load_with = engines
    data = state.dumps(root, engine=save_with)
    assert isinstance(data, bytes)
    return state.loads(data, engine=load_with)

"""A value that cannot be saved is named by its path from the root, e.g.
``$.tasks[3].fd_table.files[7]``; the path is searched only once a save has failed."""

from __future__ import annotations

import collections
import threading
from dataclasses import dataclass, field
from typing import Any

import pytest

from ckpt import state
from ckpt.state import paths

from .conftest import ENGINES


@state.savable(name="tests.state.paths.File")
@dataclass(eq=False)
class File:
    fd: int = 0
    obj: Any = None


@state.savable(name="tests.state.paths.FdTable")
@dataclass(eq=False)
class FdTable:
    files: list[File] = field(default_factory=list)


@state.savable(name="tests.state.paths.Task")
@dataclass(eq=False)
class Task:
    fd_table: FdTable | None = None
    env: dict[str, Any] = field(default_factory=dict)


@state.savable(name="tests.state.paths.Kernel")
@dataclass(eq=False)
class Kernel:
    tasks: list[Task] = field(default_factory=list)


def _kernel() -> Kernel:
    return Kernel([Task(FdTable([File(i) for i in range(9)])) for _ in range(5)])


@pytest.mark.parametrize(
    ("place", "expected"),
    [
        (
            lambda k, bad: setattr(k.tasks[3].fd_table.files[7], "obj", bad),
            "$.tasks[3].fd_table.files[7].obj",
        ),
        (lambda k, bad: k.tasks[1].env.update(x=[1, bad]), "$.tasks[1].env['x'][1]"),
        (
            lambda k, bad: setattr(k.tasks[0].fd_table.files[2], "obj", (1, {"k": bad})),
            "$.tasks[0].fd_table.files[2].obj[1]['k']",
        ),
        (
            lambda k, bad: setattr(
                k.tasks[4].fd_table.files[0], "obj", collections.deque([0, bad])
            ),
            "$.tasks[4].fd_table.files[0].obj.<deque 0>[1]",
        ),
        (lambda k, bad: setattr(k.tasks[2], "fd_table", bad), "$.tasks[2].fd_table"),
    ],
)
@pytest.mark.parametrize("engine", ENGINES)
def test_unsavable_value_is_named_by_its_path(place: Any, expected: str, engine: str) -> None:
    k = _kernel()
    place(k, threading.Lock())
    with pytest.raises(state.StateError) as info:
        state.dumps(k, engine)
    assert f"(at {expected})" in str(info.value)
    assert "lock" in str(info.value)


def test_a_cycle_does_not_hang_the_search() -> None:
    k = _kernel()
    for t in k.tasks:
        t.env["k"] = k
    k.tasks[4].fd_table.files[8].obj = object()
    assert paths.path_to_unsavable(k) == "$.tasks[4].fd_table.files[8].obj"
    with pytest.raises(state.StateError, match=r"\(at \$\.tasks\[4\]\.fd_table\.files\[8\]\.obj\)"):
        state.dumps(k, "typed")


def test_a_savable_graph_has_no_path() -> None:
    assert paths.path_to_unsavable(_kernel()) is None


def test_the_search_is_not_run_on_success(monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(root: Any) -> None:
        raise AssertionError("path search on the fast path")

    monkeypatch.setattr(paths, "path_to_unsavable", boom)
    state.dumps(_kernel(), "typed")
    state.dumps(_kernel(), "reflect")

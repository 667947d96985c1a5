"""Classes defined inside a function under ``from __future__ import annotations``:
every annotation is a string naming function locals, resolved at first use from the
defining frame (as pydantic and attrs do)."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from ckpt import state
from ckpt.state.schema import schema_of

from .conftest import ENGINE_PAIRS, pair_id, roundtrip
from .graph_equal import graph_diff


def _make_classes(tag: str) -> tuple[type, type]:
    @state.savable(name=f"tests.state.local.{tag}.A")
    @dataclass(eq=False)
    class A:
        n: int = 0
        b: B | None = None  # B is defined below, in this function
        many: list[B] = field(default_factory=list)
        me: A | None = None

    @state.savable(name=f"tests.state.local.{tag}.B")
    @dataclass(eq=False)
    class B:
        a: A | None = None
        table: dict[str, A] = field(default_factory=dict)

    return A, B


@pytest.mark.parametrize("engines", ENGINE_PAIRS, ids=pair_id)
def test_mutually_referencing_local_classes(engines: tuple[str, str]) -> None:
    A, B = _make_classes("mutual")
    assert schema_of(A).descriptors == ("int", "opt[ref]", "list[ref]", "opt[ref]")
    assert schema_of(B).descriptors == ("opt[ref]", "dict[str,ref]")
    a = A(1)
    b = B(a, {"x": a})
    a.b, a.many, a.me = b, [b, B()], a
    assert graph_diff(a, roundtrip(a, engines)) is None


def test_factory_called_twice_gives_independent_classes() -> None:
    A1, _ = _make_classes("first")
    A2, _ = _make_classes("second")
    assert schema_of(A1).descriptors == schema_of(A2).descriptors
    x = state.loads(state.dumps(A2(5, me=A2(6))))
    assert type(x) is A2 and type(x.me) is A2


def test_unknown_local_name_is_a_state_error_naming_the_field() -> None:
    @state.savable(name="tests.state.local.Bad")
    @dataclass(eq=False)
    class Bad:
        x: Missing | None = None  # noqa: F821

    with pytest.raises(state.StateError, match=r"tests\.state\.local\.Bad\.x.*Missing"):
        state.dumps(Bad(), "reflect")

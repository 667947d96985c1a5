"""The stream's flags map: a flag this reader does not know is refused by every engine,
since it could change how the rows read (a fuzz finding: an unknown key was ignored,
and an escape in a type the flags did not list then loaded differently by engine)."""

from __future__ import annotations

import pytest

from ckpt import state
from ckpt.state import wire

from .models import Node

ENGINES = ["reflect", "typed", *(["native"] if state.native_status()[0] else [])]


def with_flags(flags: dict) -> bytes:
    payload = wire.unframe(state.dumps(Node(1, "n"), engine="typed"))
    payload[wire.FLAGS] = flags
    return wire.frame(payload)


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize(
    "flags",
    [
        pytest.param({"\0\0caped": [0]}, id="misspelt-escaped"),
        pytest.param({"tagged": True}, id="v1-flag-in-v2"),
        pytest.param({"escaped": [], "compressed": 1}, id="unknown-beside-known"),
    ],
)
def test_an_unknown_flag_is_refused(engine: str, flags: dict) -> None:
    with pytest.raises(state.StateError, match="unknown to this ckpt"):
        state.loads(with_flags(flags), engine=engine)


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("flags", [{}, {"escaped": []}, {"escaped": [0]}])
def test_known_flags_load(engine: str, flags: dict) -> None:
    got = state.loads(with_flags(flags), engine=engine)
    assert isinstance(got, Node) and got.label == "n"

"""Enum members whose value is or holds a NaN, in every engine.

``Enum(nan)`` finds no member (``nan != nan``, and a loaded NaN is a new float whose
hash is its id), so a NaN-valued member saved but did not load back.  It must come back
as itself (a NaN matches a member's NaN with the same bits, through tuples), with no
change to any other enum's bytes: typed stays the reference and native writes its bytes.
Two members whose values are NaNs with the same bits (``A = math.nan;
B = float("nan")``) are distinct members a stream cannot tell apart: saving one is a
StateError that says what to do.  Flags, -0.0 and 0.0, and values that are not NaN
load as ``Enum(value)`` always did.
"""

from __future__ import annotations

import enum
import math
import struct
from dataclasses import dataclass, field
from typing import Any, Optional

import pytest

from ckpt import state
from ckpt.state import dyn

from .conftest import ENGINE_PAIRS, ENGINES, pair_id
from .requires import requires_native

# ruff: noqa: UP045 (Optional[...] is one of the kinds under test)

_NEG_NAN = -math.nan
_PAYLOAD_NAN = struct.unpack("<d", struct.pack("<Q", 0x7FF8_0000_0000_0001))[0]


class Odd(enum.Enum):
    NAN = math.nan
    NEG = _NEG_NAN  # another NaN: the sign bit differs
    PAYLOAD = _PAYLOAD_NAN  # and another: a payload bit differs
    HALF = 0.5


class Pair(enum.Enum):  # tuple values holding NaNs
    NAN_ONE = (math.nan, 1)
    ONE_NAN = (1, math.nan)
    NESTED = ((math.nan,), "x")
    PLAIN = (1, 2)


class Zero(enum.Enum):  # -0.0 == 0.0: one member, NEG its alias
    POS = 0.0
    NEG = -0.0


class NegZero(enum.Enum):
    NEG = -0.0
    ONE = 1.0


class Perm(enum.Flag):
    R = 1
    W = 2
    X = 4


class Twins(enum.Enum):  # math.nan and float("nan"): two members, the same bits
    A = math.nan
    B = float("nan")
    C = 1.5


@state.savable(name="tests.enum_nan.Holder")
@dataclass(eq=False)
class Holder:
    odd: Odd = Odd.HALF
    opt: Optional[Odd] = None
    pair: Pair = Pair.PLAIN
    zero: Zero = Zero.POS
    negzero: NegZero = NegZero.ONE
    perm: Perm = Perm.R
    anything: Any = None
    odds: list[Odd] = field(default_factory=list)
    pairs: dict[str, Pair] = field(default_factory=dict)
    tup: tuple[Odd, int] = (Odd.HALF, 0)


@state.savable(name="tests.enum_nan.TwinHolder")
@dataclass(eq=False)
class TwinHolder:
    twin: Twins = Twins.C
    anything: Any = None


def _full() -> Holder:
    return Holder(
        odd=Odd.NAN,
        opt=Odd.NEG,
        pair=Pair.NESTED,
        zero=Zero.NEG,
        negzero=NegZero.NEG,
        perm=Perm.R | Perm.X,
        anything=Pair.ONE_NAN,
        odds=[Odd.PAYLOAD, Odd.NAN, Odd.NEG, Odd.HALF],
        pairs={"a": Pair.NAN_ONE, "b": Pair.PLAIN, "c": Pair.ONE_NAN},
        tup=(Odd.NEG, 3),
    )


def _members(h: Holder) -> list[Any]:
    return [
        h.odd,
        h.opt,
        h.pair,
        h.zero,
        h.negzero,
        h.perm,
        h.anything,
        *h.odds,
        *h.pairs.items(),
        h.tup,
    ]


@pytest.mark.parametrize("engines", ENGINE_PAIRS, ids=pair_id)
def test_nan_valued_members_come_back_as_themselves(engines: tuple[str, str]) -> None:
    h = _full()
    back = state.loads(state.dumps(h, engine=engines[0]), engine=engines[1])
    assert _members(back) == _members(h)
    assert back.odd is Odd.NAN and back.opt is Odd.NEG and back.odds[0] is Odd.PAYLOAD
    assert back.anything is Pair.ONE_NAN and back.zero is Zero.POS


@requires_native
def test_native_writes_typed_s_bytes() -> None:
    h = _full()
    assert state.dumps(h, engine="native") == state.dumps(h, engine="typed")


@pytest.mark.parametrize("engines", ENGINE_PAIRS, ids=pair_id)
@pytest.mark.parametrize("member", [*Perm, Perm.R | Perm.W, Perm.W | Perm.X, Perm(0)])
def test_flag_members_and_combinations_load_as_before(
    engines: tuple[str, str], member: Perm
) -> None:
    back = state.loads(state.dumps(Holder(perm=member), engine=engines[0]), engine=engines[1])
    assert back.perm is member


@pytest.mark.parametrize("engines", ENGINE_PAIRS, ids=pair_id)
def test_a_negative_zero_member_keeps_its_sign(engines: tuple[str, str]) -> None:
    h = Holder(negzero=NegZero.NEG, zero=Zero.NEG, anything=NegZero.NEG)
    back = state.loads(state.dumps(h, engine=engines[0]), engine=engines[1])
    assert back.negzero is NegZero.NEG and back.anything is NegZero.NEG
    assert math.copysign(1.0, back.negzero.value) == -1.0
    assert back.zero is Zero.POS


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("where", ["twin", "anything"])
@pytest.mark.parametrize("member", [Twins.A, Twins.B])
def test_saving_a_nan_twin_says_what_to_do(engine: str, where: str, member: Twins) -> None:
    with pytest.raises(state.StateError, match=f"Twins member {member.name} .*distinct value"):
        state.dumps(TwinHolder(**{where: member}), engine=engine)


@pytest.mark.parametrize("engines", ENGINE_PAIRS, ids=pair_id)
def test_the_twins_enum_s_other_members_still_round_trip(engines: tuple[str, str]) -> None:
    h = TwinHolder(twin=Twins.C, anything=Twins.C)
    back = state.loads(state.dumps(h, engine=engines[0]), engine=engines[1])
    assert back.twin is Twins.C and back.anything is Twins.C


def test_a_nan_no_member_has_is_still_a_state_error() -> None:
    with pytest.raises(state.StateError, match="Odd has no member with value nan"):
        dyn.enum_member(Odd, struct.unpack("<d", struct.pack("<Q", 0x7FF8_0000_0000_0002))[0])
    with pytest.raises(state.StateError, match="Pair has no member"):
        dyn.enum_member(Pair, (math.nan, 2))
    with pytest.raises(state.StateError, match="Twins has no member"):
        fresh = struct.unpack("<d", struct.pack("<d", math.nan))[0]  # not A's own object
        dyn.enum_member(Twins, fresh)  # two members match: neither is chosen


def test_the_nan_twins_are_the_members_sharing_bits() -> None:
    assert dyn.nan_twins(Twins) == {Twins.A, Twins.B}
    assert dyn.nan_twins(Odd) == frozenset() and dyn.nan_twins(Pair) == frozenset()

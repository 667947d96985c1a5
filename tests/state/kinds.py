"""The table of field kinds the engine promises, each with a holder class and sample values.

Each ``Kind`` yields two single-field holder classes (plain and ``slots=True``) whose field
``v`` has a deliberately non-zero, non-empty default, so the same classes serve the
cross-engine matrix and the default-field rule (a field saved holding the zero value must
load as zero, never as the class default).  Sample factories build fresh values on every
call, so no test sees another test's mutable objects.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any

from ckpt import state

from .models import Circle, Color, Leaf, Level, Mode, Shape, SLeaf, Square

NAN = math.nan
UNSET: Any = type("Unset", (), {"__repr__": lambda self: "UNSET"})()
INF = math.inf


@dataclasses.dataclass(frozen=True)
class Kind:
    name: str
    annotation: Any
    samples: Callable[[], list[Any]]  # fresh values, zero and default-equal ones included
    default: Any = UNSET  # an immutable default ...
    default_factory: Callable[[], Any] | Any = UNSET  # ... or a factory for a mutable one
    zero: Callable[[], Any] | Any = UNSET  # factory of the zero/empty value, if the kind has one

    def default_value(self) -> Any:
        if self.default_factory is not UNSET:
            return self.default_factory()
        return self.default


def _poly_samples() -> list[Any]:
    """Every plain kind, and objects, as a polymorphic field may hold them."""
    leaf = Leaf(4)
    shared = [1, 2]
    selfish: list[Any] = [0]
    selfish.append(selfish)
    return [
        None,
        True,
        False,
        0,
        -1,
        2**63,
        2**64,
        -(2**64) - 1,
        2**200,
        0.0,
        -0.0,
        1.5,
        NAN,
        INF,
        -INF,
        "",
        "ünïcode ✓",
        b"",
        b"\x00\xff",
        bytearray(b"ba"),
        [],
        [1, "a", None, leaf, [2.5, (3, 4)]],
        (),
        (1, 2),
        (1, [2, 3], {"k": (4,)}),
        {},
        {"a": 1, "b": [leaf]},
        {1: "int key", 2: "two"},
        {(1, "x"): Leaf(5), (2, "y"): None},
        {leaf: 1},
        {True: 1, 0.5: 2, b"b": 3, None: 4},
        set(),
        {1, 2, 3},
        {"a", "b"},
        frozenset({1, 2}),
        frozenset(),
        Color.GREEN,
        Level.HUGE,
        Mode.WRITE,
        leaf,
        SLeaf(1, "s"),
        Square("sq", 2, Color.BLUE),
        [shared, shared],
        selfish,
        [[[[[]]]]],
    ]


def _poly_samples_as_lists() -> list[Any]:
    """Every polymorphic sample inside a list, then all of them in one list."""
    return [[], *([v] for v in _poly_samples()), _poly_samples()]


KINDS: list[Kind] = [
    Kind("bool", bool, lambda: [False, True], default=True, zero=False),
    Kind(
        "int",
        int,
        lambda: [
            *(0, 7, 1, -1, 127, 128, -33, 2**31, 2**63 - 1, -(2**63), 2**63, 2**64 - 1),
            *(2**64, -(2**63) - 1, 2**100 + 3, -(2**100), 10**40),
        ],
        default=7,
        zero=0,
    ),
    Kind(
        "float",
        float,
        lambda: [0.0, -0.0, 1.5, NAN, INF, -INF, 5e-324, 1.7976931348623157e308, 0.1],
        default=1.5,
        zero=0.0,
    ),
    # -0.0 == 0.0: a writer that compares with the default must not lose the sign.
    Kind("float_zero_default", float, lambda: [-0.0, 0.0, NAN], default=0.0, zero=0.0),
    Kind(
        "str",
        str,
        lambda: ["", "seven", "héllo wörld ✓ 🎉", "\x00nul", "x" * 5000],
        default="seven",
        zero="",
    ),
    Kind(
        "bytes",
        bytes,
        lambda: [b"", b"\x07", b"\x00" * 64, bytes(range(256))],
        default=b"\x07",
        zero=b"",
    ),
    Kind(
        "bytearray",
        bytearray,
        lambda: [bytearray(), bytearray(b"\x07"), bytearray(b"\x00" * 10), bytearray(range(256))],
        default_factory=lambda: bytearray(b"\x07"),
        zero=bytearray,
    ),
    Kind("opt_int", int | None, lambda: [None, 0, 7, -5, 2**70], default=7, zero=None),
    Kind("opt_str", str | None, lambda: [None, "", "s"], default="s", zero=None),
    Kind("opt_bytes", bytes | None, lambda: [None, b"", b"\x07"], default=b"\x07", zero=None),
    Kind(
        "list_int",
        list[int],
        lambda: [[], [1], [0], [1, 2, 3], list(range(300)), [2**70, -(2**70), 0]],
        default_factory=lambda: [1],
        zero=list,
    ),
    Kind(
        "list_str",
        list[str],
        lambda: [[], ["a"], ["", "ü", "b" * 100]],
        default_factory=lambda: ["a"],
        zero=list,
    ),
    Kind(
        "list_list_int",
        list[list[int]],
        lambda: [[], [[]], [[1], [2, 3]], [[1]]],
        default_factory=lambda: [[1]],
        zero=list,
    ),
    Kind(
        "list_opt_float",
        list[float | None],
        lambda: [[], [None, 1.5, NAN, -0.0], [1.5]],
        default_factory=lambda: [1.5],
        zero=list,
    ),
    Kind(
        "tuple_fixed",
        tuple[int, str, bytes],
        lambda: [(0, "", b""), (1, "a", b"b"), (-(2**70), "ü", b"\x00")],
        default=(1, "a", b"b"),
        zero=(0, "", b""),
    ),
    Kind(
        "tuple_var",
        tuple[int, ...],
        lambda: [(), (1,), (1, 2, 3), tuple(range(100))],
        default=(1,),
        zero=(),
    ),
    Kind(
        "tuple_nested",
        tuple[tuple[int, str], ...],
        lambda: [(), ((1, "a"),), ((1, "a"), (2, "b"))],
        default=((1, "a"),),
        zero=(),
    ),
    Kind(
        "dict_str_int",
        dict[str, int],
        lambda: [{}, {"a": 1}, {"z": 26, "a": 1, "m": 13}, {str(i): i for i in range(200)}],
        default_factory=lambda: {"a": 1},
        zero=dict,
    ),
    Kind(
        "dict_int_str",
        dict[int, str],
        lambda: [{}, {1: "a"}, {-1: "", 2**70: "big", 0: "zero"}],
        default_factory=lambda: {1: "a"},
        zero=dict,
    ),
    Kind(
        "dict_tuple_key",
        dict[tuple[int, str], list[int]],
        lambda: [{}, {(1, "a"): [1]}, {(2, "b"): [], (1, "a"): [1, 2]}],
        default_factory=lambda: {(1, "a"): [1]},
        zero=dict,
    ),
    Kind(
        "dict_bytes_float_key",
        dict[bytes | float, int],
        lambda: [{}, {b"k": 1}, {b"": 0, 1.5: 2, -0.5: 3}],
        default_factory=lambda: {b"k": 1},
        zero=dict,
    ),
    Kind(
        "set_int",
        set[int],
        lambda: [set(), {1}, {0}, {1, 2, 3, 2**70}, set(range(200))],
        default_factory=lambda: {1},
        zero=set,
    ),
    Kind(
        "set_str",
        set[str],
        lambda: [set(), {"a"}, {"", "ü", "x"}],
        default_factory=lambda: {"a"},
        zero=set,
    ),
    Kind(
        "set_tuple",
        set[tuple[int, str]],
        lambda: [set(), {(1, "a")}, {(1, "a"), (2, "b")}],
        default_factory=lambda: {(1, "a")},
        zero=set,
    ),
    Kind(
        "frozenset_int",
        frozenset[int],
        lambda: [frozenset(), frozenset({1}), frozenset({-1, 2**70})],
        default=frozenset({1}),
        zero=frozenset(),
    ),
    Kind("enum", Color, lambda: [Color.RED, Color.GREEN, Color.BLUE], default=Color.GREEN),
    Kind("int_enum", Level, lambda: [Level.LOW, Level.HIGH, Level.HUGE], default=Level.HIGH),
    Kind("str_enum", Mode, lambda: [Mode.READ, Mode.WRITE], default=Mode.WRITE),
    Kind("opt_enum", Color | None, lambda: [None, Color.RED], default=Color.RED, zero=None),
    Kind(
        "list_enum",
        list[Level],
        lambda: [[], [Level.LOW, Level.HUGE]],
        default_factory=lambda: [Level.LOW],
        zero=list,
    ),
    Kind("ref", Leaf, lambda: [Leaf(0), Leaf(5)], default_factory=lambda: Leaf(9)),
    Kind("ref_slots", SLeaf, lambda: [SLeaf(0, ""), SLeaf(1, "x")], default_factory=SLeaf),
    Kind(
        "opt_ref", Leaf | None, lambda: [None, Leaf(3)], default_factory=lambda: Leaf(9), zero=None
    ),
    Kind(
        "list_ref",
        list[Leaf],
        lambda: [[], [Leaf(1)], [Leaf(1), Leaf(1), Leaf(2)]],
        default_factory=lambda: [Leaf(9)],
        zero=list,
    ),
    Kind(
        "list_opt_ref",
        list[Leaf | None],
        lambda: [[], [None, Leaf(1), None]],
        default_factory=lambda: [None],
        zero=list,
    ),
    Kind(
        "dict_str_ref",
        dict[str, Leaf],
        lambda: [{}, {"a": Leaf(1), "b": Leaf(2)}],
        default_factory=lambda: {"a": Leaf(9)},
        zero=dict,
    ),
    Kind(
        "dict_ref_key",
        dict[Leaf, int],
        lambda: [{}, {Leaf(1): 1, Leaf(2): 2}],
        default_factory=dict,
        zero=dict,
    ),
    Kind(
        "set_ref",
        set[Leaf],
        lambda: [set(), {Leaf(1), Leaf(2), Leaf(1)}],
        default_factory=set,
        zero=set,
    ),
    Kind(
        "tuple_ref",
        tuple[Leaf, ...],
        lambda: [(), (Leaf(1), Leaf(2))],
        default=(),
        zero=(),
    ),
    # Optional containers: None and the empty container are different values.
    Kind(
        "opt_list",
        list[int] | None,
        lambda: [None, [], [1], [0, 2**70]],
        default_factory=lambda: [1],
        zero=None,
    ),
    Kind("opt_dict", dict[str, int] | None, lambda: [None, {}, {"a": 1}], default=None, zero=None),
    Kind("opt_var_tuple", tuple[int, ...] | None, lambda: [None, (), (1,)], default=(), zero=None),
    Kind(
        "opt_bytearray",
        bytearray | None,
        lambda: [None, bytearray(), bytearray(b"x")],
        default=None,
        zero=None,
    ),
    Kind(
        "list_opt_list",
        list[list[int] | None],
        lambda: [[], [None, [], [1]]],
        default_factory=lambda: [None],
        zero=list,
    ),
    # Containers of polymorphic values.
    Kind(
        "list_union",
        list[Leaf | int | None],
        lambda: [[], [None, 0, Leaf(1), 2**70, Leaf(0)]],
        default_factory=lambda: [0],
        zero=list,
    ),
    Kind(
        "dict_str_base",
        dict[str, Shape],
        lambda: [{}, {"s": Shape("s"), "c": Circle("c", 0.5), "q": Square("q", 1, Color.RED)}],
        default_factory=dict,
        zero=dict,
    ),
    Kind(
        "tuple_base_int",
        tuple[Shape, int],
        lambda: [(Shape(""), 0), (Circle("c", 1.0), -1)],
        default_factory=lambda: (Shape("d"), 1),
    ),
    Kind(
        "set_union",
        set[int | str],
        lambda: [set(), {1, "1", 2**70, ""}],
        default_factory=lambda: {1},
        zero=set,
    ),
    Kind(
        "list_object",
        list[object],
        _poly_samples_as_lists,
        default_factory=lambda: [None],
        zero=list,
    ),
    Kind(
        "dict_any_any",
        dict[Any, Any],
        lambda: [{}, {1: "a", "b": [2], (3, "c"): {4}, None: b"", 1.5: Leaf(1), b"k": False}],
        default_factory=dict,
        zero=dict,
    ),
    Kind(
        "poly_base",
        Shape,
        lambda: [Shape("s"), Circle("c", 1.5), Square("q", 3, Color.GREEN)],
        default_factory=lambda: Shape("default"),
    ),
    Kind(
        "poly_opt_base",
        Shape | None,
        lambda: [None, Shape(""), Circle("c", -0.0), Square("q", 0, Color.RED)],
        default=None,
        zero=None,
    ),
    Kind(
        "poly_union_refs",
        Circle | Square,
        lambda: [Circle("c", 2.0), Square("q", 1, Color.BLUE)],
        default_factory=lambda: Circle("d", 1.0),
    ),
    Kind(
        "poly_union_mixed",
        int | str | Leaf | None,
        lambda: [None, 0, 5, 2**90, "", "s", Leaf(2)],
        default=5,
        zero=None,
    ),
    Kind("poly_object", object, _poly_samples, default=None, zero=None),
    Kind("poly_any", Any, _poly_samples, default=None, zero=None),
    # Defaults that are == to other values of other types (0 == False == 0.0, 1 == Level.LOW,
    # [1] == [True] == [1.0]): a writer that drops "default-equal" values must compare
    # types too, or these load as the default's type.
    Kind("poly_default_zero", object, lambda: [False, 0.0, -0.0, 0, None], default=0, zero=None),
    Kind("poly_default_one", Any, lambda: [1, True, 1.0, Level.LOW], default=1, zero=None),
    Kind(
        "poly_default_list",
        object,
        lambda: [[1], [True], [1.0], (1,), {1}],
        default_factory=lambda: [1],
        zero=None,
    ),
    Kind(
        "poly_default_enum",
        object,
        lambda: [Level.LOW, 1, Level.HIGH],
        default=Level.LOW,
        zero=None,
    ),
]

KINDS_BY_NAME = {k.name: k for k in KINDS}


def _holder(kind: Kind, slots: bool) -> type:
    """A savable class with one field ``v`` of this kind and its non-zero default."""
    prefix = "KS_" if slots else "K_"
    cls_name = f"{prefix}{kind.name}"
    if kind.default_factory is not UNSET:
        spec = dataclasses.field(default_factory=kind.default_factory)
    else:
        spec = dataclasses.field(default=kind.default)
    cls = dataclasses.make_dataclass(
        cls_name,
        [("v", kind.annotation, spec)],
        namespace={"__module__": __name__},
        eq=False,
        slots=slots,
    )
    cls = state.savable(name=f"tests.state.kinds.{cls_name}")(cls)
    globals()[cls_name] = cls
    return cls


HOLDERS: dict[tuple[str, bool], type] = {
    (k.name, slots): _holder(k, slots) for k in KINDS for slots in (False, True)
}


def holder(kind: Kind, slots: bool = False) -> type:
    return HOLDERS[kind.name, slots]


def zero_of(kind: Kind) -> Any:
    return kind.zero() if callable(kind.zero) else kind.zero

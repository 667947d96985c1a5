"""Random wait graphs: __after_load__ runs once per object in an order that respects every
wait edge, or loading fails with a StateError exactly when the wait edges form a cycle."""

from __future__ import annotations

from dataclasses import dataclass, field

from hypothesis import given, settings
from hypothesis import strategies as st

from ckpt import state

from .conftest import ENGINE_PAIRS

ORDER: list[int] = []


@state.savable(name="tests.state.random_hooks.W")
@dataclass(eq=False)
class W:
    ident: int = 0
    dep: W | None = state.field(wait=True, default=None)  # noqa: RUF009
    links: list[W] = field(default_factory=list)  # plain references: no ordering

    def __after_load__(self) -> None:
        ORDER.append(self.ident)


@state.savable(name="tests.state.random_hooks.SW")
@dataclass(eq=False, slots=True)
class SW:
    """A slots class in the same wait graph, with a polymorphic wait field."""

    ident: int = 0
    dep: object = state.field(wait=True, default=None)

    def __after_load__(self) -> None:
        ORDER.append(self.ident)


def _has_cycle(deps: list[int | None]) -> bool:
    for start in range(len(deps)):
        seen, cur = set(), start
        while cur is not None and cur not in seen:
            seen.add(cur)
            cur = deps[cur]
        if cur is not None:
            return True
    return False


@settings(max_examples=60)
@given(data=st.data())
def test_random_wait_graphs(data: st.DataObject) -> None:
    n = data.draw(st.integers(1, 9))
    kinds = data.draw(st.lists(st.booleans(), min_size=n, max_size=n))
    nodes: list[W | SW] = [SW(i) if slots else W(i) for i, slots in enumerate(kinds)]
    deps = [data.draw(st.none() | st.integers(0, n - 1)) for _ in range(n)]
    for node, dep in zip(nodes, deps, strict=True):
        node.dep = None if dep is None else nodes[dep]
        if isinstance(node, W):
            node.links = data.draw(st.lists(st.sampled_from(nodes), max_size=3))
    root = data.draw(st.permutations(nodes))
    cyclic = _has_cycle(deps)
    for save_with, load_with in ENGINE_PAIRS:
        stream = state.dumps(list(root), engine=save_with)
        ORDER.clear()
        if cyclic:
            try:
                state.loads(stream, engine=load_with)
            except state.StateError:
                continue
            raise AssertionError(f"wait cycle in {deps} loaded without a StateError")
        state.loads(stream, engine=load_with)
        assert sorted(ORDER) == list(range(n)), f"hooks ran {ORDER}"
        position = {ident: i for i, ident in enumerate(ORDER)}
        for ident, dep in enumerate(deps):
            if dep is not None:
                assert position[dep] < position[ident], (
                    f"{save_with}->{load_with}: {ident} waits on {dep} but ran first: {ORDER}"
                )

"""``bench state --filter`` builds only the shapes the chosen cases use."""

from __future__ import annotations

import pytest

from ckpt.bench import state_bench, state_models
from ckpt.errors import CkptError


def _refuse(*_args: object) -> object:
    raise AssertionError("a shape the filter excludes was built")


def test_a_filter_builds_only_the_shapes_it_chooses(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(state_models, "make_graph", _refuse)
    monkeypatch.setattr(state_models, "make_people", _refuse)
    cases = state_bench.build_cases(50, pattern="Encoding/fields")
    assert cases, "the filter chose nothing"
    assert {c.name for c in cases} == {"Encoding/fields"}
    assert {c.variant for c in cases} == set(state_bench.PEERS)


def test_a_shape_is_built_when_only_its_load_is_chosen(monkeypatch: pytest.MonkeyPatch) -> None:
    built: list[int] = []
    real = state_models.make_people

    def counting(n: int, *args: object) -> object:
        built.append(n)
        return real(n, *args)

    monkeypatch.setattr(state_models, "make_people", counting)
    cases = state_bench.build_cases(50, pattern="PeopleLoad/reflect")
    assert built == [50]
    assert [(c.name, c.variant) for c in cases] == [("PeopleLoad", "reflect")]


def test_a_filter_that_matches_nothing_names_every_benchmark() -> None:
    with pytest.raises(CkptError, match=r"matches no benchmark.*GraphSave/typed\+gc"):
        state_bench.build_cases(50, pattern="NoSuchShape")

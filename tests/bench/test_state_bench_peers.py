"""A peer that cannot save a shape (C pickle's fixed C-stack depth on Python 3.12 and
later, against a 20k-node graph) leaves its cells empty and says so; an engine of ours
that cannot is an error, never a gap in the table."""

from __future__ import annotations

from typing import Any

import pytest

from ckpt.bench import state_bench


def _too_deep(fail: str, real: Any) -> Any:
    def codecs(variant: str) -> Any:
        dumps, loads = real(variant)
        if variant != fail:
            return dumps, loads

        def refuse(_root: Any) -> bytes:
            raise RecursionError("maximum recursion depth exceeded while pickling an object")

        return refuse, loads

    return codecs


def test_a_peer_too_shallow_for_a_shape_is_left_out_with_a_note(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(state_bench, "_codecs", _too_deep("pickle", state_bench._codecs))
    cases = state_bench.build_cases(50, pattern="Encoding/fields")
    assert {c.variant for c in cases} == set(state_bench.PEERS) - {"pickle"}
    assert {c.name for c in cases} == {"Encoding/fields"}
    err = capsys.readouterr().err
    assert "note: pickle cannot save Encoding/fields on Python 3." in err
    assert "its cells stay empty" in err


def test_an_engine_that_recurses_too_deep_is_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(state_bench, "_codecs", _too_deep("typed", state_bench._codecs))
    with pytest.raises(RecursionError):
        state_bench.build_cases(50, pattern="Encoding/fields")

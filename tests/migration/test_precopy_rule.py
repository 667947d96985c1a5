"""Pre-copy's stopping rule (``precopy_policy.StopRule``), alone and through both of its
callers: ``checkpoint --pre-copy`` (``precopy.Rounds``, on a stand-in host whose memory
file dirties pages on a script) and ``ckpt migrate`` (``outgoing.Migration``, on a
stand-in sandbox and a fake destination).  Fed the same dirty counts, both run the
same rounds.  No sandbox is started."""

from __future__ import annotations

import threading
from pathlib import Path
from types import SimpleNamespace

import pytest

from ckpt.sandbox.host import precopy
from ckpt.sandbox.host.precopy_policy import FEW_DIRTY, GROWTH, MAX_ROUNDS, StopRule
from ckpt.sandbox.host.remote_image import ImageSession

from .source_kit import FakeDestination, StandIn, migrate

PAGES = 200  # allocated: the first round writes them all

# name: (pages dirty after each round, the rounds pre-copy runs, why it stops)
SCRIPTS = {
    "idle": ([0] * MAX_ROUNDS, 1, "pages dirty"),
    "few dirty after three": ([150, 120, 30] + [30] * MAX_ROUNDS, 3, "pages dirty"),
    "exactly the few": ([150, FEW_DIRTY] + [0] * MAX_ROUNDS, 2, "pages dirty"),
    "a round grew": ([100, 150, 150] + [150] * MAX_ROUNDS, 3, "more than"),
    "shrinking but many": ([190 - 10 * i for i in range(MAX_ROUNDS)], MAX_ROUNDS, "rounds"),
    "busy throughout": ([PAGES] * MAX_ROUNDS, MAX_ROUNDS, "rounds"),
}


def test_few_dirty_pages_stop() -> None:
    rule = StopRule()
    assert rule.after([PAGES], FEW_DIRTY) is not None
    assert rule.after([PAGES], 0) is not None
    assert rule.after([PAGES], FEW_DIRTY + 1) is None
    assert rule.after([PAGES, FEW_DIRTY]) is not None  # no dirty count: the last round's


def test_a_round_that_grew_over_ten_percent_stops() -> None:
    rule = StopRule()
    assert rule.after([1000, 1101], 900) is not None
    assert rule.after([1000, int(1000 * GROWTH)], 900) is None  # exactly 10%: not over
    assert rule.after([1000, 900], 900) is None
    assert rule.after([1101], 900) is None  # the first round has nothing to grow on


def test_max_rounds_stop() -> None:
    rule = StopRule(max_rounds=3)
    assert rule.after([900, 800], 700) is None
    assert rule.after([900, 800, 700], 650) == "3 rounds"


def test_shrinking_many_dirty_continues() -> None:
    rule = StopRule()
    written = [PAGES]
    for dirty in (180, 160, 140):
        assert rule.after(written, dirty) is None
        written.append(dirty)


class ScriptedMemory:
    """A memory file whose workload dirties ``script[r]`` pages while round ``r`` runs."""

    def __init__(self, pages: int, script: list[int]) -> None:
        self.refs = {i: 1 for i in range(pages)}
        self.dirty: set[int] = set(self.refs)
        self.script = list(script)
        self.takes = 0

    def take_dirty(self, record: bool = False) -> list[int]:
        taken = sorted(self.dirty)
        n = self.script[self.takes]
        self.takes += 1
        self.dirty = set(range(n))  # written while the round runs: the next round's
        return taken

    def dirty_count(self) -> int:
        return len(self.dirty)

    def mark_dirty(self, frames: list[int]) -> None:
        self.dirty.update(frames)

    def pages(self, frames: list[int]):  # type: ignore[no-untyped-def]
        for f in frames:
            yield f, bytes([1 + f % 250]) * 4096


def _host(script: list[int]) -> SimpleNamespace:
    kernel = SimpleNamespace(memory_file=ScriptedMemory(PAGES, script), workload="kv:1")
    return SimpleNamespace(
        kernel=kernel,
        cond=threading.Condition(),
        id="s1",
        last_dump=None,
        images=ImageSession(),
    )


def _precopy_rounds(tmp_path: Path, script: list[int]) -> list[dict]:
    rounds = precopy.Rounds(_host(script), {"image": str(tmp_path / "img")})
    try:
        return rounds.run().results
    finally:
        rounds.discard()


def _migrate(tmp_path: Path, script: list[int], monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    """One migration of a stand-in whose rounds dirty pages on ``script``."""
    sandbox = StandIn(pages=PAGES, dirty=list(script))
    out = migrate(tmp_path, sandbox, FakeDestination(), monkeypatch)
    assert out.error is None, out.error
    return out


@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_checkpoint_pre_copy_stops_by_the_rule(tmp_path: Path, name: str, watchdog) -> None:
    script, want, why = SCRIPTS[name]
    results = _precopy_rounds(tmp_path, script)
    assert len(results) == want, [(r["pages_written"], r["dirty_after"]) for r in results]
    assert [r["pages_written"] for r in results] == [PAGES, *script[: want - 1]]
    assert why in results[-1]["stop"]
    assert all("stop" not in r for r in results[:-1])


@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_migrate_stops_by_the_same_rule(
    tmp_path: Path, name: str, monkeypatch: pytest.MonkeyPatch, watchdog
) -> None:
    script, want, why = SCRIPTS[name]
    out = _migrate(tmp_path, script, monkeypatch)
    rounds = [r for r in out.report.rounds if not r.get("final")]
    assert out.sandbox.pre_dumps == len(rounds) == want
    assert [r["pages_written"] for r in rounds] == [PAGES, *script[: want - 1]]
    assert why in rounds[-1]["stop"]
    pre = tmp_path / "pre"
    pre.mkdir()
    assert len(_precopy_rounds(pre, script)) == want  # the same rounds as checkpoint's


def test_migrate_counts_memory_in_pages_of_page_size(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, watchdog
) -> None:
    from ckpt.statefile.format import PAGE_SIZE

    out = _migrate(tmp_path, SCRIPTS["idle"][0], monkeypatch)
    assert out.report.memory_bytes == 8 * PAGE_SIZE  # the stand-in stores 8 pages a round


def test_migrate_with_rounds_zero_runs_none(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, watchdog
) -> None:
    sandbox = StandIn(pages=PAGES, dirty=[PAGES] * MAX_ROUNDS)
    out = migrate(tmp_path, sandbox, FakeDestination(), monkeypatch, rounds=0)
    assert out.error is None and sandbox.pre_dumps == 0

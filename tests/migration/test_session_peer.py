"""The destination's session against a hostile or broken source, in process: every bad
offer, index, offset or count is refused in one line, and nothing is left under the
root.  No sandbox is started: each case fails before a restore would begin."""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from ckpt.migration import (
    Ack,
    ErrorCode,
    FrameError,
    MigrationError,
    Offer,
    PageRuns,
    PeerError,
    RoundEnd,
    StateChunk,
    pack_pages,
)
from ckpt.migration.incoming import INCOMING_DIR, sweep
from ckpt.migration.session import Exists, receive
from ckpt.sandbox.wire.paths import STOPPED, Root, SandboxState
from tests.sandbox.conftest import sandbox_processes

from .conftest import open_pair

PAGE = b"\x01" * 4096


@pytest.fixture(autouse=True)
def no_template(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    """An accepted offer warms the root's template: none here (nothing is restored),
    and none may be left running."""
    monkeypatch.setenv("CKPT_TEMPLATE", "0")
    yield
    assert sandbox_processes(tmp_path / "root") == []


def _offer(**kw) -> Offer:  # type: ignore[no-untyped-def]
    fields = {
        "sandbox_id": "s1",
        "workload": "kv:1",
        "engine": "",
        "pages": 1 << 20,
        "nonce": bytes(32),
    }
    return Offer(**{**fields, **kw})


def _run(tmp_path: Path, script) -> BaseException:  # type: ignore[no-untyped-def]
    """Run ``receive`` against ``script(client)``; returns what ``receive`` raised."""
    root = Root(tmp_path / "root")
    root.ensure()
    client, server = open_pair(server_options={"io_timeout": 5})
    got: dict[str, BaseException] = {}

    def dest() -> None:
        try:
            receive(server, root)
        except BaseException as exc:
            got["exc"] = exc
        finally:
            server.close()

    t = threading.Thread(target=dest, daemon=True)
    t.start()
    try:
        script(client)
    except MigrationError:
        pass  # the destination gave up first and told us: expected
    finally:
        t.join(30)
        client.close()
    assert not t.is_alive()
    incoming = root.path / INCOMING_DIR
    assert not incoming.exists() or os.listdir(incoming) == []
    assert root.ids() == []
    return got["exc"]


def _accepted(client, offer: Offer | None = None) -> None:  # type: ignore[no-untyped-def]
    client.send(offer or _offer())
    assert isinstance(client.recv(), Ack)


@pytest.mark.parametrize(
    ("offer", "reason"),
    [
        (_offer(sandbox_id="../etc"), "bad sandbox ID"),
        (_offer(sandbox_id=""), "bad sandbox ID"),
        (_offer(pages=0), "0 pages"),
        (_offer(pages=1 << 40), f"{1 << 40} pages"),
        (_offer(engine="pickle"), "unknown engine"),
        (_offer(cpus=float("nan")), "CPU quota of nan"),
        (_offer(port=70000), "port 70000"),
        (_offer(nonce=b""), "0-byte nonce"),
        (_offer(nonce=bytes(31)), "31-byte nonce"),
    ],
)
def test_a_bad_offer_is_refused(tmp_path: Path, offer: Offer, reason: str, watchdog) -> None:
    """Refused with an Error that says why: the source does not see only a closed link."""
    told: list[PeerError] = []

    def script(client) -> None:  # type: ignore[no-untyped-def]
        client.send(offer)
        try:
            client.recv()
        except PeerError as exc:
            told.append(exc)

    assert isinstance(_run(tmp_path, script), FrameError)
    assert len(told) == 1 and told[0].code == ErrorCode.REFUSED
    assert reason in str(told[0]) and "refused the offer" in str(told[0])


def test_a_session_must_begin_with_an_offer(tmp_path: Path, watchdog) -> None:
    told: list[PeerError] = []

    def script(client) -> None:  # type: ignore[no-untyped-def]
        client.send(pack_pages(0, [(0, PAGE)]))
        try:
            client.recv()
        except PeerError as exc:
            told.append(exc)

    assert isinstance(_run(tmp_path, script), FrameError)
    assert len(told) == 1 and "began with a PageRuns" in str(told[0])


def test_a_state_stream_past_the_bound_is_refused_where_it_crosses(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, watchdog
) -> None:
    """The destination refuses the chunk that crosses its state bound, says so, and
    reads no further: a peer cannot make it write (or hold) state without end."""
    from ckpt.migration import incoming

    bound, chunk = 64 << 10, 16 << 10
    monkeypatch.setattr(incoming, "MAX_STATE_BYTES", bound)
    root = Root(tmp_path / "root")
    root.ensure()
    client, server = open_pair(server_options={"io_timeout": 5})
    got: dict[str, BaseException] = {}

    def dest() -> None:
        try:
            receive(server, root)
        except BaseException as exc:
            got["exc"] = exc

    t = threading.Thread(target=dest, daemon=True)
    t.start()
    told: list[PeerError] = []
    try:
        _accepted(client)
        sent = 0
        with contextlib.suppress(MigrationError):  # refused mid-stream: sends may fail
            for _ in range(2 * bound // chunk):
                client.send(StateChunk(offset=sent, data=os.urandom(chunk)))
                sent += chunk
            client.send(RoundEnd(round=0, pages=0, state_bytes=sent))
        try:
            client.recv()
        except PeerError as exc:
            told.append(exc)
    finally:
        t.join(30)
        client.close()
    assert not t.is_alive()
    assert isinstance(got["exc"], FrameError)
    assert len(told) == 1 and f"exceeds {bound} bytes" in str(told[0])
    # what it read: the offer, the chunks up to the bound and the one that crossed it
    assert server.bytes_received <= bound + chunk + 1024
    assert root.ids() == [] and os.listdir(root.path / INCOMING_DIR) == []


def test_an_existing_id_is_refused_with_its_code(tmp_path: Path, watchdog) -> None:
    root = Root(tmp_path / "root")
    root.ensure()
    root.write(SandboxState("s1", 0, STOPPED, "kv:1", None, "now"))
    client, server = open_pair()
    raised: list[BaseException] = []

    def dest() -> None:
        try:
            receive(server, root)
        except BaseException as exc:
            raised.append(exc)

    t = threading.Thread(target=dest, daemon=True)
    t.start()
    client.send(_offer())
    with pytest.raises(PeerError, match="already exists") as info:
        client.recv()
    assert info.value.code == 2
    t.join(30)
    assert isinstance(raised[0], Exists)
    assert root.read("s1").status == STOPPED  # its record untouched


def _pages(client, round_no: int, indices: list[int]) -> None:  # type: ignore[no-untyped-def]
    client.send(pack_pages(round_no, [(i, PAGE) for i in indices]))


def _end(c, n: int, **kw) -> None:  # type: ignore[no-untyped-def]
    c.send(RoundEnd(round=0, pages=n, **kw))


# name: (what the source sends after its accepted offer, what the refusal says)
BAD_STREAMS = {
    "descending pages across frames": (
        lambda c: (_pages(c, 0, [5, 6]), _pages(c, 0, [3]), _end(c, 3)),
        "out of order or range",
    ),
    "a page past the offer's bound": (
        lambda c: (_pages(c, 0, [1 << 20]), _end(c, 1)),
        "out of order or range",
    ),
    "pages of another round": (lambda c: (_pages(c, 1, [0]), _end(c, 1)), "inside image 0"),
    "fewer pages than announced": (
        lambda c: (_pages(c, 0, [0, 1]), _end(c, 3)),
        "not as announced",
    ),
    "a round numbered wrong": (
        lambda c: (_pages(c, 0, [0]), c.send(RoundEnd(round=4, pages=1))),
        "not as announced",
    ),
    "a state chunk at a gap": (
        lambda c: (
            c.send(StateChunk(offset=0, data=b"x" * 10)),
            c.send(StateChunk(offset=20, data=b"y", last=True)),
            _pages(c, 0, [0]),
            _end(c, 1, final=True, state_bytes=11),
        ),
        "state chunks out of order",
    ),
    "state in a round said not final": (
        lambda c: (
            c.send(StateChunk(offset=0, data=b"x", last=True)),
            _pages(c, 0, [0]),
            _end(c, 1, final=False, state_bytes=1),
        ),
        "state stream not as announced",
    ),
    "an offer in the middle": (
        lambda c: (_pages(c, 0, [0]), c.send(_offer())),
        "OFFER inside image 0",
    ),
    "corrupt page data": (
        lambda c: (c.send(PageRuns(round=0, runs=[(0, 2)], codec=1, data=b"zz")), _end(c, 2)),
        "do not decompress",
    ),
}


@pytest.mark.parametrize("name", sorted(BAD_STREAMS))
def test_a_bad_stream_is_refused_and_nothing_is_kept(tmp_path: Path, name: str, watchdog) -> None:
    stream, says = BAD_STREAMS[name]

    def script(client) -> None:  # type: ignore[no-untyped-def]
        _accepted(client)
        stream(client)
        client.recv()

    exc = _run(tmp_path, script)
    assert isinstance(exc, FrameError), exc
    assert says in str(exc) and "\n" not in str(exc)


def test_sweep_removes_only_a_dead_servers_directories(tmp_path: Path) -> None:
    base = tmp_path / INCOMING_DIR
    base.mkdir()
    dead = base / "s1.999999999.abcd1234"
    alive = base / f"s2.{os.getppid()}.abcd1234"
    other = base / "notes"
    for d in (dead, alive, other):
        d.mkdir()
    assert sweep(tmp_path) == [dead.name]
    assert sorted(os.listdir(base)) == sorted([alive.name, other.name])

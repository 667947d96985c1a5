"""What a destination accepts of a source's connection states: checked before anything
is made of them (the channel is authenticated, but a peer is still not trusted)."""

from __future__ import annotations

import msgspec
import pytest

from ckpt.migration import FrameError, connections
from ckpt.sandbox.wire import tcprepair

IP = "198.18.0.110"


def _state(**kw: object) -> tcprepair.TcpState:
    base: dict[str, object] = dict(local_ip=IP, local_port=8080, remote_ip="198.18.0.3",
                                   remote_port=40000, snd_seq=1, rcv_seq=2)  # fmt: skip
    base.update(kw)
    return tcprepair.TcpState(**base)  # type: ignore[arg-type]


def test_states_of_the_sandboxs_own_address_are_taken() -> None:
    data = tcprepair.encode([_state(), _state(remote_port=40001, recv_queue=b"GET /")])
    assert connections.received(data, IP) == data


def test_no_connections_at_all_is_fine() -> None:
    assert connections.received(tcprepair.encode([]), IP) == tcprepair.encode([])


def test_a_connection_on_another_address_is_refused() -> None:
    data = tcprepair.encode([_state(), _state(local_ip="198.18.0.111")])
    with pytest.raises(FrameError, match="another address"):
        connections.received(data, IP)


@pytest.mark.parametrize(
    "data",
    [
        b"\x91\xc1",
        msgspec.msgpack.encode([{"local_ip": IP}]),
        tcprepair.encode([_state(unsent=10, send_queue=b"abc")]),
    ],
    ids=["garbage", "missing fields", "more unsent than queued"],
)
def test_malformed_states_are_refused(data: bytes) -> None:
    with pytest.raises(FrameError, match="bad connection state"):
        connections.received(data, IP)


def test_oversized_states_are_refused_before_decoding(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(connections, "MAX_STATES_BYTES", 16)
    with pytest.raises(FrameError, match="over 16 bytes"):
        connections.received(tcprepair.encode([_state()]), IP)


def _offer(**kw: object) -> object:
    from ckpt.migration import Offer

    base: dict[str, object] = dict(sandbox_id="web1", workload="http", engine="", pages=16,
                                   nonce=bytes(32), ip=IP, prefix=24, mac="02:00:00:00:00:01")  # fmt: skip
    base.update(kw)
    return Offer(**base)  # type: ignore[arg-type]


def test_an_offered_bridge_is_an_interface_name_for_a_sandbox_with_an_address() -> None:
    from ckpt.migration.session import check_offer

    check_offer(_offer(bridge="sbr"))  # type: ignore[arg-type]
    for bad in (_offer(bridge="-o evil"), _offer(bridge="x" * 16),
                _offer(bridge="sbr", ip=None, prefix=None, mac=None)):  # fmt: skip
        with pytest.raises(FrameError, match="bridge"):
            check_offer(bad)  # type: ignore[arg-type]

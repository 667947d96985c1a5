"""The typed control protocol: every verb round-trips, and anything else is refused
with a reason rather than guessed at."""

from __future__ import annotations

import msgspec
import pytest

from ckpt.sandbox.wire import protocol as p

REQUESTS = [
    p.PingRequest(),
    p.BootRequest(workload="memory:4", options={"seed": 3}, port=8080),
    p.RestoreRequest(image="/img", engine="typed", background=True, port=None),
    p.CheckpointRequest(image="/img", leave_running=True, level=3, drain_timeout=1.5),
    p.PauseRequest(),
    p.ResumeRequest(),
    p.FingerprintRequest(),
    p.ConnectionsRequest(op=p.Step.CUT, net={"ip": "198.18.0.9", "prefix": 24}, path="/w/c"),
    p.StopRequest(),
    p.TasksRequest(limit=10),
    p.CountersRequest(),
    p.SendRequest(pre_dump=False, after="ab" * 16, level=3),
    p.SendRequest(pre_dump=False, post_copy=True),
    p.PagesRequest(),
]


@pytest.mark.parametrize("request_", REQUESTS, ids=lambda r: p.verb_of(r))
def test_every_request_round_trips_as_its_own_type(request_: p.Request) -> None:
    line = p.encode(request_)
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    back = p.decode_request(line)
    assert type(back) is type(request_)
    assert back == request_
    assert msgspec.json.decode(line)["verb"] == p.verb_of(request_)


def test_every_request_type_has_a_reply_type() -> None:
    assert set(p.REPLIES) == {type(r) for r in REQUESTS}
    assert {p.verb_of(r) for r in REQUESTS} == {v.value for v in p.Verb}


def test_a_reply_decodes_as_its_verbs_type_with_enums() -> None:
    reply = p.RestoreReply(
        address="127.0.0.1:80",
        workload="http",
        restore_ns=5,
        cpu_usec=7,
        listener=p.Listener.BOUND_ANEW,
        bind_reason=p.BindReason.OTHER_SANDBOX,
        counters={"pages_restored": 3, "lazy_pages": False},
    )
    env = p.decode_envelope(p.ok(reply))
    assert env.ok
    back = p.decode_reply(p.RestoreRequest(image="/x"), env.result)
    assert back == reply
    assert back.listener is p.Listener.BOUND_ANEW
    assert back.bind_reason is p.BindReason.OTHER_SANDBOX


def test_a_failure_carries_the_error_class_and_message() -> None:
    env = p.decode_envelope(p.failure("SandboxBusy", "busy with checkpoint"))
    assert (env.ok, env.kind, env.error) == (False, "SandboxBusy", "busy with checkpoint")
    assert bytes(env.result) == b"null"


def test_another_protocol_version_is_named_not_guessed() -> None:
    newer = b'{"verb":"checkpoint","protocol":2,"image":"/x","shiny":true}\n'
    with pytest.raises(p.ProtocolMismatch, match="protocol 2, this sandbox speaks 1"):
        p.decode_request(newer)
    older = b'{"verb":"ping","protocol":0}\n'
    with pytest.raises(p.ProtocolMismatch, match="protocol 0"):
        p.decode_request(older)
    before_types = b'{"method":"checkpoint","params":{"image":"/x"}}\n'
    with pytest.raises(p.ProtocolMismatch, match="protocol 0"):
        p.decode_request(before_types)


@pytest.mark.parametrize(
    "line",
    [
        b"",
        b"not json\n",
        b"[1, 2]\n",
        b'{"verb":"format-disk","protocol":1}\n',
        b'{"verb":"checkpoint","protocol":1}\n',  # no image
        b'{"verb":"checkpoint","protocol":1,"image":7}\n',
        b'{"verb":"restore","protocol":1,"image":"/x","unknown":1}\n',
        b'{"verb":"boot","protocol":1,"workload":"http","port":"80"}\n',
    ],
)
def test_malformed_requests_are_refused(line: bytes) -> None:
    with pytest.raises(p.BadRequest):
        p.decode_request(line)


def test_an_unknown_enum_value_in_a_reply_is_refused() -> None:
    raw = msgspec.json.encode(
        {"address": None, "workload": "x", "restore_ns": 1, "cpu_usec": 1, "listener": "??"}
    )
    with pytest.raises(msgspec.ValidationError):
        p.decode_reply(p.RestoreRequest(image="/x"), raw)


def test_outcomes_the_sandbox_reports_round_trip_as_enums() -> None:
    """A hold that got no answer is UNKNOWN (the template may have the sockets), and a
    held listener that no longer listens is a reason of its own."""
    ck = p.CheckpointReply(
        checkpoint_ns=1,
        cpu_usec=1,
        stopping=True,
        handover=p.Handover.UNKNOWN,
        handover_detail="the template did not answer in time",
    )
    back = p.decode_reply(p.CheckpointRequest(image="/x"), p.decode_envelope(p.ok(ck)).result)
    assert back.handover is p.Handover.UNKNOWN and back == ck
    rs = p.RestoreReply(
        address="127.0.0.1:1",
        workload="http",
        restore_ns=1,
        cpu_usec=1,
        listener=p.Listener.BOUND_ANEW,
        bind_reason=p.BindReason.NOT_LISTENING,
        held_for="web",
    )
    back = p.decode_reply(p.RestoreRequest(image="/x"), p.decode_envelope(p.ok(rs)).result)
    assert back.bind_reason is p.BindReason.NOT_LISTENING and back.held_for == "web"


def test_only_reasons_where_nothing_held_the_sockets_count_as_lost() -> None:
    """The restore's note that clients were refused rests on this, not on words."""
    lost = {r for r in p.BindReason if r.sockets_lost}
    assert lost == {
        p.BindReason.NO_TEMPLATE,
        p.BindReason.TEMPLATE_UNREACHABLE,
        p.BindReason.NOTHING_HELD,
    }

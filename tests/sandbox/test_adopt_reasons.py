"""Why a restore found nothing to adopt, as its bind error will say it: a template
socket nobody listens on means no template runs, so none can hold the port, and the
error must not send the user to stop one."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from ckpt.sandbox.wire import handover
from ckpt.sandbox.wire.protocol import BindReason


def test_a_missing_template_socket_is_no_template(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(handover.ENV, str(tmp_path / "gone.sock"))
    listener, conns, reason, why = handover.adopt("web")
    assert (listener, conns, reason, why) == (None, [], BindReason.NO_TEMPLATE, "no template")


def test_a_socket_nobody_listens_on_is_no_template(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "dead.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as bound:
        bound.bind(str(path))  # bound, never listening: connect is refused
        monkeypatch.setenv(handover.ENV, str(path))
        assert handover.adopt("web")[2] is BindReason.NO_TEMPLATE


def test_a_template_that_does_not_answer_is_unreachable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "mute.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as mute:
        mute.bind(str(path))
        mute.listen(1)  # accepts into its backlog, never answers
        monkeypatch.setenv(handover.ENV, str(path))
        monkeypatch.setattr(handover, "ADOPT_TIMEOUT_S", 0.2)
        assert handover.adopt("web")[2] is BindReason.TEMPLATE_UNREACHABLE

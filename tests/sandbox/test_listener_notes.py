"""What a restore tells the user about its listening socket is decided on the typed
outcome (``Listener``, ``BindReason``), whatever words the reason carries."""

from __future__ import annotations

import pytest

from ckpt.sandbox.client import outcomes
from ckpt.sandbox.wire import protocol as p


def _reply(reason: p.BindReason | None, detail: str = "", listener=p.Listener.BOUND_ANEW):
    return p.RestoreReply(
        address="127.0.0.1:1",
        workload="http",
        restore_ns=1,
        cpu_usec=1,
        listener=listener,
        bind_reason=reason,
        bind_detail=detail,
    )


@pytest.mark.parametrize("detail", ["no template", "nothing held", "words that changed"])
def test_sockets_a_checkpoint_handed_over_and_lost_are_said(detail: str) -> None:
    notes = outcomes.listener_notes(_reply(p.BindReason.NOTHING_HELD, detail), True)
    assert len(notes) == 1 and "are gone" in notes[0]


def test_no_template_without_a_handover_says_clients_were_refused() -> None:
    notes = outcomes.listener_notes(_reply(p.BindReason.TEMPLATE_UNREACHABLE, "x"), False)
    assert len(notes) == 1 and "no template held the listening socket" in notes[0]
    assert outcomes.listener_notes(_reply(p.BindReason.NOTHING_HELD), False) == []


@pytest.mark.parametrize(
    "reason", [p.BindReason.OTHER_PORT, p.BindReason.OTHER_SANDBOX, p.BindReason.REFUSED]
)
def test_a_restore_that_chose_to_bind_elsewhere_says_nothing(reason: p.BindReason) -> None:
    """Even when its words mention a template (a refusal's text is the template's)."""
    assert outcomes.listener_notes(_reply(reason, "(no template here)"), True) == []


def test_a_handed_over_listener_says_nothing() -> None:
    assert outcomes.listener_notes(_reply(None, listener=p.Listener.HANDED_OVER), True) == []

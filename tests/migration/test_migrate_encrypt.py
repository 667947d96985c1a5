"""``ckpt migrate --encrypt`` between two roots on loopback, through a relay that keeps
what the source sends: a value PUT into the sandbox is readable on the wire without
``--encrypt`` (so the check can fail) and not with it; a source without ``--encrypt``
is refused by ``serve --encrypt`` on both sides; ``--encrypt`` without ``--key-file``
is refused before anything moves.  In every refusal the sandbox runs on."""

from __future__ import annotations

import os

import pytest

from tests.sandbox.kv_client import check_values, put_values

from .migrate_kit import Hosts, address, leftovers, running
from .test_migrate_loopback import _one_line_error
from .wiretap import Tap, readable

pytestmark = pytest.mark.slow
SID = f"sealmig-{os.getpid()}"


def _secret() -> bytes:
    return b"TOPSECRET-" + os.urandom(12).hex().encode()


def _run_with(hosts: Hosts, sid: str, value: bytes) -> dict[str, bytes]:
    hosts.src("run", sid, "--workload", "kv:16", "--port", "0", timeout=120)
    acked = put_values(address(hosts.src, sid), [("secret", value)])
    assert acked == {"secret": value}
    return acked


def _migrate_tapped(hosts: Hosts, sid: str, *argv: str) -> bytes:
    serve = hosts.serve()
    host, _, port = serve.address.rpartition(":")
    tap = Tap((host, int(port)))
    try:
        proc = hosts.src(
            "migrate", sid, "--to", tap.address, "--key-file", str(hosts.key), "--port", "0",
            *argv, check=False, timeout=180,
        )  # fmt: skip
    finally:
        tap.close()
    assert proc.returncode == 0, proc.stderr
    return readable(bytes(tap.sent))


def test_pages_are_sealed_on_the_wire_with_encrypt_and_readable_without(hosts: Hosts) -> None:
    plain, sealed = _secret(), _secret()
    acked_plain = _run_with(hosts, f"{SID}-p", plain)
    acked_sealed = _run_with(hosts, f"{SID}-s", sealed)
    seen = _migrate_tapped(hosts, f"{SID}-p")
    assert plain in seen  # the listener's eye works: it reads an unsealed migration
    seen = _migrate_tapped(hosts, f"{SID}-s", "--encrypt")
    assert sealed not in seen and sealed[10:] not in seen
    assert sorted(running(hosts.dst)) == [f"{SID}-p", f"{SID}-s"]
    check_values(address(hosts.dst, f"{SID}-p"), acked_plain)
    check_values(address(hosts.dst, f"{SID}-s"), acked_sealed)
    assert leftovers(hosts) == []


def test_serve_encrypt_refuses_a_source_without_it_on_both_sides(hosts: Hosts) -> None:
    _run_with(hosts, SID, _secret())
    serve = hosts.serve(None, "--encrypt")
    line = _one_line_error(hosts.migrate(SID, serve))
    assert "accepts only encrypted migrations" in line and "--encrypt" in line
    assert f"{SID} runs on here as before" in line
    assert running(hosts.src) == [SID] and running(hosts.dst) == []
    refused = [x for x in serve.lines() if "refused a peer" in x]
    assert len(refused) == 1 and "did not ask for an encrypted channel" in refused[0]
    proc = hosts.migrate(SID, serve, "--encrypt")
    assert proc.returncode == 0, proc.stderr
    assert running(hosts.dst) == [SID] and running(hosts.src) == []
    assert leftovers(hosts) == []


@pytest.mark.parametrize("tls", [False, True])
def test_encrypt_without_a_key_file_is_refused_before_anything_moves(
    hosts: Hosts, tls: bool
) -> None:
    _run_with(hosts, SID, _secret())
    extra = ["--tls-ca", str(hosts.tmp / "ca.pem")] if tls else []
    proc = hosts.src("migrate", SID, "--to", "127.0.0.1:9", "--encrypt", *extra, check=False)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr  # a usage error
    line = lines[0]
    assert "--encrypt" in line and "--key-file" in line and "TLS" in line
    assert running(hosts.src) == [SID]
    assert hosts.src.state(SID)["status"] == "running"
    assert leftovers(hosts) == []


def test_post_copy_pages_are_sealed_too(hosts: Hosts) -> None:
    """The pages that follow the resume (pushed and faulted) go on the same channel."""
    value = _secret()
    acked = _run_with(hosts, SID, value)
    seen = _migrate_tapped(hosts, SID, "--encrypt", "--post-copy", "--rounds", "0")
    assert value not in seen and value[10:] not in seen
    assert running(hosts.dst) == [SID] and running(hosts.src) == []
    check_values(address(hosts.dst, SID), acked)
    assert leftovers(hosts) == []

"""``kv:N``: values kept in the sandbox's memory, its HTTP contract, and a checkpoint that
brings back every acknowledged value."""

from __future__ import annotations

import socket
import string
import threading
from collections.abc import Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ckpt.errors import KernelError
from ckpt.kernel import Kernel, build_workload
from ckpt.kernel.programs import KV_MAX_VALUE, KvServer, kv_slot_class
from ckpt.sandbox.host import http

from .conftest import through_image

MIB = 1 << 20
KEY_CHARS = string.ascii_letters + string.digits + "_.-"


def kv(n: int = 1, seed: int = 0) -> Kernel:
    k = build_workload(f"kv:{n}", seed=seed)
    k.set_http_listen_address("127.0.0.1", 40000)
    return k


def server(k: Kernel) -> KvServer:
    assert k.http is not None and isinstance(k.http.server.program, KvServer)
    return k.http.server.program


def digest(k: Kernel) -> str:
    status, body = k.http_request("GET", "/memory")
    assert status == 200 and isinstance(body, dict)
    return str(body["memory_sha256"])


def value(i: int, n: int) -> bytes:
    return (b"%08d:" % i + bytes(range(256)) * (n // 256 + 1))[:n]


# -- the contract ---------------------------------------------------------------------------
def test_put_then_get_returns_the_bytes_and_a_missing_key_is_404():
    k = kv()
    assert k.http_request("PUT", "/kv/greeting", b"hello") == (
        200,
        {"key": "greeting", "bytes": 5},
    )
    assert k.http_request("GET", "/kv/greeting") == (200, b"hello")
    assert k.http_request("GET", "/kv/greeting?fresh=1") == (200, b"hello")
    status, body = k.http_request("GET", "/kv/absent")
    assert status == 404 and "absent" in body["error"]
    status, body = k.http_request("DELETE", "/kv/greeting")
    assert status == 405 and "PUT" in body["error"]
    status, body = k.http_request("GET", "/")  # every other route answers as memory:N
    assert status == 200 and body["memory_mib"] == 1


@pytest.mark.parametrize("key", ["a", "Z" * 128, KEY_CHARS[:128], "v1.2_x-y", "..", "-"])
def test_keys_of_1_to_128_allowed_characters_are_accepted(key):
    k = kv()
    assert k.http_request("PUT", f"/kv/{key}", key.encode())[0] == 200
    assert k.http_request("GET", f"/kv/{key}") == (200, key.encode())


@pytest.mark.parametrize("key", ["", "a" * 129, "a/b", "a b", "a%20b", "é", "a:b", "a\x00"])
def test_bad_keys_are_400_and_store_nothing(key):
    k = kv()
    before = digest(k)
    for method in ("PUT", "GET"):
        status, body = k.http_request(method, f"/kv/{key}", b"x")
        assert status == 400 and "1-128" in body["error"]
    assert server(k).index == {} and digest(k) == before


@pytest.mark.parametrize("size", [0, 1, 63, 64, 65, 4096, 4097, KV_MAX_VALUE - 1, KV_MAX_VALUE])
def test_values_up_to_64_kib_round_trip_at_every_boundary(size):
    k = kv()
    data = value(size, size)
    assert k.http_request("PUT", "/kv/v", data) == (200, {"key": "v", "bytes": size})
    assert k.http_request("GET", "/kv/v") == (200, data)


def test_a_value_over_64_kib_is_413_and_keeps_the_old_value():
    k = kv()
    k.http_request("PUT", "/kv/v", b"old")
    before = digest(k)
    status, body = k.http_request("PUT", "/kv/v", bytes(KV_MAX_VALUE + 1))
    assert status == 413 and str(KV_MAX_VALUE) in body["error"]
    assert k.http_request("GET", "/kv/v") == (200, b"old") and digest(k) == before


def test_values_go_into_the_arena_through_the_kernels_memory():
    k = kv()
    kvs, mf = server(k), k.memory_file
    before = digest(k)
    mf.clear_dirty()
    k.http_request("PUT", "/kv/page", b"\xab" * 5000)
    offset, length = kvs.index["page"]
    assert length == 5000 and 0 <= offset < kvs.npages * 4096
    mm = k.http.server.tg.mm  # type: ignore[union-attr]
    assert mm.read(kvs.addr + offset, 5000) == b"\xab" * 5000
    first = kvs.addr // 4096 + offset // 4096
    frames = {mm.ptes[vpn] for vpn in range(first, first + 2)}
    assert frames <= set(mf.dirty_pages())  # written as a program's store is: dirty
    assert digest(k) != before


def test_overwrites_reuse_slots_and_free_the_old_one():
    k = kv()
    kvs = server(k)
    k.http_request("PUT", "/kv/a", b"x" * 100)
    slot = kvs.index["a"][0]
    k.http_request("PUT", "/kv/a", b"y" * 120)  # same size class: rewritten in place
    assert kvs.index["a"] == (slot, 120)
    k.http_request("PUT", "/kv/a", b"z" * 3000)  # another class: the old slot is freed
    assert kvs.index["a"][0] != slot and kvs.free[kv_slot_class(100)] == [slot]
    k.http_request("PUT", "/kv/b", b"w" * 70)  # and taken by the next value of its class
    assert kvs.index["b"] == (slot, 70)
    assert k.http_request("GET", "/kv/a") == (200, b"z" * 3000)


def test_filling_the_arena_ends_in_507_with_every_stored_value_intact():
    k = kv(1)
    stored: dict[str, bytes] = {}
    status, i = 200, 0
    while status == 200:
        data = value(i, 9000 if i % 3 else 40000)
        status, body = k.http_request("PUT", f"/kv/k{i}", data)
        if status == 200:
            stored[f"k{i}"] = data
        i += 1
    assert status == 507 and "full" in body["error"]
    assert sum(len(v) for v in stored.values()) > MIB // 3
    stored["k1"] = b"s" * 9001  # a full arena still takes a value into its own slot
    assert k.http_request("PUT", "/kv/k1", stored["k1"])[0] == 200
    for key, data in stored.items():
        assert k.http_request("GET", f"/kv/{key}") == (200, data)
    status, _ = k.http_request("GET", f"/kv/k{i - 1}")
    assert status == 404  # the refused value was not stored


def test_kv_n_is_checked_like_memory_n():
    with pytest.raises(KernelError, match="kv:N needs 1 <= N"):
        build_workload("kv:0")
    a, b = kv(1, seed=4), kv(1, seed=4)
    assert a.fingerprint() == b.fingerprint() and digest(a) == digest(b)


@settings(max_examples=15, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from(["a", "b", "c", "d", "e"]), st.integers(0, KV_MAX_VALUE)),
        max_size=30,
    )
)
def test_random_puts_read_back_as_a_dict_would(puts):
    k = kv(1)
    model: dict[str, bytes] = {}
    for i, (key, size) in enumerate(puts):
        data = value(i, size)
        status, _ = k.http_request("PUT", f"/kv/{key}", data)
        if status == 200:
            model[key] = data
        else:
            assert status == 507
    for key in "abcde":
        assert k.http_request("GET", f"/kv/{key}") == (
            (200, model[key]) if key in model else (404, {"error": f"no key {key!r}"})
        )


# -- checkpoint and restore ------------------------------------------------------------------
def test_every_acknowledged_value_and_the_digest_survive_a_real_image(tmp_path, engine):
    k = kv(8)
    acked: dict[str, bytes] = {}
    for i in range(300):
        key, data = f"key-{i % 120}", value(i, (i * 997) % (KV_MAX_VALUE + 1))
        if k.http_request("PUT", f"/kv/{key}", data)[0] == 200:
            acked[key] = data
    assert len(acked) == 120
    before = digest(k)
    r = through_image(k, engine, tmp_path / "img")
    r.resume()
    assert digest(r) == before
    for key, data in acked.items():
        assert r.http_request("GET", f"/kv/{key}") == (200, data)
    kvs, mm = server(r), r.init.tg.mm  # type: ignore[union-attr]
    first = kvs.addr // 4096
    arena = {mm.ptes[v] for v in range(first, first + kvs.npages) if v in mm.ptes}
    assert not arena & set(r.memory_file.dirty_pages())  # reading values dirties no value
    # the index, free lists and top came back too: new values land where nothing lives
    for i in range(40):
        assert r.http_request("PUT", f"/kv/new-{i}", value(i, 5000 + i * 700))[0] == 200
    for key, data in acked.items():
        assert r.http_request("GET", f"/kv/{key}") == (200, data)


# -- over a real socket ----------------------------------------------------------------------
@pytest.fixture
def served() -> Iterator[tuple[Kernel, tuple[str, int]]]:
    k = kv(1)
    lock = threading.Lock()

    def respond(method: str, path: str, body: bytes) -> tuple[int, dict | bytes]:
        with lock:
            return k.http_request(method, path, body)

    srv = http.HttpServer(http.bind("127.0.0.1", 0), respond)
    srv.start()
    try:
        yield k, srv.address
    finally:
        srv.close()


def exchange(address: tuple[str, int], request: bytes) -> tuple[int, bytes, bytes]:
    """Send one request; (status, head, body) of the reply, read until the server closes."""
    with socket.create_connection(address, timeout=20) as conn:
        conn.sendall(request)
        buf = b""
        while chunk := conn.recv(65536):
            buf += chunk
    head, _, body = buf.partition(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1]), head, body


def put(key: str, data: bytes) -> bytes:
    return (
        f"PUT /kv/{key} HTTP/1.1\r\nHost: x\r\nContent-Length: {len(data)}\r\n"
        "Connection: close\r\n\r\n"
    ).encode() + data


def test_the_contract_over_http(served):
    _, address = served
    data = bytes(range(256)) * 256  # 64 KiB exactly, every byte value
    assert exchange(address, put("blob", data))[0] == 200
    status, head, body = exchange(
        address, b"GET /kv/blob HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    assert status == 200 and body == data and b"application/octet-stream" in head
    assert exchange(address, put("blob", data + b"!"))[0] == 413
    assert exchange(address, put("bad key", b"x"))[0] == 400
    status, head, _ = exchange(
        address, b"GET /kv/none HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    assert status == 404 and b"Not Found" in head
    # a body over what the server reads at all is refused before it is read
    status, head, body = exchange(
        address,
        f"PUT /kv/huge HTTP/1.1\r\nContent-Length: {http.MAX_BODY + 1}\r\n\r\n".encode(),
    )
    assert status == 413 and b"Content Too Large" in head
    status, _ = http.get_json(*address, "/memory")
    assert status == 200


def test_507_over_http(served):
    k, address = served
    status, i = 200, 0
    while status == 200:
        status, head, _ = exchange(address, put(f"k{i}", bytes(KV_MAX_VALUE)))
        i += 1
    assert status == 507 and b"Insufficient Storage" in head
    assert len(server(k).index) == i - 1 >= 8

"""Pre-dumps of a live kv kernel, chained, give back every allocated frame exactly.

Random PUTs (new keys, overwrites in place and into other size classes) interleave
with pre-dumps into a chain; at the end the chain's pages (``chain.open_pages``) must
equal ``MemoryFile.read`` for every allocated frame, compared page by page.  In
process, with a stand-in for the sandbox's ``Host`` (its lock, kernel and last dump)."""

from __future__ import annotations

import threading
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ckpt.kernel import build_workload
from ckpt.sandbox.host import precopy
from ckpt.sandbox.host.remote_image import ImageSession
from ckpt.statefile import chain, open_image


class _Host:
    def __init__(self) -> None:
        self.id = "sb"
        self.cond = threading.Condition()
        self.kernel = build_workload("kv:1")
        self.last_dump: str | None = None
        self.images = ImageSession()


OPS = st.lists(
    st.one_of(
        st.tuples(st.just("put"), st.integers(0, 30), st.integers(1, 9000)),
        st.tuples(st.just("dump"), st.just(0), st.just(0)),
    ),
    min_size=1,
    max_size=40,
)


@settings(
    max_examples=20,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(ops=OPS)
def test_chain_pages_equal_memory(tmp_path_factory, ops) -> None:
    tmp: Path = tmp_path_factory.mktemp("chain")
    host = _Host()
    params = {"compression": "zstd"}
    images: list[Path] = []
    n_dumps = [0]

    def dump() -> None:
        if len(images) == chain.MAX_CHAIN:
            images.clear()  # a full pre-dump starts a new chain
        path = tmp / f"i{n_dumps[0]}"
        n_dumps[0] += 1
        link = chain.link_metadata(path, open_image(images[-1])) if images else {}
        precopy.pre_dump(host, params, image=str(path), link=link)
        images.append(path)

    dump()
    for n, (op, key, size) in enumerate(ops):
        if op == "put":
            status, _ = host.kernel.http_request("PUT", f"/kv/k{key}", bytes([n % 251]) * size)
            assert status in (200, 507)
        else:
            dump()
    dump()
    mf = host.kernel.memory_file
    with chain.open_pages(chain.open_chain(open_image(images[-1]), None)) as pages:
        for frame in sorted(mf.refs):
            assert frame in pages.indices, frame
            assert pages.read_page(frame) == mf.read(frame), frame

"""The public API around the engines: files, SaveResult, generated source, stream views."""

from __future__ import annotations

import io
import os
import pickle
import threading
from typing import Any

import pytest

from ckpt import state

from .graph_equal import assert_graph_equal, graph_diff
from .models import Circle, Color, Everything, Leaf, Node, Pair, SLeaf


def _graph() -> list[Any]:
    shared = Leaf(1)
    a = Node(1, "a", kids=[Node(2), Node(3, payload=shared)])
    a.kids[1].next = a
    return [a, Pair(shared, SLeaf(2, "s")), Everything(leaf=shared, color=Color.BLUE)]


def test_save_and_load_through_a_real_file(engines: tuple[str, str], tmp_path: Any) -> None:
    graph = _graph()
    path = tmp_path / "graph.state"
    with path.open("wb") as out:
        result = state.save(graph, out, engine=engines[0])
    assert result.bytes == path.stat().st_size
    with path.open("rb") as src:
        loaded = state.load(src, engine=engines[1])
    assert_graph_equal(graph, loaded)


def test_save_result_counts(engine: str) -> None:
    graph = _graph()  # 3 Nodes, a Leaf, a Pair, an SLeaf and an Everything
    buf = io.BytesIO()
    result = state.save(graph, buf, engine=engine)
    assert result.objects == 7
    assert result.types >= 5  # Node, Leaf, Pair, SLeaf, Everything (+ enums, if listed)
    assert result.bytes == len(buf.getvalue())
    assert state.loads(buf.getvalue(), engine=engine)[1].x.value == 1


def test_save_writes_the_same_stream_as_dumps(engine: str) -> None:
    graph = _graph()
    buf = io.BytesIO()
    state.save(graph, buf, engine=engine)
    assert buf.getvalue() == state.dumps(graph, engine=engine)


def test_save_after_existing_content_and_load_at_the_position(engine: str) -> None:
    """save writes at the file's position; load reads from it (images embed streams)."""
    buf = io.BytesIO()
    buf.write(b"HEADER")
    state.save(Leaf(5), buf, engine=engine)
    buf.seek(6)
    assert state.load(buf, engine=engine).value == 5


def test_load_from_a_pipe(engines: tuple[str, str]) -> None:
    """A real, non-seekable stream that delivers the bytes in pieces."""
    graph = _graph()
    data = state.dumps(graph, engine=engines[0])
    read_fd, write_fd = os.pipe()

    def feed() -> None:
        with os.fdopen(write_fd, "wb", buffering=0) as out:
            for i in range(0, len(data), 7):
                out.write(data[i : i + 7])

    writer = threading.Thread(target=feed)
    writer.start()
    try:
        with os.fdopen(read_fd, "rb") as src:
            loaded = state.load(src, engine=engines[1])
    finally:
        writer.join()
    assert_graph_equal(graph, loaded)


class Trickle(io.RawIOBase):
    """A raw binary stream returning at most 7 bytes per read, as RawIOBase.read may
    (pipes, sockets, decompressing readers)."""

    def __init__(self, data: bytes) -> None:
        self._data = memoryview(data)
        self._pos = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        n = min(len(buffer), 7, len(self._data) - self._pos)
        buffer[:n] = self._data[self._pos : self._pos + n]
        self._pos += n
        return n


def test_load_from_a_stream_with_short_reads(engines: tuple[str, str]) -> None:
    graph = _graph()
    src = Trickle(state.dumps(graph, engine=engines[0]) + state.dumps([Leaf(2)], engine="typed"))
    assert_graph_equal(graph, state.load(src, engine=engines[1]))
    assert state.load(src, engine=engines[1])[0].value == 2


class Sip(io.RawIOBase):
    """A raw binary sink accepting at most 7 bytes per write, as RawIOBase.write may."""

    def __init__(self) -> None:
        self.received = bytearray()

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        chunk = bytes(memoryview(data)[:7])
        self.received += chunk
        return len(chunk)


def test_save_to_a_stream_with_short_writes(engines: tuple[str, str]) -> None:
    graph = _graph()
    sink = Sip()
    result = state.save(graph, sink, engine=engines[0])
    assert len(sink.received) == result.bytes
    assert_graph_equal(graph, state.loads(bytes(sink.received), engine=engines[1]))


def test_defaults_are_typed_engine_and_no_stats() -> None:
    graph = _graph()
    assert_graph_equal(graph, state.loads(state.dumps(graph)))


def test_dumps_is_deterministic(engine: str) -> None:
    assert state.dumps(_graph(), engine=engine) == state.dumps(_graph(), engine=engine)


def test_streams_differ_by_engine_but_load_each_other() -> None:
    graph = _graph()
    streams = {e: state.dumps(graph, engine=e) for e in state.ENGINES}
    for data in streams.values():
        for engine in state.ENGINES:
            assert_graph_equal(graph, state.loads(data, engine=engine))


def test_generated_source_names_every_field() -> None:
    for cls in (Node, SLeaf, Everything, Circle):
        source = state.generated_source(cls)
        assert isinstance(source, str)
        assert "def " in source
        for name in cls.__dataclass_fields__:
            assert name in source, f"{cls.__name__}.{name} missing from generated source"


def test_generated_source_of_an_unregistered_class_is_a_state_error() -> None:
    class Plain:
        pass

    with pytest.raises(state.StateError):
        state.generated_source(Plain)


def test_inspect_stream_without_classes(engine: str) -> None:
    graph = _graph()
    view = state.inspect_stream(state.dumps(graph, engine=engine))
    assert isinstance(view.version, int)
    assert view.engine == (
        "typed" if engine == "native" else engine
    )  # native writes typed's stream
    counts = {t.name: t.count for t in view.types}
    assert counts["tests.state.Node"] == 3
    assert counts["tests.state.Leaf"] == 1
    node_type = next(t for t in view.types if t.name == "tests.state.Node")
    assert set(node_type.fields) == {"ident", "label", "next", "kids", "payload"}
    objects = list(view.objects())
    assert len(objects) == 7
    assert len({o.id for o in objects}) == 7
    by_id = {o.id: o for o in objects}
    pair = next(o for o in objects if o.type == "tests.state.Pair")
    leaf_ref = pair.fields["x"]
    assert isinstance(leaf_ref, state.Ref)
    assert repr(leaf_ref) == f"→#{leaf_ref.id}"
    assert by_id[leaf_ref.id].type == "tests.state.Leaf"
    assert by_id[leaf_ref.id].fields["value"] == 1
    view.verify()
    data = state.dumps(graph, engine=engine)
    assert all(t.nbytes >= 0 for t in view.types)
    assert sum(t.nbytes for t in view.types) <= len(data)
    assert next(t for t in view.types if t.name == "tests.state.Node").nbytes > 0


def test_inspect_stream_of_damaged_input(engine: str) -> None:
    data = bytearray(state.dumps(_graph(), engine=engine))
    data[len(data) // 2] ^= 0xFF
    with pytest.raises(state.StateError):
        state.inspect_stream(bytes(data)).verify()
    with pytest.raises(state.StateError):
        state.inspect_stream(b"not a stream").verify()


def test_dumps_leaves_the_graph_untouched(engine: str) -> None:
    graph = _graph()
    before = pickle.loads(pickle.dumps(graph))
    attrs_before = [sorted(vars(obj)) for obj in (graph[0], graph[1], graph[2])]
    state.dumps(graph, engine=engine)
    assert graph_diff(before, graph) is None
    assert [sorted(vars(obj)) for obj in (graph[0], graph[1], graph[2])] == attrs_before


def test_two_streams_in_one_file_load_one_at_a_time(engines: tuple[str, str]) -> None:
    """Like pickle.dump/load: a stream's frame says where it ends, so load reads just it."""
    first, second = _graph(), [Leaf(9)]
    buf = io.BytesIO()
    state.save(first, buf, engine=engines[0])
    state.save(second, buf, engine=engines[0])
    buf.seek(0)
    assert_graph_equal(first, state.load(buf, engine=engines[1]))
    assert_graph_equal(second, state.load(buf, engine=engines[1]))


def test_inspect_never_shows_a_saved_value_as_none(engine: str) -> None:
    """A default-valued field written as Nil must not look like a field holding None
    (inspect has no classes, so it cannot know the default, but it can say 'default')."""
    obj = Everything(maybe=None, leaf=None)  # flag=False, big=2**80, ratio=0.5 ... defaults
    view = state.inspect_stream(state.dumps(obj, engine=engine))
    (fields,) = [o.fields for o in view.objects() if o.type == "tests.state.Everything"]
    shown_as_none = [
        name
        for name in ("flag", "small", "big", "ratio", "text", "blob", "nums", "color", "level")
        if fields[name] is None
    ]
    assert shown_as_none == [], f"{engine} stream shows {shown_as_none} as None"
    assert fields["maybe"] is None and fields["leaf"] is None

"""Helpers for the kernel tests: checkpoint a kernel through the state engine and back."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from ckpt import state, statefile
from ckpt.kernel import Kernel, build_workload
from ckpt.kernel.vfs import O_CREAT, O_RDWR

MS = 1_000_000


@dataclass
class MemoryPages:
    """A PageReader stand-in over pages taken from ``memory_file.pages()``.

    ``reads`` records which pages were fetched, so tests can tell lazy from eager.
    """

    pages: dict[int, bytes]
    reads: list[int] = field(default_factory=list)

    @property
    def indices(self) -> list[int]:
        return sorted(self.pages)

    def read_page(self, index: int) -> bytes:
        self.reads.append(index)
        return self.pages[index]


def checkpoint(k: Kernel, engine: str) -> tuple[Kernel, MemoryPages]:
    """Pause ``k``, save it and its pages, load a new kernel from them (still paused).

    Checks the restored kernel's fingerprint against the original's, and shows the first
    differing section if they differ.
    """
    k.pause()
    data = state.dumps(k, engine=engine)
    pages = MemoryPages(dict(k.memory_file.pages()))
    restored = state.loads(data, engine=engine)
    assert isinstance(restored, Kernel)
    restored.memory_file.restore_pages(pages)
    assert_same_state(k, restored)
    return restored, pages


def through_image(k: Kernel, engine: str, target: Path) -> Kernel:
    """Pause ``k``, write it as a real image at ``target`` (the statefile writer, pages
    and all) and load a new kernel from that image, pages read lazily; it is paused,
    and its fingerprint is checked against ``k``'s."""
    k.pause()
    with statefile.ImageWriter(target, metadata={"workload": k.workload}) as img:
        state.save(k, img.state_file, engine=engine)
        img.write_pages(k.memory_file.pages())
    image = statefile.open_image(target)
    restored = state.load(image.state_reader(), engine=engine)
    restored.memory_file.restore_pages(image.open_pages(lazy=True))
    assert restored.fingerprint() == k.fingerprint()
    return restored


def assert_same_state(a: Kernel, b: Kernel) -> None:
    if a.fingerprint() == b.fingerprint():
        return
    va, vb = a.visible_state(), b.visible_state()
    diffs = [
        key
        for key in va
        if json.dumps(va[key], sort_keys=True) != json.dumps(vb.get(key), sort_keys=True)
    ]
    raise AssertionError(
        f"fingerprints differ in {diffs}: {va[diffs[0]]!r:.600} != {vb[diffs[0]]!r:.600}"
    )


def resume_same_instant(*kernels: Kernel) -> None:
    """Resume as if no host time passed while frozen (deterministic comparisons)."""
    for k in kernels:
        k.resume(host_now_ns=k.timekeeper.paused_host_ns)


def blank_kernel() -> tuple[Kernel, object]:
    """An ``empty`` workload kernel and its init task, to build scenarios on."""
    k = build_workload("empty", rootfs="minimal")
    assert k.init is not None
    return k, k.init


def open_rw(k: Kernel, task, path: str) -> int:
    return k.open(task, path, O_RDWR | O_CREAT)


@pytest.fixture(params=state.ENGINES)
def engine(request: pytest.FixtureRequest) -> Iterator[str]:
    yield request.param

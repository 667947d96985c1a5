"""A restoring sandbox imports ``ckpt.kernel`` without the workload builders: every
savable type must still be registered, and the public names must still resolve."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ckpt import kernel, state

CHILD = """
import json, sys
from ckpt import kernel, state

class Pages:
    def __init__(self, pages):
        self.pages = pages
        self.indices = sorted(pages)
    def read_page(self, index):
        return self.pages[index]

data = json.load(open(sys.argv[1]))
before = sorted(m for m in sys.modules if m.startswith("ckpt.kernel."))
k = state.loads(open(sys.argv[2], "rb").read(), engine=sys.argv[3])
k.memory_file.restore_pages(Pages({int(i): bytes.fromhex(p) for i, p in data.items()}))
print(json.dumps({"modules": before, "fingerprint": k.fingerprint()}))
"""


def run_child(tmp_path: Path, k: kernel.Kernel, engine: str) -> dict:
    """Load ``k``'s stream in a fresh ``-S`` interpreter (as the sandbox starts)."""
    (tmp_path / "pages.json").write_text(
        json.dumps({str(i): bytes(p).hex() for i, p in k.memory_file.pages()})
    )
    (tmp_path / "state.bin").write_bytes(state.dumps(k, engine=engine))
    path = os.pathsep.join(p for p in sys.path if p and os.path.isdir(p))
    out = subprocess.run(
        [sys.executable, "-S", "-c", CHILD, "pages.json", "state.bin", engine],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": path},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


@pytest.mark.parametrize("engine", ["typed", "reflect"])
def test_restore_without_workload_builders(tmp_path: Path, engine: str) -> None:
    k = kernel.build_workload("nginx")  # programs: NginxMaster, NginxWorker, LogWriter
    k.pause()
    got = run_child(tmp_path, k, engine)
    assert "ckpt.kernel.programs" in got["modules"]
    assert "ckpt.kernel.workloads" not in got["modules"]
    assert "ckpt.kernel.rootfs" not in got["modules"]
    assert "ckpt.kernel.fingerprint" not in got["modules"]
    assert got["fingerprint"] == k.fingerprint()


def test_lazy_names_resolve() -> None:
    from ckpt.kernel import WORKLOADS, build_workload
    from ckpt.kernel import workloads as mod

    assert WORKLOADS is mod.WORKLOADS
    assert build_workload is mod.build_workload
    assert kernel.build_workload("empty", rootfs="minimal").workload == "empty"
    assert {"WORKLOADS", "build_workload"} <= set(kernel.__all__)


def test_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no attribute 'build_workloads'"):
        kernel.build_workloads  # noqa: B018
    with pytest.raises(ImportError):
        from ckpt.kernel import no_such_name  # noqa: F401

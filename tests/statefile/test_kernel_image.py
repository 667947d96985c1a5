"""A real simulated kernel through an image and back: state stream plus lazy pages."""

from __future__ import annotations

from pathlib import Path

import pytest

from ckpt import state, statefile
from tests.statefile.conftest import KEY

kernel = pytest.importorskip("ckpt.kernel")


@pytest.mark.parametrize("engine", state.ENGINES)
@pytest.mark.parametrize("lazy", [False, True], ids=["eager", "lazy"])
def test_kernel_round_trip(tmp_path: Path, engine: str, lazy: bool) -> None:
    k = kernel.build_workload("nginx")
    k.run_for(5_000_000)
    k.pause()
    before = k.fingerprint()
    with statefile.ImageWriter(tmp_path / "img", key=KEY, metadata={"workload": k.workload}) as img:
        img.note_save(state.save(k, img.state_file, engine=engine), engine)
        summary = img.write_pages(k.memory_file.pages())
    assert summary.scanned > 0
    image = statefile.open_image(tmp_path / "img", key=KEY)
    assert image.metadata["workload"] == "nginx" and image.metadata["engine"] == engine
    other = "reflect" if engine == "typed" else "typed"
    k2 = state.load(image.state_reader(), engine=other)
    pages = image.open_pages(lazy=lazy)
    k2.memory_file.restore_pages(pages)
    pages.wait()
    assert k2.fingerprint() == before
    report = statefile.inspect_image(tmp_path / "img", KEY, objects=3, verify=True)
    assert report["integrity"]["ok"] is True and report["stream"]["verified"] is True
    names = {t["name"] for t in report["types"]}
    assert any(n.endswith(".Kernel") for n in names)
    assert sum(t["count"] for t in report["types"]) == image.metadata["objects"]
    assert report["pages"]["scanned"] == summary.scanned

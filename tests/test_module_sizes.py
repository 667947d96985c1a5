"""No module of ``ckpt`` over MAX_LINES lines: past that, a module has more than one job
and is split along a real seam (one job per module), not left to grow."""

from __future__ import annotations

from pathlib import Path

import ckpt

ROOT = Path(ckpt.__file__).parent
MAX_LINES = 800


def too_long(root: Path = ROOT, limit: int = MAX_LINES) -> dict[str, int]:
    """Each module of ``root`` longer than ``limit`` lines, with its length."""
    found = {}
    for path in sorted(root.rglob("*.py")):
        with path.open("rb") as f:
            lines = sum(1 for _ in f)
        if lines > limit:
            found[str(path.relative_to(root.parent))] = lines
    return found


def test_no_module_is_over_the_limit() -> None:
    assert not too_long(), f"modules over {MAX_LINES} lines, split them: {too_long()}"


def test_a_long_module_is_found(tmp_path: Path) -> None:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "long.py").write_text("x = 1\n" * (MAX_LINES + 1))
    (tmp_path / "pkg" / "short.py").write_text("x = 1\n" * MAX_LINES)
    assert too_long(tmp_path / "pkg") == {"pkg/long.py": MAX_LINES + 1}

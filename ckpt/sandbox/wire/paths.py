"""Where sandboxes live: one directory per sandbox under the root, with its state JSON.

::

    ROOT/
      ID/
        state.json     what `ckpt state ID` prints (written atomically: temp + rename)
        ctl.sock       the sandbox process's control socket (see ``rpc``)
        sandbox.log    the sandbox process's stdout and stderr

A Unix socket path is limited to ~107 bytes, so a sandbox under a deep root gets its
socket in the temp directory instead, named after a hash of its directory; the state
JSON records where.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ckpt.errors import SandboxError, SandboxNotFound

STATE_FILE = "state.json"
SOCKET_FILE = "ctl.sock"
LOG_FILE = "sandbox.log"
MAX_SOCKET_PATH = 100  # sun_path is 108 bytes including the NUL; keep a margin

RUNNING = "running"
PAUSED = "paused"
STOPPED = "stopped"
CREATING = "creating"
UNREADABLE = "unreadable"  # listed for a record that cannot be read

_ID_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")  # fullmatch: "$" takes a "\n"


def check_id(sandbox_id: str) -> str:
    """Refuse IDs that could escape the root or make odd cgroup names."""
    if not isinstance(sandbox_id, str) or not _ID_RE.fullmatch(sandbox_id):
        raise SandboxError(
            f"invalid sandbox ID {sandbox_id!r}: use 1-64 letters, digits, '_', '.' or '-', "
            "starting with a letter or digit"
        )
    return sandbox_id


@dataclass
class SandboxState:
    """The record kept in ``state.json``; ``ckpt state ID`` prints it."""

    id: str
    pid: int
    status: str
    workload: str
    cgroup: str | None
    created: str
    address: str | None = None
    engine: str | None = None  # None: the fastest engine the sandbox has (native, else typed)
    cpu: float | None = None
    socket: str = ""
    pid_start: float = 0.0  # process create time, guards against pid reuse
    restored_from: str | None = None
    restored_at: str | None = None  # last restore; ``created`` stays the first start
    extra: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any], where: Path) -> SandboxState:
        try:
            known = {k: data[k] for k in cls.__dataclass_fields__ if k in data}
            return cls(**known)
        except TypeError as exc:
            raise SandboxError(
                f"{where}: malformed sandbox state ({exc}); delete it with `ckpt delete --force ID`"
            ) from exc


def now_iso() -> str:
    """UTC wall-clock time in RFC 3339, as runsc prints `created`."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


class Root:
    """The root directory holding one subdirectory per sandbox."""

    def __init__(self, path: Path | str) -> None:
        # normalised once (``..`` resolved lexically, as the template does), so every
        # path derived from it, sockets included, is spelled the same by every process
        self.path = Path(os.path.abspath(path))

    def check(self) -> Root:
        """Refuse a root that exists but is not a directory (a file given as --root)."""
        if self.path.exists() and not self.path.is_dir():
            raise SandboxError(
                f"--root {self.path} is not a directory: pass a directory (or set CKPT_ROOT)"
            )
        return self

    def cgroup_name(self, sandbox_id: str) -> str:
        """The sandbox's cgroup, scoped to this root: ``ckpt/<hash of the root>/ID``.

        Two roots holding the same ID never share (or adopt, or remove) a group.  The hash
        is of the root's real path, so every spelling of one root names the same group."""
        return f"{self.cgroup_parent()}/{check_id(sandbox_id)}"

    def cgroup_parent(self) -> str:
        """``ckpt/<12 hex digits of sha256(realpath of the root)>``: this root's groups."""
        real = os.fsencode(os.path.realpath(self.path))
        return f"ckpt/{hashlib.sha256(real).hexdigest()[:12]}"

    def ensure(self) -> None:
        self.check()
        try:
            self.path.mkdir(parents=True, exist_ok=True, mode=0o700)
        except OSError as exc:
            raise SandboxError(
                f"cannot create root directory {self.path}: {exc.strerror}; "
                "pass --root DIR or set CKPT_ROOT"
            ) from exc

    def dir(self, sandbox_id: str) -> Path:
        return self.path / check_id(sandbox_id)

    def exists(self, sandbox_id: str) -> bool:
        return (self.dir(sandbox_id) / STATE_FILE).exists()

    def ids(self) -> list[str]:
        self.check()
        if not self.path.is_dir():
            return []
        return sorted(
            p.name
            for p in self.path.iterdir()
            if (p / STATE_FILE).is_file() and _ID_RE.fullmatch(p.name)
        )

    def socket_path(self, sandbox_id: str) -> Path:
        """The control socket path, moved to the temp dir if the natural one is too long."""
        natural = self.dir(sandbox_id) / SOCKET_FILE
        if len(os.fsencode(str(natural.absolute()))) <= MAX_SOCKET_PATH:
            return natural.absolute()
        digest = hashlib.sha256(os.fsencode(str(natural.absolute()))).hexdigest()[:20]
        return Path(tempfile.gettempdir()) / f"ckpt-{digest}.sock"

    def log_path(self, sandbox_id: str) -> Path:
        return self.dir(sandbox_id) / LOG_FILE

    def read(self, sandbox_id: str) -> SandboxState:
        path = self.dir(sandbox_id) / STATE_FILE
        try:
            raw = path.read_bytes()
        except FileNotFoundError:
            raise SandboxNotFound(
                f"no sandbox {sandbox_id!r} under {self.path} (see `ckpt list`)"
            ) from None
        try:
            data = json.loads(raw)
        except ValueError as exc:
            raise SandboxError(
                f"{path}: state file is not JSON ({exc}); remove it with `ckpt delete --force "
                f"{sandbox_id}`"
            ) from exc
        if not isinstance(data, dict):
            raise SandboxError(f"{path}: state file is not a JSON object")
        return SandboxState.from_json(data, path)

    def write(self, st: SandboxState) -> None:
        """Atomically replace ``state.json`` (temp file in the same dir, then rename).

        A failed write (a full disk, a read-only root) removes its temp file and is one
        ``SandboxError`` line; the previous record stays as it was."""
        d = self.dir(st.id)
        tmp = d / f".{STATE_FILE}.{os.getpid()}.tmp"
        data = (json.dumps(st.to_json(), indent=2, sort_keys=True) + "\n").encode()
        try:
            d.mkdir(parents=True, exist_ok=True, mode=0o700)
            _write_new(tmp, data)
            os.replace(tmp, d / STATE_FILE)
        except OSError as exc:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise SandboxError(
                f"cannot write {d / STATE_FILE}: {exc.strerror or exc}; "
                f"free space or fix permissions under {self.path}"
            ) from exc


def _write_new(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` (created or truncated; a symlink there is refused)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    finally:
        os.close(fd)

"""The virtual filesystem: mounts, dentries, inodes, file descriptions and fd tables.

Regular files keep their data in ``MemoryFile`` pages (``Inode.pages``: file page ->
memory-file frame), so the object graph holds only the layout; the contents go to the
page file.  A file unlinked while open keeps its inode (``nlink == 0``) alive through
the descriptions that reference it, and its pages are freed on the last close.

A ``FileDescription`` is what ``open`` creates and ``dup`` and ``fork`` share: one offset,
one set of status flags.  Subclasses are the kinds of open file (regular, directory, pipe
end, epoll; sockets and timerfds live beside their subsystems), so an ``FDEntry.file``
field is polymorphic over them.
"""

from __future__ import annotations

import enum
import errno
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ckpt import state
from ckpt.errors import SyscallError
from ckpt.kernel.locks import FileLocks

if TYPE_CHECKING:
    from ckpt.kernel.mm import MemoryFile

PAGE_SIZE = 4096
PIPE_CAPACITY = 65536

O_RDONLY = 0o0
O_WRONLY = 0o1
O_RDWR = 0o2
O_ACCMODE = 0o3
O_CREAT = 0o100
O_EXCL = 0o200
O_TRUNC = 0o1000
O_APPEND = 0o2000
O_NONBLOCK = 0o4000
O_DIRECTORY = 0o200000
O_CLOEXEC = 0o2000000

S_IFMT = 0o170000
S_IFREG = 0o100000
S_IFDIR = 0o040000
S_IFLNK = 0o120000
S_IFIFO = 0o010000
S_IFSOCK = 0o140000
S_IFCHR = 0o020000


class InodeKind(enum.Enum):
    REGULAR = S_IFREG
    DIRECTORY = S_IFDIR
    SYMLINK = S_IFLNK
    FIFO = S_IFIFO
    SOCKET = S_IFSOCK
    CHARDEV = S_IFCHR


@state.savable
@dataclass(eq=False)
class Pipe:
    """A pipe's (or FIFO's) buffer and how many read and write ends are open."""

    id: int
    buffer: bytearray = field(default_factory=bytearray)
    capacity: int = PIPE_CAPACITY
    readers: int = 0
    writers: int = 0

    def write(self, data: bytes) -> int:
        """Append what fits; EPIPE with no reader, EAGAIN when full."""
        if self.readers == 0:
            raise SyscallError(errno.EPIPE, f"pipe {self.id} has no reader")
        room = self.capacity - len(self.buffer)
        if room <= 0:
            raise SyscallError(errno.EAGAIN, f"pipe {self.id} is full")
        chunk = data[:room]
        self.buffer += chunk
        return len(chunk)

    def read(self, n: int) -> bytes:
        """Take up to ``n`` bytes; b"" at end of file (no writer), EAGAIN when empty."""
        if not self.buffer:
            if self.writers == 0:
                return b""
            raise SyscallError(errno.EAGAIN, f"pipe {self.id} is empty")
        out = bytes(self.buffer[:n])
        del self.buffer[:n]
        return out


@state.savable
@dataclass(eq=False)
class Inode:
    """A file's metadata; regular file data lives in memory-file frames (``pages``)."""

    ino: int
    kind: InodeKind
    mode: int = 0o644
    uid: int = 0
    gid: int = 0
    nlink: int = 1
    size: int = 0
    atime_ns: int = 0
    mtime_ns: int = 0
    ctime_ns: int = 0
    dev: int = 0
    rdev: int = 0
    pages: dict[int, int] = field(default_factory=dict)
    target: str = ""
    pipe: Pipe | None = None
    locks: FileLocks | None = None
    open_count: int = 0
    blocks: int = 0
    btime_ns: int = 0
    generation: int = 0
    flags: int = 0
    xattrs: dict[str, bytes] = field(default_factory=dict)

    def file_locks(self) -> FileLocks:
        """The inode's locks, allocated on first use."""
        if self.locks is None:
            self.locks = FileLocks()
        return self.locks

    def read(self, mf: MemoryFile, offset: int, n: int) -> bytes:
        """Up to ``n`` bytes from ``offset``, short at end of file; holes read as zeros."""
        end = min(self.size, offset + n)
        if offset >= end:
            return b""
        out = bytearray()
        pos = offset
        while pos < end:
            page, skip = divmod(pos, PAGE_SIZE)
            take = min(PAGE_SIZE - skip, end - pos)
            frame = self.pages.get(page)
            if frame is None:
                out += bytes(take)
            else:
                out += mf.read(frame)[skip : skip + take]
            pos += take
        return bytes(out)

    def write(self, mf: MemoryFile, offset: int, data: bytes) -> int:
        """Write ``data`` at ``offset``, allocating frames for the pages it touches."""
        pos = offset
        view = memoryview(data)
        while view:
            page, skip = divmod(pos, PAGE_SIZE)
            take = min(PAGE_SIZE - skip, len(view))
            frame = self.pages.get(page)
            if frame is None:
                frame = self.pages[page] = mf.alloc()
            mf.write(frame, skip, view[:take])
            view = view[take:]
            pos += take
        self.size = max(self.size, pos)
        self.blocks = len(self.pages) * 8
        return len(data)

    def page_frame(self, mf: MemoryFile, page: int) -> int:
        """The frame holding file page ``page``, allocated (zero) if it is a hole."""
        frame = self.pages.get(page)
        if frame is None:
            frame = self.pages[page] = mf.alloc()
            self.size = max(self.size, (page + 1) * PAGE_SIZE)
        return frame

    def truncate(self, mf: MemoryFile, size: int) -> None:
        for page in [p for p in self.pages if p * PAGE_SIZE >= size]:
            mf.decref(self.pages.pop(page))
        if size % PAGE_SIZE and (frame := self.pages.get(size // PAGE_SIZE)) is not None:
            mf.write(frame, size % PAGE_SIZE, bytes(PAGE_SIZE - size % PAGE_SIZE))
        self.size = size

    def release_if_unused(self, mf: MemoryFile) -> None:
        """Free the data of an unlinked inode once nothing has it open."""
        if self.nlink == 0 and self.open_count == 0:
            for frame in self.pages.values():
                mf.decref(frame)
            self.pages.clear()


@state.savable
@dataclass(eq=False)
class Dentry:
    """A name in a directory.  ``mounted`` is the mount covering it, if any."""

    name: str
    inode: Inode
    parent: Dentry | None = None
    children: dict[str, Dentry] = field(default_factory=dict)
    mounted: Mount | None = None
    dead: bool = False
    refs: int = 1


@state.savable
@dataclass(eq=False)
class Mount:
    """A filesystem mounted at ``mountpoint`` (None for the root mount)."""

    id: int
    fstype: str
    source: str
    root: Dentry
    mountpoint: Dentry | None = None
    parent: Mount | None = None
    flags: int = 0
    dev: int = 0


@state.savable
@dataclass(eq=False)
class FileDescription:
    """An open file: status flags and a reference count shared by dup'd and inherited fds."""

    id: int
    flags: int = O_RDONLY
    refs: int = 0

    def readable(self) -> bool:
        return (self.flags & O_ACCMODE) in (O_RDONLY, O_RDWR)

    def writable(self) -> bool:
        return (self.flags & O_ACCMODE) in (O_WRONLY, O_RDWR)

    def lock_inode(self) -> Inode | None:
        """The inode that flock/fcntl locks on this description apply to."""
        return None

    def describe(self) -> str:
        return type(self).__name__


@state.savable
@dataclass(eq=False)
class RegularFD(FileDescription):
    """An open regular file: a path (dentry and mount), its inode and the file offset."""

    dentry: Dentry | None = None
    mount: Mount | None = None
    inode: Inode | None = None
    offset: int = 0

    def lock_inode(self) -> Inode | None:
        return self.inode


@state.savable
@dataclass(eq=False)
class DirectoryFD(FileDescription):
    """An open directory; ``offset`` counts entries already returned by getdents."""

    dentry: Dentry | None = None
    mount: Mount | None = None
    offset: int = 0

    def lock_inode(self) -> Inode | None:
        return self.dentry.inode if self.dentry else None


@state.savable
@dataclass(eq=False)
class PipeFD(FileDescription):
    """One end of a pipe or FIFO (``inode`` is the FIFO's, or the anonymous pipe's)."""

    pipe: Pipe | None = None
    inode: Inode | None = None
    write_end: bool = False

    def lock_inode(self) -> Inode | None:
        return self.inode


@state.savable
@dataclass(eq=False, slots=True)
class EpollItem:
    """One watched descriptor of an epoll instance."""

    file: FileDescription
    events: int


@state.savable
@dataclass(eq=False)
class EpollFD(FileDescription):
    """An epoll instance and its interest list (fd -> watched description)."""

    interest: dict[int, EpollItem] = field(default_factory=dict)


@state.savable
@dataclass(eq=False, slots=True)
class FDEntry:
    """One slot of an fd table: the description and the per-fd close-on-exec flag."""

    file: FileDescription
    cloexec: bool = False


@state.savable
@dataclass(eq=False)
class FDTable:
    """fd -> description; shared by tasks created with CLONE_FILES (``users`` > 1)."""

    id: int
    entries: dict[int, FDEntry] = field(default_factory=dict)
    users: int = 1
    limit: int = 1024
    next_fd: int = 0  # every fd below this is in use (Linux's files_struct.next_fd)

    def get(self, fd: int) -> FDEntry:
        entry = self.entries.get(fd)
        if entry is None:
            raise SyscallError(errno.EBADF, f"fd {fd} is not open")
        return entry

    def lowest_free(self, minimum: int = 0) -> int:
        fd = max(minimum, self.next_fd)
        while fd in self.entries:
            fd += 1
        if minimum <= self.next_fd:
            self.next_fd = fd
        if fd >= self.limit:
            raise SyscallError(errno.EMFILE, f"fd table is full ({self.limit} fds)")
        return fd

    def install(self, file: FileDescription, *, cloexec: bool = False, minimum: int = 0) -> int:
        fd = self.lowest_free(minimum)
        self.entries[fd] = FDEntry(file, cloexec)
        file.refs += 1
        return fd

    def install_at(self, fd: int, file: FileDescription, *, cloexec: bool = False) -> None:
        """Put ``file`` at ``fd`` (which must be free; dup2 closes it first)."""
        if fd in self.entries:
            raise SyscallError(errno.EBUSY, f"fd {fd} is in use")
        self.entries[fd] = FDEntry(file, cloexec)
        file.refs += 1

    def remove(self, fd: int) -> FDEntry:
        entry = self.get(fd)
        del self.entries[fd]
        self.next_fd = min(self.next_fd, fd)
        entry.file.refs -= 1
        return entry

    def items(self) -> Iterator[tuple[int, FDEntry]]:
        return iter(sorted(self.entries.items()))


@state.savable
@dataclass(eq=False)
class FSContext:
    """Root, working directory and umask; shared under CLONE_FS."""

    root: Dentry
    cwd: Dentry
    umask: int = 0o022
    users: int = 1


@state.savable
@dataclass(eq=False)
class VFS:
    """The mount tree and the allocators for inode numbers and mount ids."""

    root_mount: Mount | None = None
    mounts: list[Mount] = field(default_factory=list)
    next_ino: int = 2
    next_mount: int = 1
    next_pipe: int = 1

    @property
    def root(self) -> Dentry:
        assert self.root_mount is not None
        return self.root_mount.root

    def new_inode(self, kind: InodeKind, mode: int, now_ns: int = 0, **kwargs: object) -> Inode:
        ino = self.next_ino
        self.next_ino += 1
        return Inode(
            ino,
            kind,
            mode,
            atime_ns=now_ns,
            mtime_ns=now_ns,
            ctime_ns=now_ns,
            btime_ns=now_ns,
            generation=ino * 2654435761 % (1 << 32),
            **kwargs,  # type: ignore[arg-type]
        )

    def new_pipe(self) -> Pipe:
        pipe = Pipe(self.next_pipe)
        self.next_pipe += 1
        return pipe

    def mount(self, fstype: str, source: str, at: Dentry | None, now_ns: int = 0) -> Mount:
        """Mount a fresh filesystem of ``fstype`` at ``at`` (None: the root mount)."""
        root_inode = self.new_inode(InodeKind.DIRECTORY, 0o755, now_ns, nlink=2)
        mnt = Mount(
            self.next_mount, fstype, source, Dentry("/", root_inode), at, dev=self.next_mount
        )
        self.next_mount += 1
        if at is None:
            self.root_mount = mnt
        else:
            mnt.parent = self.mount_of(at)
            at.mounted = mnt
        self.mounts.append(mnt)
        return mnt

    def mount_of(self, dentry: Dentry) -> Mount:
        """The mount a dentry belongs to."""
        top = dentry
        while top.parent is not None:
            top = top.parent
        for mnt in self.mounts:
            if mnt.root is top:
                return mnt
        raise SyscallError(errno.ENOENT, f"dentry {dentry.name!r} is not in any mount")

    def lookup(self, path: str, cwd: Dentry | None = None, *, follow: bool = True) -> Dentry:
        """Walk ``path`` from the root (or ``cwd`` if relative), crossing mounts."""
        return self._walk(path, cwd, follow, depth=0)

    def _walk(self, path: str, cwd: Dentry | None, follow: bool, depth: int) -> Dentry:
        if depth > 40:
            raise SyscallError(errno.ELOOP, f"too many symlinks resolving {path!r}")
        node = self.root if path.startswith("/") or cwd is None else cwd
        parts = [p for p in path.split("/") if p and p != "."]
        for i, name in enumerate(parts):
            if node.inode.kind is not InodeKind.DIRECTORY:
                raise SyscallError(errno.ENOTDIR, f"{path!r}: {node.name!r} is not a directory")
            if name == "..":
                node = self._parent(node)
                continue
            child = node.children.get(name)
            if child is None:
                raise SyscallError(errno.ENOENT, f"{path!r}: no such file or directory")
            while child.mounted is not None:
                child = child.mounted.root
            last = i == len(parts) - 1
            if child.inode.kind is InodeKind.SYMLINK and (follow or not last):
                child = self._walk(child.inode.target, node, True, depth + 1)
            node = child
        return node

    def _parent(self, node: Dentry) -> Dentry:
        if node.parent is not None:
            return node.parent
        mnt = self.mount_of(node)
        if mnt.mountpoint is None:
            return node
        return self._parent(mnt.mountpoint)

    def split(self, path: str, cwd: Dentry | None = None) -> tuple[Dentry, str]:
        """(parent directory, last name) of ``path``."""
        head, _, name = path.rstrip("/").rpartition("/")
        if not name:
            raise SyscallError(errno.EINVAL, f"{path!r} has no final component")
        base = self.lookup(head or ("/" if path.startswith("/") else "."), cwd)
        if base.inode.kind is not InodeKind.DIRECTORY:
            raise SyscallError(errno.ENOTDIR, f"{head!r} is not a directory")
        return base, name

    def link_new(self, parent: Dentry, name: str, inode: Inode) -> Dentry:
        if name in parent.children:
            raise SyscallError(errno.EEXIST, f"{name!r} already exists")
        child = Dentry(name, inode, parent)
        parent.children[name] = child
        if inode.kind is InodeKind.DIRECTORY:
            parent.inode.nlink += 1
        return child

    def mkdir(self, path: str, mode: int = 0o755, now_ns: int = 0) -> Dentry:
        parent, name = self.split(path)
        return self.link_new(
            parent, name, self.new_inode(InodeKind.DIRECTORY, mode, now_ns, nlink=2)
        )

    def makedirs(self, path: str, now_ns: int = 0) -> Dentry:
        node = self.root
        for name in [p for p in path.split("/") if p]:
            child = node.children.get(name)
            if child is None:
                child = self.link_new(
                    node, name, self.new_inode(InodeKind.DIRECTORY, 0o755, now_ns, nlink=2)
                )
            while child.mounted is not None:
                child = child.mounted.root
            node = child
        return node

    def create(
        self, path: str, mode: int = 0o644, now_ns: int = 0, cwd: Dentry | None = None
    ) -> Dentry:
        parent, name = self.split(path, cwd)
        return self.link_new(parent, name, self.new_inode(InodeKind.REGULAR, mode, now_ns))

    def symlink(self, target: str, path: str, now_ns: int = 0) -> Dentry:
        parent, name = self.split(path)
        inode = self.new_inode(InodeKind.SYMLINK, 0o777, now_ns, target=target, size=len(target))
        return self.link_new(parent, name, inode)

    def mkfifo(self, path: str, mode: int = 0o644, now_ns: int = 0) -> Dentry:
        parent, name = self.split(path)
        inode = self.new_inode(InodeKind.FIFO, mode, now_ns, pipe=self.new_pipe())
        return self.link_new(parent, name, inode)

    def mknod_char(self, path: str, rdev: int, mode: int = 0o666) -> Dentry:
        parent, name = self.split(path)
        return self.link_new(parent, name, self.new_inode(InodeKind.CHARDEV, mode, rdev=rdev))

    def unlink(self, path: str, mf: MemoryFile, cwd: Dentry | None = None) -> None:
        """Remove a name; the inode lives on while open (``nlink`` 0, ``dead`` dentry)."""
        parent, name = self.split(path, cwd)
        child = parent.children.get(name)
        if child is None:
            raise SyscallError(errno.ENOENT, f"{path!r}: no such file")
        if child.inode.kind is InodeKind.DIRECTORY:
            raise SyscallError(errno.EISDIR, f"{path!r} is a directory")
        del parent.children[name]
        child.dead = True
        child.inode.nlink -= 1
        child.inode.release_if_unused(mf)

    def path_of(self, dentry: Dentry) -> str:
        """The absolute path of a dentry, `` (deleted)`` appended if it was unlinked."""
        names: list[str] = []
        node = dentry
        while True:
            if node.parent is not None:
                names.append(node.name)
                node = node.parent
                continue
            mnt = self.mount_of(node)
            if mnt.mountpoint is None:
                break
            node = mnt.mountpoint
        path = "/" + "/".join(reversed(names))
        return path + " (deleted)" if dentry.dead else path

    def walk(self) -> Iterator[tuple[str, Dentry]]:
        """Every (path, dentry) reachable from the root, mounts crossed, in sorted order."""
        stack: list[tuple[str, Dentry]] = [("/", self.root)]
        while stack:
            path, node = stack.pop()
            yield path, node
            for name in sorted(node.children, reverse=True):
                child = node.children[name]
                while child.mounted is not None:
                    child = child.mounted.root
                stack.append((path.rstrip("/") + "/" + name, child))

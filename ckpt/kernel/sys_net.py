"""Socket system calls: TCP bind/listen/connect/accept (loopback) and unix socket pairs.

A mixin of ``Kernel`` (``ckpt/kernel/kernel.py``): the methods use the kernel's fields
(``self.pidns``, ``self.vfs``, ``self.memory_file``...) and each other across mixins.
"""

from __future__ import annotations

import errno

from ckpt.errors import SyscallError
from ckpt.kernel.net import Socket, SocketFD, SocketState, TCPSocket, UnixSocket
from ckpt.kernel.task import Task
from ckpt.kernel.vfs import O_RDWR, InodeKind


class SocketCalls:
    """Socket system calls, mixed into ``Kernel``."""

    # -- sockets ------------------------------------------------------------------------
    def _socket_fd(self, task: Task, sock: Socket) -> int:
        inode = self.vfs.new_inode(InodeKind.SOCKET, 0o777, self.now, nlink=0)
        inode.open_count = 1
        return self._table(task).install(SocketFD(self.uid(), O_RDWR, sock=sock, inode=inode))

    def socket_tcp(self, task: Task) -> int:
        return self._socket_fd(task, TCPSocket(self.uid(), options={1: 1}))

    def _tcp(self, task: Task, fd: int) -> TCPSocket:
        file = self._file(task, fd)
        if not isinstance(file, SocketFD) or not isinstance(file.sock, TCPSocket):
            raise SyscallError(errno.ENOTSOCK, f"fd {fd} is not a TCP socket")
        return file.sock

    def bind(self, task: Task, fd: int, host: str, port: int) -> None:
        sock = self._tcp(task, fd)
        if port and port in self.netstack.reserved_ports:
            raise SyscallError(errno.EADDRINUSE, f"port {port} is in use")
        sock.bind(host, port)
        if port:
            self.netstack.reserved_ports[port] = sock.id

    def listen(self, task: Task, fd: int, backlog: int = 511) -> None:
        self._tcp(task, fd).listen(backlog)

    def connect(self, task: Task, fd: int, host: str, port: int) -> None:
        """Loopback connect to a listener in this kernel bound to (host, port)."""
        client = self._tcp(task, fd)
        listener = self._find_listener(host, port)
        if listener is None:
            raise SyscallError(errno.ECONNREFUSED, f"nothing listens on {host}:{port}")
        if len(listener.accept_queue) >= listener.backlog:
            raise SyscallError(errno.EAGAIN, f"{host}:{port}: backlog full")
        local = ("127.0.0.1", 40000 + client.id % 20000)
        server = TCPSocket(self.uid(), SocketState.CONNECTED, local=listener.local, remote=local)
        client.state, client.local, client.remote = SocketState.CONNECTED, local, (host, port)
        client.peer, server.peer = server, client
        listener.accept_queue.append(server)

    def _find_listener(self, host: str, port: int) -> TCPSocket | None:
        for task in self.tasks():
            if task.fd_table is None:
                continue
            for _, entry in task.fd_table.items():
                sock = getattr(entry.file, "sock", None)
                if (
                    isinstance(sock, TCPSocket)
                    and sock.state is SocketState.LISTENING
                    and sock.local == (host, port)
                ):
                    return sock
        return None

    def accept(self, task: Task, fd: int) -> int:
        return self._socket_fd(task, self._tcp(task, fd).accept())

    def socketpair(self, task: Task) -> tuple[int, int]:
        a = UnixSocket(self.uid(), SocketState.CONNECTED)
        b = UnixSocket(self.uid(), SocketState.CONNECTED, peer=a)
        a.peer = b
        return self._socket_fd(task, a), self._socket_fd(task, b)

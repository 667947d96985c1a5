"""A synthetic root filesystem shaped like a small container image.

A few hundred dentries and inodes: /etc with configuration files, /usr/lib with shared
libraries, /usr/bin, /var/log, /dev character devices, /proc-like entries, and tmpfs
mounts.  Only files processes actually read or map get data pages; the rest carry sizes
and modes, as most of an image's page cache would be cold.
"""

from __future__ import annotations

import random
from typing import TYPE_CHECKING

from ckpt.kernel.vfs import Inode

if TYPE_CHECKING:
    from ckpt.kernel.kernel import Kernel

LIBS = [
    "libc.so.6",
    "ld-linux-x86-64.so.2",
    "libcrypt.so.1",
    "libpcre2-8.so.0",
    "libssl.so.3",
    "libcrypto.so.3",
    "libz.so.1",
    "libm.so.6",
    "libpthread.so.0",
    "libdl.so.2",
    "libresolv.so.2",
    "libnss_files.so.2",
]
BINARIES = [
    "sh",
    "bash",
    "ls",
    "cat",
    "cp",
    "mv",
    "rm",
    "ln",
    "mkdir",
    "rmdir",
    "chmod",
    "chown",
    "ps",
    "kill",
    "sleep",
    "env",
    "id",
    "uname",
    "date",
    "grep",
    "sed",
    "awk",
    "find",
    "xargs",
    "tar",
    "gzip",
    "head",
    "tail",
    "sort",
    "uniq",
    "wc",
    "tee",
    "touch",
    "stat",
    "df",
    "du",
    "mount",
    "umount",
    "hostname",
    "true",
    "false",
    "test",
    "expr",
    "printf",
    "echo",
    "readlink",
    "dirname",
    "basename",
]
SBIN = ["nginx", "init", "ldconfig", "nologin", "start-stop-daemon"]
ETC = {
    "passwd": "root:x:0:0:root:/root:/bin/sh\nnginx:x:101:101:nginx:/var/cache/nginx:/sbin/nologin\n",
    "group": "root:x:0:\nnginx:x:101:\n",
    "hosts": "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost\n",
    "hostname": "sandbox\n",
    "resolv.conf": "nameserver 169.254.169.254\nsearch local\n",
    "nsswitch.conf": "passwd: files\ngroup: files\nhosts: files dns\n",
    "os-release": 'NAME="Simulated Linux"\nID=sim\nVERSION_ID=1\n',
    "shells": "/bin/sh\n/bin/bash\n",
    "profile": "export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin\n",
    "ld.so.conf": "include /etc/ld.so.conf.d/*.conf\n",
    "localtime": "TZif2" + "\0" * 40,
    "mime.types": "types {\n  text/html html;\n  text/css css;\n  image/png png;\n}\n",
    "nginx/nginx.conf": (
        "user nginx;\nworker_processes 4;\nerror_log /var/log/nginx/error.log notice;\n"
        "pid /run/nginx.pid;\nevents { worker_connections 1024; accept_mutex on; }\n"
        "http { include /etc/nginx/mime.types; access_log /var/log/nginx/access.log;\n"
        "  server { listen 80; root /usr/share/nginx/html; } }\n"
    ),
    "nginx/conf.d/default.conf": "server { listen 80; location / { root /usr/share/nginx/html; } }\n",
    "http/server.conf": "listen 127.0.0.1:0\nroot /srv/www\n",
}
PROC = {
    "meminfo": "MemTotal: 2097152 kB\nMemFree: 1048576 kB\n",
    "cpuinfo": "processor\t: 0\nmodel name\t: Simulated CPU\n",
    "version": "Linux version 4.4.0 #1 SMP Sun Jan 10 15:06:54 PST 2016\n",
    "uptime": "0.00 0.00\n",
    "loadavg": "0.00 0.00 0.00 1/1 1\n",
    "filesystems": "nodev\tproc\nnodev\ttmpfs\nnodev\tsysfs\n",
    "mounts": "none / overlay rw 0 0\n",
    "stat": "cpu 0 0 0 0 0 0 0\n",
    "sys/kernel/hostname": "sandbox\n",
    "sys/kernel/pid_max": "4194304\n",
    "sys/kernel/ngroups_max": "65536\n",
    "sys/kernel/cap_last_cap": "40\n",
    "sys/kernel/random/boot_id": "00000000-0000-0000-0000-000000000000\n",
    "sys/kernel/random/uuid": "00000000-0000-0000-0000-000000000001\n",
    "sys/vm/overcommit_memory": "0\n",
    "sys/vm/mmap_min_addr": "65536\n",
    "sys/net/core/somaxconn": "4096\n",
    "sys/net/ipv4/ip_local_port_range": "32768\t60999\n",
    "sys/net/ipv4/tcp_keepalive_time": "7200\n",
    "sys/fs/nr_open": "1048576\n",
    "sys/fs/file-max": "9223372036854775807\n",
    "sys/fs/pipe-max-size": "1048576\n",
}
DEVICES = {
    "null": 0x103,
    "zero": 0x105,
    "full": 0x107,
    "random": 0x108,
    "urandom": 0x109,
    "tty": 0x500,
    "console": 0x501,
    "ptmx": 0x502,
}


def build_rootfs(k: Kernel, rng: random.Random, *, minimal: bool = False) -> None:
    """Mount the root and the usual pseudo filesystems, and fill them.

    ``minimal`` leaves out the cold bulk (extra libraries, binaries, certificates,
    zoneinfo, package metadata): a small tree for tests that build many kernels.
    """
    share_files = 0 if minimal else 50
    vfs, now = k.vfs, k.timekeeper.realtime_ns
    vfs.mount("overlay", "rootfs", None, now)
    for d in ["proc", "dev", "sys", "tmp", "run"]:
        vfs.mkdir("/" + d, 0o755, now)
    for path in [
        "/bin",
        "/sbin",
        "/etc/nginx/conf.d",
        "/etc/http",
        "/etc/ld.so.conf.d",
        "/usr/bin",
        "/usr/sbin",
        "/usr/lib/x86_64-linux-gnu",
        "/usr/share/nginx/html",
        "/var/log/nginx",
        "/var/log/http",
        "/var/cache/nginx",
        "/var/lock",
        "/root",
        "/home",
        "/srv/www",
        "/data",
    ]:
        vfs.makedirs(path, now)
    vfs.mount("proc", "proc", vfs.lookup("/proc"), now)
    vfs.mount("devtmpfs", "dev", vfs.lookup("/dev"), now)
    vfs.mount("sysfs", "sysfs", vfs.lookup("/sys"), now)
    vfs.mount("tmpfs", "tmpfs", vfs.lookup("/tmp"), now)
    vfs.mount("tmpfs", "run", vfs.lookup("/run"), now)
    for name, text in ETC.items():
        _write_new(k, "/etc/" + name, text.encode(), 0o644)
    for name, text in PROC.items():
        vfs.makedirs("/proc/" + name.rpartition("/")[0], now)
        _write_new(k, "/proc/" + name, text.encode(), 0o444)
    vfs.symlink("/proc/1", "/proc/self", now)
    for pid_dir in ["1/fd", "1/fdinfo", "1/task", "1/net"]:
        vfs.makedirs("/proc/" + pid_dir, now)
    for name, rdev in DEVICES.items():
        vfs.mknod_char("/dev/" + name, rdev)
    for d in ["pts", "shm", "mqueue"]:
        vfs.mkdir("/dev/" + d, 0o755, now)
    vfs.mount("tmpfs", "shm", vfs.lookup("/dev/shm"), now)
    vfs.symlink("/proc/self/fd", "/dev/fd", now)
    for i, name in enumerate(["stdin", "stdout", "stderr"]):
        vfs.symlink(f"/proc/self/fd/{i}", "/dev/" + name, now)
    for name in LIBS:
        dentry = vfs.create("/usr/lib/x86_64-linux-gnu/" + name, 0o755, now)
        dentry.inode.size = rng.randrange(64, 2048) * 1024
    for i in range(0 if minimal else 120):
        dentry = vfs.create(f"/usr/lib/x86_64-linux-gnu/libextra{i:03d}.so.{i % 7}", 0o644, now)
        dentry.inode.size = rng.randrange(8, 512) * 1024
    for name in BINARIES[: 4 if minimal else None]:
        dentry = vfs.create("/usr/bin/" + name, 0o755, now)
        dentry.inode.size = rng.randrange(16, 1200) * 1024
        vfs.symlink("/usr/bin/" + name, "/bin/" + name, now)
    for name in SBIN:
        dentry = vfs.create("/usr/sbin/" + name, 0o755, now)
        dentry.inode.size = rng.randrange(100, 1500) * 1024
        vfs.symlink("/usr/sbin/" + name, "/sbin/" + name, now)
    for i in range(share_files):
        _write_new(k, f"/usr/share/nginx/html/page{i:02d}.html", b"<html>%d</html>\n" % i, 0o644)
    _write_new(k, "/usr/share/nginx/html/index.html", b"<html><body>hello</body></html>\n", 0o644)
    if not minimal:
        _cold_tree(k, rng)
    _stamp_times(k, rng)
    _write_new(k, "/srv/www/index.html", b"<html><body>ckpt http</body></html>\n", 0o644)


def _write_new(k: Kernel, path: str, data: bytes, mode: int) -> Inode:
    dentry = k.vfs.create(path, mode, k.timekeeper.realtime_ns)
    dentry.inode.write(k.memory_file, 0, data)
    return dentry.inode


def page_cache(k: Kernel, path: str, rng: random.Random, fraction: float = 0.5) -> Inode:
    """Give a library some resident page-cache pages (what processes mapping it touched)."""
    inode = k.vfs.lookup(path).inode
    npages = -(-inode.size // 4096)
    for page in range(npages):
        if rng.random() < fraction:
            inode.write(k.memory_file, page * 4096, page_bytes(rng))
    return inode


def page_bytes(rng: random.Random) -> bytes:
    """4 KiB that compress like code or heap: some random bytes, some structure."""
    head = rng.randbytes(rng.choice((256, 1024, 2048)))
    text = (b"\x48\x89\xe5\x41\x57\x41\x56" + head[:9]) * 16
    body = head + text
    return (body * (4096 // len(body) + 1))[:4096]


def _cold_tree(k: Kernel, rng: random.Random) -> None:
    """The bulk of an image's dentry cache: certificates, zoneinfo, package metadata."""
    vfs, now = k.vfs, k.timekeeper.realtime_ns
    for path in ["/usr/share/ca-certificates/mozilla", "/etc/ssl/certs", "/usr/share/zoneinfo"]:
        vfs.makedirs(path, now)
    vfs.makedirs("/var/lib/dpkg/info", now)
    for i in range(140):
        name = f"CA_Root_{i:03d}.crt"
        dentry = vfs.create("/usr/share/ca-certificates/mozilla/" + name, 0o644, now)
        dentry.inode.size = rng.randrange(1200, 2200)
        vfs.symlink("/usr/share/ca-certificates/mozilla/" + name, f"/etc/ssl/certs/{i:08x}.0", now)
    for region in ["Africa", "America", "Asia", "Europe", "Pacific"]:
        vfs.makedirs("/usr/share/zoneinfo/" + region, now)
        for i in range(24):
            dentry = vfs.create(f"/usr/share/zoneinfo/{region}/City{i:02d}", 0o644, now)
            dentry.inode.size = rng.randrange(100, 3000)
    for i in range(90):
        for ext in ("list", "md5sums"):
            dentry = vfs.create(f"/var/lib/dpkg/info/pkg{i:03d}.{ext}", 0o644, now)
            dentry.inode.size = rng.randrange(50, 9000)


def _stamp_times(k: Kernel, rng: random.Random) -> None:
    """Give every file the varied timestamps of a real image (built over two years)."""
    now = k.timekeeper.realtime_ns
    two_years = 2 * 365 * 86400 * 10**9
    for _, dentry in k.vfs.walk():
        inode = dentry.inode
        born = now - rng.randrange(two_years)
        inode.btime_ns = born
        inode.mtime_ns = inode.ctime_ns = born + rng.randrange(max(1, now - born))
        inode.atime_ns = inode.mtime_ns + rng.randrange(max(1, now - inode.mtime_ns))

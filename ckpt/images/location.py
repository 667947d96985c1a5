"""``Location``: where an image (or a repository of images) lives, parsed once at the
CLI's edge from what the user typed, and again from the string a request carries over
the sandbox's control socket.  Everything else asks it (``is_local``, ``path``,
``url``) instead of looking at the text."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from ckpt.errors import UsageError

STORE_SCHEME = "s3"
_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*)://(.*)", re.DOTALL)


class BadLocation(UsageError):
    """Text that names no directory and no object-store image."""


@dataclass(frozen=True, slots=True)
class Location:
    """A local directory (``path``, absolute) or an object-store URL (``url``,
    ``s3://BUCKET[/PREFIX...]``); exactly one of the two is set."""

    path: Path | None = None
    url: str | None = None

    def __post_init__(self) -> None:
        if (self.path is None) == (self.url is None):
            raise ValueError("a Location is a path or a URL, not both or neither")

    @classmethod
    def parse(cls, text: str | os.PathLike[str]) -> Location:
        """A directory (relative to the working directory, or absolute), ``file:///DIR``
        or ``s3://BUCKET/PREFIX/NAME``; anything else is refused in one line."""
        raw = os.fspath(text)
        if not isinstance(raw, str) or not raw.strip():
            raise BadLocation("empty image path: give a directory or s3://BUCKET/PREFIX/NAME")
        if "\0" in raw:
            raise BadLocation("image path holds a NUL byte: give a directory or a URL")
        match = _SCHEME.fullmatch(raw)
        if match is None:
            return cls(path=Path(os.path.abspath(raw)))
        scheme, rest = match.group(1).lower(), match.group(2)
        if scheme == "file":
            host, slash, tail = rest.partition("/")
            if host not in ("", "localhost") or not slash:
                raise BadLocation(
                    f"{raw}: a file:// URL names a local directory, e.g. file:///srv/images/x"
                )
            return cls(path=Path(os.path.abspath("/" + tail)))
        if scheme == STORE_SCHEME:
            bucket = rest.split("/", 1)[0]
            if not bucket.strip():  # its spelling is the store client's to check
                raise BadLocation(f"{raw}: name a bucket, e.g. s3://BUCKET/PREFIX/NAME")
            return cls(url=f"{STORE_SCHEME}://{rest.rstrip('/')}")
        raise BadLocation(
            f"{raw}: unsupported scheme {scheme}://; give a directory, file:///DIR or "
            "s3://BUCKET/PREFIX/NAME"
        )

    @classmethod
    def of(cls, value: Location | str | os.PathLike[str]) -> Location:
        """``value`` if already a Location, else parsed."""
        return value if isinstance(value, Location) else cls.parse(value)

    @property
    def is_local(self) -> bool:
        return self.path is not None

    @property
    def in_store(self) -> bool:
        return self.url is not None

    @property
    def name(self) -> str:
        """The last part: the image's name (its directory's, or its URL's)."""
        if self.path is not None:
            return self.path.name
        assert self.url is not None
        return self.url.rsplit("/", 1)[-1]

    @property
    def parent(self) -> Location:
        """The place holding it: a directory, or a repository URL."""
        if self.path is not None:
            return Location(path=self.path.parent)
        assert self.url is not None
        scheme, _, rest = self.url.partition("://")
        if "/" not in rest:  # a bucket alone holds images; it is not one
            raise BadLocation(f"{self.url}: name the image, e.g. s3://BUCKET/PREFIX/NAME")
        return Location(url=f"{scheme}://{rest.rsplit('/', 1)[0]}")

    def sibling(self, name: str) -> Location:
        """The image ``name`` beside this one."""
        if self.path is not None:
            return Location(path=self.path.parent / name)
        return Location(url=f"{self.parent.url}/{name}")

    def same_place(self, other: Location) -> bool:
        """Both local, or both in one repository of one store: where a chain may live."""
        if self.is_local or other.is_local:
            return self.is_local and other.is_local
        return self.parent == other.parent

    def __str__(self) -> str:
        """For display and for the wire: an absolute path, or the URL."""
        return str(self.path) if self.path is not None else str(self.url)

"""Build the native engine's C core when a C compiler is there; install without it if not.

Everything else about the package is in pyproject.toml.  A failed compile is a warning,
never an install error: ``ckpt.state.native_status()`` then says the core is missing
and the default engine is ``typed``.  So that it can say *why*, the compiler's own
first error lines are kept beside the package in ``_native<EXT_SUFFIX>.build-error.txt``
(``ckpt/state/native_core.py`` reads it; a later successful build removes it).
"""

from __future__ import annotations

import contextlib
import glob
import os
import re
import sys
import tempfile
from collections.abc import Iterator

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

NOTE_SUFFIX = ".build-error.txt"  # native.BUILD_NOTE_SUFFIX reads the same name
NOTE_LINES = 6  # the first error lines kept: enough for the cause, short enough to read
ERROR = re.compile(r"(?i)\berror\b")  # gcc's and clang's "error:", not "-Werror=..."


def error_lines(output: str, fallback: str) -> list[str]:
    """The lines of a compiler's output that say what failed, or else ``fallback`` (the
    exception's message: a compiler that could not be run prints nothing)."""
    errors = [line.rstrip() for line in output.splitlines() if ERROR.search(line)]
    return errors[:NOTE_LINES] or [fallback]


class OptionalBuildExt(build_ext):
    """build_ext that records why a compile failed (the compiler's words) and goes on."""

    def run(self) -> None:
        # setuptools builds into build_lib and then copies to the source tree for
        # --inplace and editable installs: the note goes to both places
        self._to_source = bool(self.inplace)
        try:
            super().run()
        except Exception as exc:  # no compiler at all fails here, before any extension
            for ext in self.extensions:
                self._skipped(ext, exc)

    def build_extension(self, ext: Extension) -> None:
        try:
            with self._captured():
                super().build_extension(ext)
        except Exception as exc:
            self._skipped(ext, exc)
            return
        for note in self._note_paths(ext):
            if os.path.exists(note):
                os.remove(note)  # built now: an old note would say otherwise

    @contextlib.contextmanager
    def _captured(self) -> Iterator[None]:
        """The compiler's output (file descriptors 1 and 2: setuptools runs it as a child
        process, by one function or another depending on its version) kept in
        ``self._output`` and echoed, so ``pip install -v`` still shows all of it."""
        self._output = ""
        sys.stdout.flush()
        sys.stderr.flush()
        with tempfile.TemporaryFile() as tmp:
            saved = [os.dup(1), os.dup(2)]
            os.dup2(tmp.fileno(), 1)
            os.dup2(tmp.fileno(), 2)
            try:
                yield
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os.dup2(saved[0], 1)
                os.dup2(saved[1], 2)
                for fd in saved:
                    os.close(fd)
                tmp.seek(0)
                self._output = tmp.read().decode(errors="replace")
                sys.stderr.write(self._output)

    def _note_paths(self, ext: Extension) -> list[str]:
        """Beside where the extension would be (``_native.cpython-313-...so`` + suffix),
        in build_lib and, for an in-place build, in the source tree."""
        saved = self.inplace
        paths = []
        for inplace in (False, True) if getattr(self, "_to_source", False) else (saved,):
            self.inplace = inplace
            try:
                paths.append(self.get_ext_fullpath(ext.name) + NOTE_SUFFIX)
            finally:
                self.inplace = saved
        return paths

    def _skipped(self, ext: Extension, exc: Exception) -> None:
        lines = error_lines(getattr(self, "_output", ""), str(exc))
        for note in self._note_paths(ext):
            try:
                os.makedirs(os.path.dirname(note), exist_ok=True)
                with open(note, "w", encoding="utf-8") as f:
                    f.write("\n".join(lines) + "\n")
            except OSError:
                pass  # the warning below still says it
        print(
            f"warning: ckpt's native engine was not built: {lines[0]}; "
            "ckpt works without it (engine 'typed')",
            file=sys.stderr,
        )


setup(
    ext_modules=[
        Extension(
            "ckpt.state._native",
            sources=["ckpt/state/_native.c", "ckpt/state/_native_read.c"],
            # _native.c #includes its parts (one unit: the walk's hot calls inline across them)
            depends=sorted(glob.glob("ckpt/state/_native*.h")),
            extra_compile_args=["-O2"],
            optional=True,
        )
    ],
    cmdclass={"build_ext": OptionalBuildExt},
)

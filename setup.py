"""Build the native engine's C core when a C compiler is there; install without it if not.

Everything else about the package is in pyproject.toml.  A failed compile is a warning,
never an install error: ``ckpt.state.native_status()`` then says the core is missing
and the default engine is ``typed``.  So that it can say *why*, the compiler's own
first error lines are kept beside the package in ``_native<EXT_SUFFIX>.build-error.txt``
(``ckpt/state/native.py`` reads it; a later successful build removes it).
"""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

try:
    from setuptools.errors import CompileError
except ImportError:  # setuptools < 59
    from distutils.errors import CompileError  # type: ignore[no-redef]

NOTE_SUFFIX = ".build-error.txt"  # native.BUILD_NOTE_SUFFIX reads the same name
NOTE_LINES = 6  # the first error lines kept: enough for the cause, short enough to read


def error_lines(output: str, fallback: str) -> list[str]:
    """The lines of a compiler's output that say what failed (or its last lines)."""
    lines = [line.rstrip() for line in output.splitlines() if line.strip()]
    errors = [line for line in lines if "error" in line.lower()]
    return (errors or lines[-NOTE_LINES:] or [fallback])[:NOTE_LINES]


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
        self._output = ""
        self.compiler.spawn = self._spawn  # the compiler's output, kept for the note
        try:
            super().build_extension(ext)
        except Exception as exc:
            self._skipped(ext, exc)
            return
        for note in self._note_paths(ext):
            if os.path.exists(note):
                os.remove(note)  # built now: an old note would say otherwise

    def _spawn(self, cmd: list[str], **_: Any) -> None:
        """CCompiler.spawn, with the command's output captured (and echoed: ``pip -v``
        still shows all of it)."""
        if self.dry_run:
            return
        try:
            proc = subprocess.run(
                cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace"
            )
        except OSError as exc:
            raise CompileError(f"command {cmd[0]!r} failed: {exc.strerror}") from exc
        sys.stderr.write(proc.stdout)
        if proc.returncode:
            self._output = proc.stdout
            raise CompileError(f"command {cmd[0]!r} failed with exit code {proc.returncode}")

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
            depends=["ckpt/state/_native_read.h", "ckpt/state/_native_compat.h"],
            extra_compile_args=["-O2"],
            optional=True,
        )
    ],
    cmdclass={"build_ext": OptionalBuildExt},
)

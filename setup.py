"""Build the native engine's C core when a C compiler is there; install without it if not.

Everything else about the package is in pyproject.toml.  A failed compile is a warning,
never an install error: ``ckpt.state.native_status()`` then says the core is missing
and the default engine is ``typed``.
"""

from __future__ import annotations

import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext


class OptionalBuildExt(build_ext):
    """build_ext that reports a failed compile (no compiler, no headers) and goes on."""

    def run(self) -> None:
        try:
            super().run()
        except Exception as exc:  # a missing compiler surfaces as several error types
            self._skipped(exc)

    def build_extension(self, ext: Extension) -> None:
        try:
            super().build_extension(ext)
        except Exception as exc:
            self._skipped(exc)

    @staticmethod
    def _skipped(exc: Exception) -> None:
        print(
            f"warning: ckpt's native engine was not built ({exc}); "
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

"""Coverage-guided fuzzing of one target with atheris (libFuzzer driving Python coverage).

    python -m tests.fuzz.run TARGET [CORPUS_DIR...] [--work DIR] [-- LIBFUZZER_FLAGS...]

TARGET is ``state`` or ``statefile`` (``tests/fuzz/targets.py``).  The ckpt modules and
the target are imported under ``atheris.instrument_imports``, so libFuzzer sees Python
line and branch coverage; the native engine's C code has none (gcc cannot add
libFuzzer's), see README.md.  The corpus starts from seeds generated now from real
streams and images (``seeds.py``), the committed corpus and crash inputs, and any
CORPUS_DIR given (an earlier run's, to go on from it); what libFuzzer finds interesting is written to ``WORK/corpus``, findings to
``WORK/artifacts``.  A finding prints the input, then libFuzzer stops with a non-zero
exit.  Flags after ``--`` go to libFuzzer as they are (``-max_total_time=60``,
``-runs=100000``, ``-jobs=2``...).
"""

from __future__ import annotations

import argparse
import ctypes
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
DEFAULT_FLAGS = [
    "-timeout=20",  # seconds per input: a hang is a finding
    "-rss_limit_mb=3072",  # a huge allocation claimed by a small input is a finding
    "-max_len=65536",
    "-print_final_stats=1",
]


def describe(data: bytes, limit: int = 4096) -> str:
    """The input as a Python bytes literal (cut at ``limit``), for the CI log."""
    shown = repr(data[:limit])
    more = f" ... ({len(data)} bytes in all)" if len(data) > limit else f" ({len(data)} bytes)"
    return shown + more


_PC_TABLES: dict[str, ctypes.Array] = {}


def _libfuzzer() -> ctypes.CDLL | None:
    """The libFuzzer that atheris loaded (its core module), for its coverage entry points."""
    with open("/proc/self/maps") as maps:
        for line in maps:
            path = line.rstrip("\n").split(maxsplit=5)[-1]
            if "atheris/core_with_libfuzzer" in path:
                return ctypes.CDLL(path)
    return None


def register_native_coverage() -> str:
    """Hand libFuzzer the native core's edge counters, if it was built with them.

    ``.ci/fuzz.sh`` builds ``_native.c`` with gcc ``-fsanitize-coverage=trace-pc`` and
    links ``gcc_cov.c``, which counts edges into ``ckpt_cov_counters``; registered here
    as an inline 8-bit counter region, they guide libFuzzer like clang's would.  Returns
    what was done, for the log.
    """
    from ckpt.state import native

    core = getattr(native, "_core", None)
    if core is None:
        return "native C coverage: none (the native core is not built)"
    lib = ctypes.CDLL(core.__file__)
    try:
        size = ctypes.c_uint32.in_dll(lib, "ckpt_cov_size").value
    except ValueError:
        return "native C coverage: none (core built without gcc trace-pc; see README)"
    fuzzer = _libfuzzer()
    if fuzzer is None:
        return "native C coverage: none (atheris runs without its libFuzzer core)"
    start = ctypes.addressof((ctypes.c_uint8 * size).in_dll(lib, "ckpt_cov_counters"))
    fuzzer.__sanitizer_cov_8bit_counters_init(ctypes.c_void_p(start), ctypes.c_void_p(start + size))
    # A PC table (one made-up PC per counter, flags 0) so libFuzzer's "cov:" counts the
    # C edges too; without one it shows only "ft:".  Kept alive for the process.
    table = _PC_TABLES.setdefault("native", (ctypes.c_size_t * (2 * size))())
    table[0::2] = range(start, start + size)
    base = ctypes.addressof(table)
    fuzzer.__sanitizer_cov_pcs_init(
        ctypes.c_void_p(base), ctypes.c_void_p(base + ctypes.sizeof(table))
    )
    return f"native C coverage: {size} edge counters from gcc trace-pc"


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    extra: list[str] = []
    if "--" in argv:
        at = argv.index("--")
        argv, extra = argv[:at], argv[at + 1 :]
    parser = argparse.ArgumentParser(prog="python -m tests.fuzz.run", description=__doc__)
    parser.add_argument("target", choices=("state", "statefile"))
    parser.add_argument("dirs", nargs="*", type=Path, help="more corpus directories to read")
    parser.add_argument("--work", type=Path, help="corpus and artifacts (default: a temp dir)")
    args = parser.parse_args(argv)

    import atheris

    with atheris.instrument_imports(include=["ckpt", "tests"]):
        from . import seeds, targets

    work = args.work or Path(tempfile.mkdtemp(prefix=f"ckpt-fuzz-{args.target}-"))
    corpus, artifacts, seed_dir = work / "corpus", work / "artifacts", work / "seeds"
    for d in (corpus, artifacts):
        d.mkdir(parents=True, exist_ok=True)
    n = seeds.write_seeds(args.target, seed_dir)
    dirs = [corpus, seed_dir, *args.dirs]
    dirs += [
        p for p in (HERE / "corpus" / args.target, HERE / "crashes" / args.target) if p.is_dir()
    ]
    print(f"fuzz {args.target}: {n} generated seeds, corpus in {corpus}", file=sys.stderr)

    target = targets.TARGETS[args.target]

    registered = []

    def one_input(data: bytes) -> None:
        if not registered:  # atheris loads libFuzzer only once Fuzz() runs
            registered.append(True)
            print(f"fuzz {args.target}: {register_native_coverage()}", file=sys.stderr)
        try:
            target(data)
        except targets.Finding as exc:
            print(f"\nfuzz {args.target}: FINDING: {exc}", file=sys.stderr)
            print(f"fuzz {args.target}: input: {describe(data)}", file=sys.stderr)
            raise

    flags = [*DEFAULT_FLAGS, f"-artifact_prefix={artifacts}/", *extra]
    atheris.Setup([sys.argv[0], *flags, *map(str, dirs)], one_input)
    atheris.Fuzz()
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env bash
# Build the native engine's C core with AddressSanitizer into a scratch copy of the tree
# and run the state tests that feed it hostile input (corruption: truncation at every
# length, byte flips, a hostile value at every position; hypothesis random graphs; the
# native cross-check) under it.  Any ASan report aborts the run with a non-zero status.
# Leak detection is off: CPython itself keeps allocations alive at exit.
# CKPT_PYTHON picks the interpreter (default python3; e.g. a 3.13 venv's python, which
# needs the dev extra installed).
set -euo pipefail
cd "$(dirname "$0")/.."
started=$(date +%s)
work=$(mktemp -d /tmp/ckpt-asan.XXXXXX)
trap 'rm -rf "$work"' EXIT
cp -r ckpt tests pyproject.toml "$work"/
find "$work" -name '*.so' -delete
find "$work" -name '__pycache__' -prune -exec rm -rf {} +
py=${CKPT_PYTHON:-python3}
suffix=$($py -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))')
include=$($py -c 'import sysconfig; print(sysconfig.get_paths()["include"])')
gcc -shared -fPIC -O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined \
    -fno-sanitize-recover=undefined -Wall -I"$include" \
    ckpt/state/_native.c ckpt/state/_native_read.c -o "$work/ckpt/state/_native$suffix"
libasan=$(gcc -print-file-name=libasan.so)
libubsan=$(gcc -print-file-name=libubsan.so)
cd "$work"
export LD_PRELOAD="$libasan $libubsan"
export ASAN_OPTIONS=detect_leaks=0:abort_on_error=1:allocator_may_return_null=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
export PYTHONMALLOC=malloc  # every Python object its own malloc block: ASan sees overruns
export CKPT_TEST_SLOWDOWN=4  # the watchdogs allow for a sanitized build's pace
# The sanitized core, not an installed one, must be what the tests run.
$py -c "
import sys
from ckpt import state
from ckpt.state import native
assert state.native_status()[0], state.native_status()
assert native._core.__file__.startswith('$work'), native._core.__file__
print('asan: testing', native._core.__file__, file=sys.stderr)
"
set +e
$py -m pytest -q -p no:cacheprovider --dist load \
    tests/state/test_native.py tests/state/test_corruption.py tests/state/test_random_graphs.py \
    tests/state/test_deep.py tests/state/test_safety.py tests/state/test_fresh_containers.py \
    tests/state/test_native_damage.py tests/state/test_native_kinds.py \
    tests/state/test_native_load_kinds.py tests/state/test_native_layout.py \
    tests/state/test_native_parity.py
rc=$?
set -e
echo "asan: pytest exit $rc after $(( $(date +%s) - started )) s" >&2
if [ "$rc" -eq 5 ]; then
    echo "asan: pytest collected no tests; that is a failure here" >&2
    exit 1
fi
exit "$rc"

#!/usr/bin/env bash
# A bounded coverage-guided fuzz run of the state and statefile decoders, then
# every input it kept replayed under AddressSanitizer.  Fails on any finding and prints
# the input.  About 2 minutes: FUZZ_SECONDS (default 45) per target, both targets at
# once (one per core), then the sanitized replay.  See tests/fuzz/README.md.
#
# Two builds of the native core, because gcc's libasan (and libubsan) define libFuzzer's
# coverage callbacks as weak stubs: preloaded first, as ASan must be, they take every
# coverage call away from libFuzzer and atheris sees no coverage at all.  So:
#   1. fuzz: _native.c and _native_read.c built with gcc -fsanitize-coverage=trace-pc (edge counters through
#      tests/fuzz/gcc_cov.c, handed to libFuzzer) and UBSan in trap mode (no runtime);
#      Python coverage from atheris' instrumentation; a crash or hang stops the run.
#   2. replay: the same two built with ASan+UBSan as .ci/asan.sh builds it, LD_PRELOAD
#      libasan, every seed and corpus input of step 1 run through the same targets.
set -euo pipefail
cd "$(dirname "$0")/.."
started=$(date +%s)
seconds=${FUZZ_SECONDS:-45}
py=python3
# Where the 'fuzz' extra's marker says atheris has a wheel (pyproject.toml), CI must have it.
wheel=$($py -c 'import platform, sys
print(int(sys.platform == "linux" and platform.machine() == "x86_64" and sys.version_info < (3, 14)))')
if ! $py -c 'import atheris' 2>/dev/null; then
    if [ "${CI:-}" = "true" ] && [ "$wheel" = 1 ]; then
        echo "fuzz: atheris is not installed; CI installs it with the 'fuzz' extra" >&2
        exit 1
    fi
    echo "fuzz: atheris is not installed (pip install -e '.[dev,fuzz]', CPython 3.11-3.13" \
        "on x86-64 Linux); skipped" >&2
    exit 0
fi
work=$(mktemp -d /tmp/ckpt-fuzz.XXXXXX)
trap 'rm -rf "$work"' EXIT
suffix=$($py -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))')
include=$($py -c 'import sysconfig; print(sysconfig.get_paths()["include"])')
for tree in fuzz asan; do
    mkdir -p "$work/$tree"
    cp -r ckpt tests pyproject.toml "$work/$tree"/
    find "$work/$tree" -name '*.so' -delete
    find "$work/$tree" -name '__pycache__' -prune -exec rm -rf {} +
done
gcc -c -fPIC -O2 -Wall tests/fuzz/gcc_cov.c -o "$work/gcc_cov.o"
gcc -shared -fPIC -O1 -g -fno-omit-frame-pointer -fsanitize=undefined \
    -fsanitize-undefined-trap-on-error -fsanitize-coverage=trace-pc -Wall -I"$include" \
    ckpt/state/_native.c ckpt/state/_native_read.c "$work/gcc_cov.o" -o "$work/fuzz/ckpt/state/_native$suffix" &
build_fuzz=$!
gcc -shared -fPIC -O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined \
    -fno-sanitize-recover=undefined -Wall -I"$include" \
    ckpt/state/_native.c ckpt/state/_native_read.c -o "$work/asan/ckpt/state/_native$suffix" &
build_asan=$!
wait "$build_fuzz"
wait "$build_asan"

show_artifacts() {  # the inputs libFuzzer saved for a crash, hang or memory blow-up
    for f in "$work"/run-"$1"/artifacts/*; do
        [ -e "$f" ] || continue
        echo "fuzz $1: saved input $(basename "$f"):" >&2
        (cd "$work/fuzz" && $py -c "import sys; from tests.fuzz.run import describe; \
print(describe(open(sys.argv[1], 'rb').read()))" "$f") >&2
    done
}

# 1. Fuzz both targets at once, each on its own core.
cd "$work/fuzz"
$py -c "
from ckpt.state import native
assert native._core.__file__.startswith('$work/fuzz'), native._core.__file__
"
pids=()
for target in state statefile; do
    $py -m tests.fuzz.run "$target" --work "$work/run-$target" -- \
        -max_total_time="$seconds" >"$work/$target.log" 2>&1 &
    pids+=($!)
done
failed=0
for i in 0 1; do
    target=$([ "$i" = 0 ] && echo state || echo statefile)
    if wait "${pids[$i]}"; then
        grep -E "^fuzz $target: native C coverage" "$work/$target.log" >&2 || true
        grep -E '^#[0-9]+.*DONE' "$work/$target.log" | tail -n 1 | sed "s/^/fuzz $target: /" >&2
    else
        failed=1
        echo "fuzz $target: FAILED; the end of its log:" >&2
        tail -n 60 "$work/$target.log" >&2
        show_artifacts "$target"
    fi
done
if [ "$failed" -ne 0 ]; then
    exit 1
fi

# 2. Replay everything kept (generated seeds, the new corpus, committed inputs) under ASan.
cd "$work/asan"
export LD_PRELOAD="$(gcc -print-file-name=libasan.so) $(gcc -print-file-name=libubsan.so)"
export ASAN_OPTIONS=detect_leaks=0:abort_on_error=1:allocator_may_return_null=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
export PYTHONMALLOC=malloc
for target in state statefile; do
    set +e
    $py -c "
from ckpt.state import native
assert native._core.__file__.startswith('$work/asan'), native._core.__file__
" && $py -m tests.fuzz.replay "$target" --current "$work/current-$target" \
        "$work/run-$target/seeds" "$work/run-$target/corpus" \
        "tests/fuzz/corpus/$target" "tests/fuzz/crashes/$target"
    rc=$?
    set -e
    if [ "$rc" -ne 0 ]; then
        # Exit 1 is a finding the replay printed; anything else (an ASan abort, a
        # signal) stopped it on the input named in the status file.
        if [ "$rc" -ne 1 ] && [ -s "$work/current-$target" ]; then
            culprit=$(cat "$work/current-$target")
            echo "fuzz $target: the replay stopped (exit $rc) on $culprit:" >&2
            LD_PRELOAD= $py -c "import sys; from tests.fuzz.run import describe; \
print(describe(open(sys.argv[1], 'rb').read()))" "$culprit" >&2
        fi
        exit 1
    fi
done
echo "fuzz: no findings in $(( $(date +%s) - started )) s" >&2

#!/usr/bin/env bash
# The state tests on CPython 3.13 as well (CI's main run is on the default python3): a
# fresh venv from pyenv's 3.13 (or PY313=/path/to/python3.13, or python3.13 on PATH),
# the project installed into it with its dev extra (which builds the native engine's C
# core for 3.13), then tests/state.  Where no 3.13 exists this says so and passes.
# About 2 minutes on 2 cores, almost all of it the tests.
set -euo pipefail
cd "$(dirname "$0")/.."
started=$(date +%s)

find_py313() {
    if [ -n "${PY313:-}" ]; then
        echo "$PY313"
        return
    fi
    local root found=""
    root=$(pyenv root 2>/dev/null || echo "$HOME/.pyenv")
    for py in "$root"/versions/3.13*/bin/python3; do
        # the newest 3.13.x that runs (a free-threaded 3.13t is another ABI: skipped)
        case "$py" in *t/bin/python3) continue ;; esac
        [ -x "$py" ] && found=$py
    done
    if [ -n "$found" ]; then
        echo "$found"
    elif command -v python3.13 >/dev/null; then
        command -v python3.13
    fi
}

py=$(find_py313)
if [ -z "$py" ] || ! "$py" -c 'import sys; assert sys.version_info[:2] == (3, 13)' 2>/dev/null; then
    echo "py313: no CPython 3.13 here (not in pyenv, not python3.13 on PATH, PY313 unset);" \
        "the 3.13 state tests are skipped" >&2
    exit 0
fi
venv=$(mktemp -d /tmp/ckpt-py313.XXXXXX)
trap 'rm -rf "$venv"' EXIT
echo "py313: $("$py" -VV | head -1) from $py" >&2
"$py" -m venv "$venv"
# setuptools too: the tests that build the core from a scratch tree need it
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check -e '.[dev]' setuptools
# The C core must have been built for 3.13 wherever a compiler exists; say why if not.
"$venv/bin/python" - <<'EOF'
import shutil
import sys

from ckpt.state import native

ok, why = native.native_status()
print(f"py313: native engine: {'built' if ok else 'not built'} ({why})", file=sys.stderr)
if not ok and (shutil.which("gcc") or shutil.which("cc")):
    sys.exit(1)  # a compiler is here: a core that did not build is a failure
EOF
set +e
"$venv/bin/python" -m pytest -q -p no:cacheprovider tests/state
rc=$?
set -e
echo "py313: pytest exit $rc after $(( $(date +%s) - started )) s" >&2
if [ "$rc" -eq 5 ]; then
    echo "py313: pytest collected no tests; that is a failure here" >&2
    exit 1
fi
exit "$rc"

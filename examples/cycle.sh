#!/bin/sh
# A scripted checkpoint/restore cycle using only the ckpt CLI.
#
#   sh examples/cycle.sh            # uses a temporary root and image directory
#   CKPT=ckpt sh examples/cycle.sh  # or any command that runs ckpt (PYTHON=... too)
#
# Runs an http sandbox, sends it requests, checkpoints it, restores it (under a CPU
# quota of 0.5 when the host allows one), shows that the request count continues,
# and deletes everything it made, also when a step fails.
set -eu

PYTHON=${PYTHON:-python3}
CKPT=${CKPT:-"$PYTHON -m ckpt"}
WORK=$(mktemp -d "${TMPDIR:-/tmp}/ckpt-example.XXXXXX")
ROOT="$WORK/root"
IMAGE="$WORK/image"
ID="example-$$"  # cgroups are host-wide: unique per run

ck() { $CKPT --root "$ROOT" "$@"; }
cleanup() {
    if [ -d "$ROOT/$ID" ]; then ck delete --force "$ID" >/dev/null 2>&1 || true; fi
    ck template stop >/dev/null 2>&1 || true  # the root's warm template, if one started
    rm -rf "$WORK"
}
trap cleanup EXIT INT TERM

address() { ck state "$ID" | sed -n 's/.*"address": "\(.*\)".*/\1/p'; }
# GET / n times from the sandbox at $ADDR (curl would do; python3 is always there)
hit() {
    "$PYTHON" -c 'import sys; from ckpt.sandbox.host.http import get_json
host, port = sys.argv[1].rsplit(":", 1)
for _ in range(int(sys.argv[2])): print(get_json(host, int(port))[1])' "$ADDR" "$1"
}

echo "== run"
ck run "$ID" --workload http --port 0
ck list
ADDR=$(address)

echo "== requests"
hit 3

echo "== checkpoint (the sandbox stops)"
ck checkpoint "$ID" --image-path "$IMAGE" --stats

echo "== restore"
if ck restore "$ID" --image-path "$IMAGE" --cpu 0.5 2>"$WORK/restore.err"; then
    :
elif grep -q "cannot apply a CPU quota" "$WORK/restore.err"; then
    echo "(no CPU quota on this host; restoring uncapped)"
    ck restore "$ID" --image-path "$IMAGE"
else
    cat "$WORK/restore.err" >&2
    exit 1
fi

echo "== requests after restore (the count continues, on the same address)"
ADDR=$(address)
hit 2

echo "== done: delete it (--force: it is still running)"
ck delete --force "$ID"

#!/bin/sh
# A scripted checkpoint/restore cycle using only the ckpt CLI.
#
#   sh examples/cycle.sh            # uses a temporary root and image directory
#   CKPT=ckpt sh examples/cycle.sh  # or any command that runs ckpt
#
# Runs an http sandbox, sends it requests, checkpoints it, restores it (under a CPU
# quota of 0.5 when the host allows one), shows that the request count continues,
# and deletes everything it made, also when a step fails.
set -eu

CKPT=${CKPT:-"python3 -m ckpt"}
WORK=$(mktemp -d "${TMPDIR:-/tmp}/ckpt-example.XXXXXX")
ROOT="$WORK/root"
IMAGE="$WORK/image"
ID=example

ck() { $CKPT --root "$ROOT" "$@"; }
cleanup() { ck delete --force "$ID" >/dev/null 2>&1 || true; rm -rf "$WORK"; }
trap cleanup EXIT INT TERM

address() { ck state "$ID" | sed -n 's/.*"address": "\(.*\)".*/\1/p'; }
hit() {
    python3 -c 'import sys; from ckpt.sandbox.http import get_json
host, port = sys.argv[1].rsplit(":", 1); print(get_json(host, int(port))[1])' "$(address)"
}

echo "== run"
ck run "$ID" --workload http --port 0
ck list

echo "== requests"
hit; hit; hit

echo "== checkpoint (the sandbox stops)"
ck checkpoint "$ID" --image-path "$IMAGE" --stats
ck state "$ID"

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

echo "== requests after restore (the count continues)"
hit; hit

echo "== done"
ck kill "$ID"
ck delete "$ID"

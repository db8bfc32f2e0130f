#!/usr/bin/env bash
# `make demo`: runs every workload on the host and on a fresh embedded device in
# ./out/demo-device and prints the comparison. Usage: scripts/demo.sh [SIZE] (256MiB).
set -euo pipefail
cd "$(dirname "$0")/.."
SIZE="${1:-256MiB}"
CSX="${CARGO_TARGET_DIR:-target}/release/csx"
[ -x "$CSX" ] || { echo "demo: $CSX is missing; run make build" >&2; exit 1; }
rm -rf out/demo-device
mkdir -p out
exec "$CSX" demo --size "$SIZE"

#!/usr/bin/env bash
# Builds csx._native in the release profile (optimised, thin LTO: the workspace's
# [profile.release]) into its own target directory and runs Python on it, for
# benchmarks: the module scripts/python-test.sh builds (and `make test` tests) is the
# dev profile, whose workspace crates run at opt-level 1, and an embedded device in the
# Python process runs that code.
#
#   scripts/python-release.sh -m csx.bench tpch --sf 1 --runs 5 --queries q6 --json
#
# The wheel maturin builds is unpacked into $RELEASE_DIR/site (not into the
# environment, so the dev build the tests use stays as it is) and Python runs with that
# first on its path, from the repository's root (not python/, whose csx is the dev
# build's). Its packages (duckdb, pyarrow, ...) are the environment's: the one
# scripts/python-test.sh makes (target/py-venv), which must exist. No arguments: build
# and install only. CSX_RELEASE_TARGET names the target directory (default
# target-rel); the benchmark's JSON says which build ran ("native_build").
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
VENV=${CARGO_TARGET_DIR:-$ROOT/target}/py-venv
VPY=$VENV/bin/python
[ -x "$VPY" ] || { echo "python-release: no $VENV: run scripts/python-test.sh first" >&2; exit 1; }
MATURIN=$VENV/bin/maturin
[ -x "$MATURIN" ] || MATURIN=$(command -v maturin) || { echo "python-release: no maturin: run scripts/python-test.sh first" >&2; exit 1; }
RELEASE_DIR=${CSX_RELEASE_TARGET:-$ROOT/target-rel}
mkdir -p "$RELEASE_DIR/wheels"
rm -f "$RELEASE_DIR"/wheels/csx-*.whl
echo "python-release: building csx._native (maturin build --release) into $RELEASE_DIR" >&2
(cd python && CARGO_TARGET_DIR=$RELEASE_DIR "$MATURIN" build -q --release -i "$VPY" -o "$RELEASE_DIR/wheels")
wheel=$(ls "$RELEASE_DIR"/wheels/csx-*.whl)
rm -rf "$RELEASE_DIR/site"
"$VPY" -m pip install -q --no-deps --no-index --target "$RELEASE_DIR/site" "$wheel"
PYTHONPATH="$RELEASE_DIR/site${PYTHONPATH:+:$PYTHONPATH}" "$VPY" -c \
    'import csx._native as n, sys; sys.exit(0 if n.BUILD_PROFILE == "release" else "python-release: the module is a " + n.BUILD_PROFILE + " build")'
[ $# -gt 0 ] || exit 0
export PYTHONPATH="$RELEASE_DIR/site${PYTHONPATH:+:$PYTHONPATH}"
exec "$VPY" "$@"

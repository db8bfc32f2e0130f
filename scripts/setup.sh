#!/usr/bin/env bash
# Installs what a fresh machine lacks to build and test csx. Idempotent: each step
# checks before it acts, so running it again costs a few milliseconds.
set -euo pipefail

need_apt=()
command -v clang >/dev/null 2>&1 || need_apt+=(clang)
command -v llvm-objdump >/dev/null 2>&1 || command -v llvm-objdump-14 >/dev/null 2>&1 || need_apt+=(llvm)
# clang 19 is the only Debian clang that emits cpu v4; the loader is tested on its output.
command -v clang-19 >/dev/null 2>&1 || need_apt+=(clang-19)
# libcsx's C tests (crates/capi) compile C programs with gcc and query csx.pc.
command -v gcc >/dev/null 2>&1 || need_apt+=(gcc)
command -v pkg-config >/dev/null 2>&1 || need_apt+=(pkg-config)
# csx mount (csx-fs): fusermount3 mounts for non-root users; root mounts through /dev/fuse.
command -v fusermount3 >/dev/null 2>&1 || need_apt+=(fuse3)
# The Python package (python/, scripts/python-test.sh): python3 with venv and headers.
command -v python3 >/dev/null 2>&1 || need_apt+=(python3 python3-dev python3-venv python3-pip)
command -v python3 >/dev/null 2>&1 && ! python3 -c 'import venv, ensurepip' >/dev/null 2>&1 && need_apt+=(python3-venv)
# csx bench device compares the device's media reads with fio's at the same depth.
command -v fio >/dev/null 2>&1 || need_apt+=(fio)
# The daemon's TLS test (crates/server/tests/hardening.rs) makes its certificates with openssl.
command -v openssl >/dev/null 2>&1 || need_apt+=(openssl)

if [ ${#need_apt[@]} -gt 0 ]; then
    echo "setup: installing ${need_apt[*]}"
    SUDO=""
    [ "$(id -u)" -eq 0 ] || SUDO="sudo"
    export DEBIAN_FRONTEND=noninteractive
    $SUDO apt-get update -qq
    $SUDO apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi

for tool in cargo rustc clang; do
    command -v "$tool" >/dev/null 2>&1 || { echo "setup: $tool is still missing" >&2; exit 1; }
done
[ -e /dev/fuse ] || echo "setup: /dev/fuse is missing: csx mount and the csx-fs tests need it (modprobe fuse)" >&2
rustup component list --installed 2>/dev/null | grep -q clippy || rustup component add clippy rustfmt
# csx-data (SSB, TPC-H): pyarrow writes the Parquet copy, DuckDB is the tests' oracle.
if ! python3 -c 'import duckdb, pyarrow, numpy' >/dev/null 2>&1; then
    echo "setup: installing duckdb, pyarrow and numpy for python3"
    python3 -m pip install -q duckdb pyarrow numpy 2>/dev/null \
        || python3 -m pip install -q --break-system-packages duckdb pyarrow numpy
fi

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

#!/bin/sh
# Builds uBPF outside the csx tree and this directory's runner against it:
#   crates/bench/peers/ubpf/build.sh [DIR]      (DIR defaults to /work/peers)
# then `csx bench vm --peer ubpf=DIR/ubpf-run`. Needs git, cmake and a C compiler.
# Set UBPF_SRC to an existing uBPF checkout to skip the clone.
set -eu
dir=${1:-/work/peers}
here=$(cd "$(dirname "$0")" && pwd)
src=${UBPF_SRC:-$dir/ubpf}
mkdir -p "$dir"
if [ ! -d "$src/vm" ]; then
    git clone https://github.com/iovisor/ubpf "$src"
fi
cmake -S "$src" -B "$dir/ubpf-build" -DCMAKE_BUILD_TYPE=Release \
    -DUBPF_SKIP_EXTERNAL=ON -DUBPF_ENABLE_TESTS=OFF -DUBPF_INSTALL_GIT_HOOKS=OFF
cmake --build "$dir/ubpf-build" --target ubpf
cc -O2 -Wall -Wextra -o "$dir/ubpf-run" "$here/ubpf-run.c" \
    -I"$src/vm/inc" -I"$dir/ubpf-build/vm" "$dir/ubpf-build/lib/libubpf.a" -lm
echo "built $dir/ubpf-run (uBPF $(git -C "$src" rev-parse --short HEAD 2>/dev/null || echo '?'))"

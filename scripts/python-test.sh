#!/usr/bin/env bash
# Builds the Python package `csx` (python/: the PyO3 module csx._native, built by maturin
# in the dev profile into the workspace's target directory, so it reuses what
# `cargo test --workspace` built) into a virtual environment, and runs its pytest suite.
# Idempotent: the environment and the packages the tests need are made or installed
# only when missing. `make test` runs it; extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."

PY=${PYTHON:-python3}
command -v "$PY" >/dev/null 2>&1 || { echo "python-test: $PY not found: run scripts/setup.sh" >&2; exit 1; }
TGT=${CARGO_TARGET_DIR:-$PWD/target}
VENV=$TGT/py-venv
if [ ! -x "$VENV/bin/python" ]; then
    echo "python-test: creating $VENV"
    "$PY" -m venv --system-site-packages "$VENV" || {
        echo "python-test: cannot create a virtual environment: run scripts/setup.sh (python3-venv)" >&2
        exit 1
    }
fi
VPY=$VENV/bin/python

# The packages the build and the tests need (module name=pip requirement).
need=()
# csx.dask: dask.dataframe (with pandas) and distributed, versions that support Python 3.11.
# csx.polars: Polars' IO sources (register_io_source, 1.x and 2.x). mypy checks the
# package's types (strict on csx).
for pair in numpy=numpy pyarrow=pyarrow duckdb=duckdb pytest=pytest matplotlib=matplotlib \
    dask.dataframe='dask[dataframe]>=2025.1' distributed='distributed>=2025.1' \
    polars='polars>=1.20' mypy='mypy>=2'; do
    mod=${pair%%=*}
    "$VPY" -c "import $mod" >/dev/null 2>&1 || need+=("${pair#*=}")
done
if [ ${#need[@]} -gt 0 ]; then
    echo "python-test: installing ${need[*]}"
    "$VPY" -m pip install -q "${need[@]}"
fi

# maturin is a program: the environment's own, else one on PATH, else installed here.
MATURIN=$VENV/bin/maturin
if [ ! -x "$MATURIN" ]; then
    if command -v maturin >/dev/null 2>&1; then
        MATURIN=$(command -v maturin)
    else
        echo "python-test: installing maturin"
        "$VPY" -m pip install -q --ignore-installed maturin
    fi
fi

export CARGO_TARGET_DIR=$TGT
echo "python-test: building csx._native (maturin develop, dev profile)"
# --skip-install: the module is built in place (python/csx/_native*.so, ignored by git)
# and the tests import the package from python/.
(cd python && VIRTUAL_ENV=$VENV "$MATURIN" develop -q --skip-install)
(cd python && "$VPY" -c "import csx._native") || { echo "python-test: csx._native did not build" >&2; exit 1; }
# The types: mypy strict on the package (python/pyproject.toml [tool.mypy]), and the
# stubs of the native module against the module itself.
echo "python-test: mypy (strict) on csx, stubtest on csx._native"
(cd python && "$VPY" -m mypy -p csx \
    && "$VPY" -m mypy.stubtest csx._native --ignore-disjoint-bases --allowlist stubtest-allowlist.txt)
cd python && exec "$VPY" -m pytest -q -p no:cacheprovider tests "$@"

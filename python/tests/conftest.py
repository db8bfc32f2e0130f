"""Fixtures of the csx package's tests: embedded devices in temporary directories and
daemons (tcp, shm) serving them from this process. Nothing is skipped: a missing tool
(clang, pyarrow, duckdb) fails loudly, naming scripts/setup.sh."""

import itertools
import os

import pytest

try:
    import csx
except ImportError as e:  # pragma: no cover - the message is the point
    raise ImportError(
        f"the csx package is not importable ({e}): build it with scripts/python-test.sh "
        "(make test runs it) or `pip install ./python`"
    ) from None

import csx.data  # noqa: E402 (after the import check above)

MiB = 1 << 20
_names = itertools.count()


def new_device(path, **kw):
    kw.setdefault("nvm_size", 256 * MiB)
    kw.setdefault("slm_size", 64 * MiB)
    kw.setdefault("engines", 2)
    return csx.Device.init(path, **kw)


@pytest.fixture
def dev(tmp_path):
    d = new_device(tmp_path / "dev")
    yield d
    d.close()


@pytest.fixture(params=["embedded", "tcp", "shm"])
def any_dev(request, tmp_path):
    """A device on each transport: embedded, and served over tcp and shm."""
    state = tmp_path / "dev"
    if request.param == "embedded":
        d = new_device(state)
        yield d
        d.close()
        return
    new_device(state).close()
    listen = (
        "tcp://127.0.0.1:0"
        if request.param == "tcp"
        else f"shm://csx-pytest-{os.getpid()}-{next(_names)}"
    )
    server = csx.serve(state, listen)
    d = csx.Device.open(server.uris[0])
    yield d
    d.close()
    server.shutdown()


@pytest.fixture(scope="session")
def stats64():
    return csx.sdk_program("stats64")


def ssb_and_tpch(root, ssb_seed, tpch_seed):
    """SSB (SF 0.01) and TPC-H (SF 0.002) under `root`, each with its Parquet copy, put
    on a new embedded device at /ssb and /tpch: (device, ssb dataset, tpch dataset)."""
    ssb = csx.data.generate("ssb", root / "ssb", 0.01, seed=ssb_seed)
    csx.data.write_parquet(root / "ssb", root / "ssb-parquet")
    tpch = csx.data.generate("tpch", root / "tpch", 0.002, seed=tpch_seed)
    csx.data.write_parquet(root / "tpch", root / "tpch-parquet")
    d = new_device(root / "dev")
    csx.data.put_dir(d, root / "ssb", "/ssb")
    csx.data.put_dir(d, root / "tpch", "/tpch")
    return d, ssb, tpch

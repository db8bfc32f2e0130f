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

"""Python at the reach of the CLI and the C library: a run's time limit, Ctrl-C (any
signal handler that raises) stopping a device run, every completion status mapped to
an exception class, the package version from one place."""

import re
import signal
import threading
import time
from pathlib import Path

import pytest

import csx
import csx._native
import csx.errors

# Writes the device file named by its parameter bytes, then spins until stopped.
SPIN = """#include "csx.h"
CSX_PROGRAM(spin) {
    csx_file_write((const char *)args->params, args->params_len, 0, args->params,
                   args->params_len);
    volatile csx_u64 i = 0;
    for (;;) i++;
    return i;
}
"""

FUEL_MAX = 1 << 40
HOUR_MS = 3_600_000


@pytest.fixture(scope="module")
def spin():
    return csx.build(SPIN, "spin")


class Interrupted(Exception):
    pass


def interrupt_when(dev, marker, sent):
    """SIGINT to this process once the spin has written `marker` (it runs)."""

    def go():
        for _ in range(6000):
            if dev.exists(marker):
                break
            time.sleep(0.01)
        sent.append(time.monotonic())
        signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)

    t = threading.Thread(target=go, daemon=True)
    t.start()
    return t


@pytest.fixture
def sigint_raises():
    def handler(signum, frame):
        raise Interrupted()

    old = signal.signal(signal.SIGINT, handler)
    yield
    signal.signal(signal.SIGINT, old)


def test_time_limit_stops_a_run_with_its_exception(dev, spin):
    with pytest.raises(csx.TimeLimitExceededError) as e:
        dev.exec(spin, params=b"/m0", fuel=FUEL_MAX, time_limit_ms=50)
    assert e.value.status == 0xC9 and e.value.status_name == "TimeLimitExceeded"
    assert isinstance(e.value, TimeoutError)
    assert "50" in str(e.value) or "50" in (e.value.detail or "")
    with pytest.raises(ValueError) as e2:
        dev.exec(spin, params=b"/m0", time_limit_ms=0)
    assert "time_limit_ms" in str(e2.value)
    # over the protocol's limit: the host refuses, naming the limit
    with pytest.raises(csx.LimitError) as e3:
        dev.exec(spin, params=b"/m0", time_limit_ms=HOUR_MS + 1)
    assert str(HOUR_MS) in str(e3.value)


def test_ctrl_c_aborts_a_device_run(any_dev, spin, sigint_raises):
    dev = any_dev
    sent = []
    t = interrupt_when(dev, "/spinning", sent)
    with pytest.raises(Interrupted):
        # only an abort stops this run: an hour's limit, all the fuel there is
        dev.exec(spin, params=b"/spinning", fuel=FUEL_MAX, time_limit_ms=HOUR_MS)
    t.join()
    assert sent
    # the run stopped on the device: exec's unload of the program succeeded (a
    # running program cannot be unloaded), and the device runs the next program
    r = dev.exec(csx.sdk_program("stats64"), (b"\x01" + b"\x00" * 7) * 4, output_size=32)
    assert r.array("<u8")[0] == 4


def test_ctrl_c_stops_a_lambda_read(dev, spin, sigint_raises):
    dev.put("/data", b"\x00" * 4096)
    sent = []
    t = interrupt_when(dev, "/lambda-spinning", sent)
    with pytest.raises(Interrupted):
        dev.read_lambda("/data", spin, mode="device", params=b"/lambda-spinning", fuel=FUEL_MAX)
    t.join()
    assert sent
    r = dev.read_lambda("/data", csx.sdk_program("stats64"), mode="device", output_size=32)
    assert r.ran == "device"


def test_every_status_has_its_exception_class():
    table = csx._native.statuses()
    names = {name for _code, name, _text in table}
    assert {"Success", "Aborted", "TimeLimitExceeded", "Internal", "Trap", "NotFound"} <= names
    for code, name, text in table:
        if name == "Success":
            assert name not in csx.errors.STATUS_CLASSES
            continue
        cls = csx.errors.STATUS_CLASSES.get(name)
        assert cls is not None, f"status {name} ({code:#x}, {text}) has no exception class"
        assert issubclass(cls, csx.DeviceError) and cls is not csx.DeviceError
        e = csx.errors._from_native("device", f"op: {text}", {"status": code, "status_name": name, "op": "op"})
        assert type(e) is cls and e.status == code and e.status_name == name
    # and nothing maps a status the device does not have
    assert set(csx.errors.STATUS_CLASSES) <= names
    assert csx.errors.STATUS_CLASSES["Aborted"] is csx.AbortedError
    assert csx.errors.STATUS_CLASSES["Internal"] is csx.InternalDeviceError


def test_version_is_the_workspace_version():
    cargo = (Path(__file__).resolve().parents[2] / "Cargo.toml").read_text()
    m = re.search(r'\[workspace\.package\][^\[]*?\nversion = "([^"]+)"', cargo)
    assert m, "no [workspace.package] version in Cargo.toml"
    assert csx.__version__ == csx._native.__version__ == m.group(1)
    pyproject = (Path(__file__).resolve().parents[1] / "pyproject.toml").read_text()
    assert 'dynamic = ["version"]' in pyproject and not re.search(r'^version\s*=', pyproject, re.M)

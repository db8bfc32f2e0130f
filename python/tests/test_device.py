"""csx.Device: files, programs, λ-IO, errors; on every transport."""

import numpy as np
import pytest

import csx

MiB = 1 << 20


def test_put_get_round_trip_and_zero_copy_numpy(any_dev):
    data = np.arange(100_000, dtype="<u8")
    assert any_dev.put("/data/nums", data) == data.nbytes
    buf = any_dev.get("/data/nums")
    assert isinstance(buf, csx.Buffer)
    assert len(buf) == data.nbytes
    assert bytes(buf) == data.tobytes()
    arr = any_dev.read_array("/data/nums", "<u8")
    np.testing.assert_array_equal(arr, data)
    # No copy after the transfer: the array views the Buffer's memory, read-only.
    view = np.frombuffer(buf, dtype="<u8")
    assert view.ctypes.data == buf.address
    assert not view.flags.writeable
    # A range.
    part = any_dev.read_array("/data/nums", "<u8", offset=8 * 10, count=5)
    np.testing.assert_array_equal(part, data[10:15])


def test_put_accepts_bytes_bytearray_memoryview(dev):
    dev.put("/a", b"hello")
    dev.put("/b", bytearray(b"world"))
    dev.put("/c", memoryview(b"xyz!")[1:])
    dev.put("/d", np.array([[1, 2], [3, 4]], dtype="<i4"))
    assert bytes(dev.get("/a")) == b"hello"
    assert bytes(dev.get("/b")) == b"world"
    assert bytes(dev.get("/c")) == b"yz!"
    np.testing.assert_array_equal(dev.read_array("/d", "<i4"), [1, 2, 3, 4])
    assert bytes(dev.get("/a", offset=1, length=3)) == b"ell"
    assert bytes(dev.get("/a", offset=5)) == b""


def test_ls_stat_rm(any_dev):
    any_dev.put("/t/x", b"1234")
    any_dev.put("/t/y", b"12345678")
    any_dev.put("/u/z", b"1")
    files = any_dev.ls("/t")
    assert [(f.path, f.size) for f in files] == [("/t/x", 4), ("/t/y", 8)]
    assert any_dev.stat("/t/y").size == 8
    assert any_dev.exists("/t/x")
    any_dev.rm("/t/x")
    assert not any_dev.exists("/t/x")
    with pytest.raises(csx.NotFoundError) as e:
        any_dev.stat("/t/x")
    assert e.value.status == 0xC1
    assert e.value.status_name == "NotFound"
    assert e.value.op == "file-stat"
    assert isinstance(e.value, FileNotFoundError)
    assert isinstance(e.value, csx.DeviceError)
    assert "/t/x" in str(e.value)


def test_put_file_get_file(dev, tmp_path):
    src = tmp_path / "in.bin"
    payload = np.random.default_rng(7).integers(0, 256, 3 * MiB + 17, dtype=np.uint8)
    src.write_bytes(payload.tobytes())
    assert dev.put_file(src, "/big") == payload.nbytes
    out = tmp_path / "out.bin"
    assert dev.get_file("/big", out) == payload.nbytes
    assert out.read_bytes() == payload.tobytes()
    with pytest.raises(csx.LocalFileError) as e:
        dev.put_file(tmp_path / "missing", "/x")
    assert "missing" in str(e.value)


def test_exec_stats64_over_a_device_file(any_dev, stats64):
    data = np.random.default_rng(1).integers(0, 1 << 40, 50_000, dtype=np.uint64)
    any_dev.put("/nums", data)
    r = any_dev.exec(stats64, "/nums", output_size=32)
    assert r.r0 == 32
    assert r.status == 0 and r.status_name == "Success" and not r.trapped
    assert r.staged_bytes == data.nbytes
    count, total, lo, hi = r.array("<u8")
    assert count == len(data)
    assert total == int(data.sum(dtype=np.uint64))
    assert lo == data.min() and hi == data.max()
    assert r.timing["total_ns"] > 0
    assert r.fuel_used > 0


def test_exec_with_host_input_and_params(dev):
    filt = csx.sdk_program("filter")
    data = np.arange(1000, dtype="<u8")
    r = dev.exec(filt, data, output_size=data.nbytes, cparam1=100, cparam2=199)
    np.testing.assert_array_equal(r.array("<u8"), np.arange(100, 200, dtype="<u8"))
    # Both engines agree.
    r2 = dev.exec(filt, data, output_size=data.nbytes, cparam1=100, cparam2=199, engine="interp")
    assert bytes(r2.output) == bytes(r.output)


def test_program_loaded_once_run_many(dev, stats64):
    dev.put("/n", np.arange(10, dtype="<u8"))
    with dev.load(stats64) as prog:
        for offset in range(0, 80, 16):
            r = prog.run("/n", input_offset=offset, input_length=16, output_size=32)
            count, total, _, _ = r.array("<u8")
            assert count == 2
            assert total == offset // 8 + offset // 8 + 1
    assert "unloaded" in repr(prog)


def test_unload_names_the_generation_loaded(any_dev, stats64):
    """An unload naming another program generation than the slot holds is refused
    (status ProgramChanged) and the program stays; Program.unload names its own."""
    prog = any_dev.load(stats64)
    assert prog._generation is not None
    with pytest.raises(csx.ProgramStateError) as e:
        any_dev._native.unload(prog.slot, prog._generation + 1)
    assert f"slot {prog.slot}" in str(e.value) and str(prog._generation) in str(e.value)
    any_dev.put("/two", np.arange(2, dtype="<u8"))
    assert prog.run("/two", output_size=32).array("<u8")[0] == 2
    prog.unload()
    assert "unloaded" in repr(prog)


def test_program_from_c_source(dev, tmp_path):
    src = tmp_path / "twice.c"
    src.write_text(
        '#include "csx.h"\n'
        "CSX_PROGRAM(twice) { return 2 * args->cparam1 + 1; }\n"
    )
    assert dev.exec(src, cparam1=20).r0 == 41


def test_trap_raises_with_status_and_pc(dev):
    oob = csx.build(
        '#include "csx.h"\n'
        "CSX_PROGRAM(oob) { const volatile csx_u8 *p = win0; return p[win0_len + 4096]; }\n",
        "oob",
    )
    with pytest.raises(csx.TrapError) as e:
        dev.exec(oob, b"12345678")
    assert e.value.status == 0xC0
    assert e.value.trap_kind is not None and e.value.pc is not None
    assert e.value.result.trapped
    r = dev.exec(oob, b"12345678", check=False)
    assert r.trapped and r.status == 0xC0 and r.output is None


def test_invalid_program_names_the_device_status(dev):
    with pytest.raises(csx.InvalidProgramError) as e:
        dev.exec(b"\x00" * 7)  # not a whole instruction
    assert e.value.status in (0x8E, 0x90)
    with pytest.raises(csx.BuildError) as e:
        csx.build("this is not C", "broken")
    assert "broken" in str(e.value)


def test_read_lambda_on_each_side_agrees(dev, stats64):
    data = np.arange(1 << 16, dtype="<u8")
    dev.put("/l", data)
    outs = {}
    for mode in ("device", "host", "auto"):
        r = dev.read_lambda("/l", stats64, mode=mode, output_size=32)
        outs[mode] = bytes(r.output)
        assert r.modelled_ns >= 0
        if mode == "device":
            assert r.ran == "device" and r.device is not None
        if mode == "host":
            assert r.ran == "host" and r.host is not None
        if mode == "auto":  # a fresh session profiles: both sides ran and agreed
            assert r.ran == "both" and r.host is not None and r.device is not None
    assert outs["device"] == outs["host"] == outs["auto"]
    count, total, lo, hi = np.frombuffer(outs["device"], "<u8")
    assert (count, total, lo, hi) == (len(data), int(data.sum()), 0, len(data) - 1)


def test_read_lambda_host_side_of_a_served_device_needs_state_dir(tmp_path, stats64):
    from conftest import new_device

    state = tmp_path / "dev"
    new_device(state).close()
    with csx.serve(state, "tcp://127.0.0.1:0") as server:
        with csx.Device.open(server.uris[0]) as d:
            d.put("/l", np.arange(100, dtype="<u8"))
            with pytest.raises(csx.LambdaError) as e:
                d.read_lambda("/l", stats64, mode="host", output_size=32)
            assert "state directory" in str(e.value)
            r = d.read_lambda("/l", stats64, mode="host", output_size=32, state_dir=state)
            assert np.frombuffer(r.output, "<u8")[1] == sum(range(100))


# -- bad input: TypeError/ValueError naming the argument, typed device errors ----------


@pytest.mark.parametrize(
    "call, exc, name",
    [
        (lambda d: d.put(123, b"x"), TypeError, "path"),
        (lambda d: d.put("relative", b"x"), ValueError, "path"),
        (lambda d: d.put("/x", "text"), TypeError, "data"),
        (lambda d: d.put("/x", 3.5), TypeError, "data"),
        (lambda d: d.put("/x", np.arange(10)[::2]), ValueError, "data"),
        (lambda d: d.get("/x", offset=-1), ValueError, "offset"),
        (lambda d: d.get("/x", length="9"), TypeError, "length"),
        (lambda d: d.read_array("/x", dtype="no-such-type"), TypeError, "dtype"),
        (lambda d: d.exec(3.5), TypeError, "program"),
        (lambda d: d.exec(b""), ValueError, "program"),
        (lambda d: d.exec(b"\x95" + b"\x00" * 7, engine="gpu"), ValueError, "engine"),
        (lambda d: d.exec(b"\x95" + b"\x00" * 7, cparam1=1 << 64), ValueError, "cparam1"),
        (lambda d: d.exec(b"\x95" + b"\x00" * 7, cparam2=-1), ValueError, "cparam2"),
        (lambda d: d.exec(b"\x95" + b"\x00" * 7, output_size=0), ValueError, "output_size"),
        (lambda d: d.exec(b"\x95" + b"\x00" * 7, input=b""), ValueError, "input"),
        (lambda d: d.exec(b"\x95" + b"\x00" * 7, params="ab"), TypeError, "params"),
        (lambda d: d.read_lambda("/x", b"\x95" + b"\x00" * 7, mode="sideways"), ValueError, "mode"),
        (lambda d: d.ls(None), TypeError, "dir"),
    ],
)
def test_bad_arguments_name_the_argument(dev, call, exc, name):
    dev.put("/x", b"12345678")
    with pytest.raises(exc) as e:
        call(dev)
    assert name in str(e.value)


def test_read_array_with_a_partial_item_names_the_file(dev):
    dev.put("/odd", b"12345")
    with pytest.raises(ValueError) as e:
        dev.read_array("/odd", "<u4")
    assert "/odd" in str(e.value) and "5 bytes" in str(e.value)


def test_output_larger_than_device_memory_is_a_resource_error(dev, stats64):
    dev.put("/n", np.arange(4, dtype="<u8"))
    with pytest.raises(csx.ResourceError) as e:
        dev.exec(stats64, "/n", output_size=512 * MiB)  # the device has 64 MiB
    assert e.value.status == 0x89
    assert e.value.status_name == "InsufficientResources"
    # Over the protocol's limit: refused on the host, naming the value and the limit.
    with pytest.raises(csx.LimitError) as e:
        dev.exec(stats64, "/n", output_size=1 << 40)
    assert isinstance(e.value, ValueError)
    assert "1099511627776" in str(e.value) and "limit" in str(e.value)


def test_input_range_past_the_file_is_out_of_range(dev, stats64):
    dev.put("/n", np.arange(4, dtype="<u8"))
    with pytest.raises(csx.DeviceError) as e:
        dev.exec(stats64, "/n", input_offset=16, input_length=64, output_size=32)
    assert e.value.status == 0xC4


def test_open_errors(tmp_path):
    with pytest.raises(csx.OpenError) as e:
        csx.Device.open("ftp://nowhere")
    assert "ftp" in str(e.value)
    with pytest.raises(csx.OpenError):
        csx.Device.open(tmp_path / "not-a-device")
    with pytest.raises(csx.TransportError):
        csx.Device.open("tcp://127.0.0.1:1")
    with pytest.raises(TypeError) as e:
        csx.Device.open(42)
    assert "uri" in str(e.value)


def test_closed_device(dev):
    dev.close()
    assert dev.closed
    with pytest.raises(csx.ClosedError):
        dev.put("/x", b"1")
    dev.close()  # twice is fine


def test_embedded_device_persists_across_open(tmp_path):
    from conftest import new_device

    d = new_device(tmp_path / "p")
    d.put("/keep", b"persistent")
    d.close()
    with csx.Device.open(tmp_path / "p") as d2:
        assert bytes(d2.get("/keep")) == b"persistent"


def test_init_throttle_keeps_the_profile_and_sets_the_real_time_hold(tmp_path):
    import json

    from conftest import new_device

    def perf(name, **kw):
        new_device(tmp_path / name, profile="lambda-io", **kw).close()
        with open(tmp_path / name / "device.json") as f:
            return json.load(f)["perf"]

    assert perf("own")["throttle"] is True
    off = perf("off", throttle=False)
    assert off["throttle"] is False
    assert off["profile"] == "lambda-io"
    assert off["media_bytes_per_sec"] == perf("own2")["media_bytes_per_sec"]
    with pytest.raises(TypeError) as e:
        new_device(tmp_path / "bad", throttle="no")
    assert "throttle" in str(e.value)


def test_threads_share_a_device(dev, stats64):
    from concurrent.futures import ThreadPoolExecutor

    for i in range(4):
        dev.put(f"/th/{i}", np.full(1000, i, dtype="<u8"))
    with dev.load(stats64) as prog:
        with ThreadPoolExecutor(4) as pool:
            sums = list(
                pool.map(lambda i: prog.run(f"/th/{i}", output_size=32).array("<u8")[1], range(4))
            )
    assert sums == [0, 1000, 2000, 3000]

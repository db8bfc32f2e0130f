"""Device.open opens an array of devices by its URI, array:DIR, like any device."""

import os
import pathlib
import subprocess

import pytest

import csx

REPO = pathlib.Path(__file__).resolve().parents[2]


def csx_cli():
    """The csx binary: $CSX_BIN, else the workspace's debug build (fails loudly)."""
    target = pathlib.Path(os.environ.get("CARGO_TARGET_DIR", REPO / "target"))
    path = pathlib.Path(os.environ.get("CSX_BIN", target / "debug" / "csx"))
    assert path.exists(), f"{path} does not exist: build it with `cargo build -p csx`"
    return str(path)


def test_open_an_array_by_uri(tmp_path):
    arr = tmp_path / "arr"
    subprocess.run(
        [csx_cli(), "array", "init", "--state", str(arr), "--members", "2",
         "--nvm-size", "16MiB", "--slm-size", "4MiB"],
        check=True, capture_output=True,
    )
    dev = csx.Device.open(f"array:{arr}")
    data = bytes(range(256)) * 1000
    dev.put("/d/x", data)
    dev.flush()
    assert bytes(dev.get("/d/x")) == data
    assert [f.path for f in dev.ls("/")] == ["/d/x"]
    dev.close()
    # The file is in the array's catalog: the CLI sees it on the array.
    out = subprocess.run([csx_cli(), "ls", "--device", f"array:{arr}"],
                         check=True, capture_output=True, text=True).stdout
    assert "/d/x" in out
    with pytest.raises(csx.OpenError, match="array:DIR"):
        csx.Device.open("nvme://x")

"""Storage nodes on this machine, for tests and the benchmark: one daemon process per
node (``python -m csx.dask.node STATE``: an embedded device served on a loopback
port the OS picks), which can be killed like a real node.

>>> with csx.dask.LocalNodes(tmpdir, 3) as nodes:
...     cluster = csx.dask.Cluster(nodes.uris, client=client, catalogue=tmpdir / "cat.json")
...     nodes.kill(1)                      # SIGKILL the daemon of node n1

A daemon also exits when its standard input closes, so one whose parent died does not
linger. :meth:`LocalNodes.close` stops every daemon and waits for it.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time
from typing import Any, List, Optional

__all__ = ["LocalNodes", "NodeStartError"]

from ..errors import CsxError


class NodeStartError(CsxError):
    """A local daemon did not start (its exit status and standard error are in the
    message)."""


def _package_root() -> str:
    here = os.path.dirname(os.path.abspath(__file__))  # .../csx/dask
    return os.path.dirname(os.path.dirname(here))


class LocalNodes:
    """``n`` daemons with state directories ``root/node{i}`` (created on first start),
    listening on ``tcp://127.0.0.1:PORT``. ``profile``, ``nvm_size``, ``slm_size`` and
    ``engines`` configure a new device (see :meth:`csx.Device.init`)."""

    def __init__(
        self,
        root: "str | os.PathLike[str]",
        n: int,
        *,
        profile: Optional[str] = None,
        nvm_size: int = 256 << 20,
        slm_size: int = 64 << 20,
        engines: int = 1,
        start_timeout_s: float = 60.0,
    ) -> None:
        if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= 64:
            raise ValueError(f"n must be an int between 1 and 64 (local daemons), got {n!r}")
        self.root = os.path.abspath(os.fspath(root))
        self.n = n
        self.profile = profile
        self.nvm_size = nvm_size
        self.slm_size = slm_size
        self.engines = engines
        self.start_timeout_s = start_timeout_s
        self.procs: List[Optional["subprocess.Popen[bytes]"]] = [None] * n
        self.uris: List[str] = [""] * n
        try:
            for i in range(n):
                self.start(i)
        except BaseException:
            self.close()
            raise

    def state_dir(self, i: int) -> str:
        return os.path.join(self.root, f"node{i}")

    def start(self, i: int) -> str:
        """Starts node ``i``'s daemon (on a new port); returns its URI."""
        running = self.procs[i]
        if running is not None and running.poll() is None:
            raise ValueError(f"node {i} is already running ({self.uris[i]})")
        cmd = [sys.executable, "-m", "csx.dask.node", self.state_dir(i), "--listen", "tcp://127.0.0.1:0"]
        cmd += ["--nvm-size", str(self.nvm_size), "--slm-size", str(self.slm_size), "--engines", str(self.engines)]
        if self.profile:
            cmd += ["--profile", self.profile]
        env = dict(os.environ)
        env["PYTHONPATH"] = _package_root() + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        p = subprocess.Popen(
            cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, start_new_session=True
        )
        self.procs[i] = p
        line = b""
        deadline = time.monotonic() + self.start_timeout_s
        assert p.stdout is not None
        while not line.endswith(b"\n"):
            left = deadline - time.monotonic()
            if left <= 0 or p.poll() is not None:
                break
            ready, _, _ = select.select([p.stdout], [], [], min(left, 0.5))
            if ready:
                b = os.read(p.stdout.fileno(), 4096)
                if not b:
                    break
                line += b
        try:
            self.uris[i] = json.loads(line)["uri"]
        except (ValueError, KeyError, TypeError):
            if p.poll() is None:
                p.kill()
            p.wait(timeout=20)
            err = p.stderr.read().decode(errors="replace") if p.stderr else ""
            self._reap(i, signal.SIGKILL)
            raise NodeStartError(
                f"node {i} ({self.state_dir(i)}) did not start within {self.start_timeout_s:g} s "
                f"(exit status {p.returncode}): {err.strip()[-2000:] or line.decode(errors='replace')}"
            ) from None
        return self.uris[i]

    def alive(self, i: int) -> bool:
        p = self.procs[i]
        return p is not None and p.poll() is None

    def kill(self, i: int) -> None:
        """SIGKILL node ``i``'s daemon (a crash) and wait for it."""
        self._reap(i, signal.SIGKILL)

    def stop(self, i: int) -> None:
        """Stops node ``i``'s daemon cleanly (it answers what is in flight)."""
        self._reap(i, signal.SIGTERM)

    def _reap(self, i: int, sig: int) -> None:
        p = self.procs[i]
        if p is None:
            return
        if p.poll() is None:
            try:
                p.send_signal(sig)
            except ProcessLookupError:
                pass
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(timeout=20)
        for f in (p.stdin, p.stdout, p.stderr):
            if f is not None:
                try:
                    f.close()
                except OSError:
                    pass
        self.procs[i] = None

    def close(self) -> None:
        """Stops every daemon and waits for it."""
        for i in range(self.n):
            self._reap(i, signal.SIGTERM)

    def __enter__(self) -> "LocalNodes":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"csx.dask.LocalNodes({self.root!r}, {self.uris!r})"

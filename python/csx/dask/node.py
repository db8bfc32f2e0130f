"""``python -m csx.dask.node STATE [--listen URI]``: one storage node's daemon.

Serves the embedded device in the state directory STATE (created when it does not
exist yet) on ``--listen`` (default ``tcp://127.0.0.1:0``: a free port), prints one
JSON line ``{"uri": ..., "pid": ...}`` when it is ready, and serves until its
standard input closes or it gets SIGTERM or SIGINT, then answers what is in flight
and stops. :class:`csx.dask.LocalNodes` starts these; ``csx device serve`` is the
same daemon as a command.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
from typing import List, Optional


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="python -m csx.dask.node", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("state", help="the device's state directory (created if missing)")
    p.add_argument("--listen", default="tcp://127.0.0.1:0", help="where to serve (default tcp://127.0.0.1:0, a free port)")
    p.add_argument("--profile", default=None, help="performance profile of a new device (unthrottled, lambda-io, daisy)")
    p.add_argument("--nvm-size", type=int, default=256 << 20, help="NVM bytes of a new device (default 256 MiB)")
    p.add_argument("--slm-size", type=int, default=64 << 20, help="device memory bytes of a new device (default 64 MiB)")
    p.add_argument("--engines", type=int, default=1, help="compute engines of a new device (default 1)")
    args = p.parse_args(argv)

    import csx

    if not os.path.isdir(args.state) or not os.listdir(args.state):
        csx.Device.init(
            args.state, profile=args.profile, nvm_size=args.nvm_size, slm_size=args.slm_size, engines=args.engines
        ).close()
    server = csx.serve(args.state, args.listen)

    def _stop(signum: int, _frame: object) -> None:
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    try:
        print(json.dumps({"uri": server.uris[0], "pid": os.getpid()}), flush=True)
        while sys.stdin.buffer.read(4096):
            pass
    finally:
        server.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())

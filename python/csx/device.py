"""csx.Device: a computational storage device from Python.

Open one with :meth:`Device.open` (an embedded device's state directory, ``shm://NAME``
or ``tcp://HOST:PORT``) or create an embedded one with :meth:`Device.init`. Then move
files (:meth:`Device.put`, :meth:`Device.get`, :meth:`Device.read_array`), run eBPF
programs next to the data (:meth:`Device.exec`, :meth:`Device.load`) and λ-IO reads
(:meth:`Device.read_lambda`).

Arguments are checked here, before anything reaches the device: a wrong type raises
``TypeError`` and a wrong value ``ValueError``, each naming the argument. Failures on
the device raise :class:`csx.DeviceError` subclasses carrying the completion status.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple, Union

import numpy as np

from . import _native
from .errors import TrapError

__all__ = [
    "Device",
    "Program",
    "ExecResult",
    "LambdaResult",
    "FileInfo",
    "Server",
    "serve",
    "build",
    "sdk_program",
    "sdk_programs",
    "BytesLike",
    "ProgramLike",
]

#: What a bytes argument accepts: bytes, bytearray, memoryview, a C-contiguous numpy
#: array, a csx Buffer, or any object with the buffer protocol.
BytesLike = Any
#: A program: its object bytes, or the path of an ELF object (``.o``) or of C source
#: (``.c``, compiled with clang against the SDK header).
ProgramLike = Union[bytes, bytearray, memoryview, str, "os.PathLike[str]"]

_U64_MAX = (1 << 64) - 1
_MODES = ("host", "device", "auto")
_ENGINES = ("jit", "interp")


def _check_int(name: str, value: Any, lo: int = 0, hi: int = _U64_MAX) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be an int, not {type(value).__name__}")
    v = int(value)
    if v < lo or v > hi:
        raise ValueError(f"{name} must be in [{lo}, {hi}], got {v}")
    return v


def _check_opt_int(name: str, value: Any, lo: int = 0, hi: int = _U64_MAX) -> Optional[int]:
    return None if value is None else _check_int(name, value, lo, hi)


def _check_str(name: str, value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a str, not {type(value).__name__}")
    return value


def _check_path(name: str, value: Any) -> str:
    """A device path: an absolute str without NUL bytes."""
    v = _check_str(name, value)
    if not v.startswith("/"):
        raise ValueError(f"{name} must be an absolute device path starting with '/', got {v!r}")
    if "\0" in v:
        raise ValueError(f"{name} must not contain NUL bytes, got {v!r}")
    return v


def _check_choice(name: str, value: Any, choices: Tuple[str, ...]) -> str:
    v = _check_str(name, value)
    if v not in choices:
        raise ValueError(f"{name} must be one of {', '.join(map(repr, choices))}, got {v!r}")
    return v


def _as_bytes(name: str, value: Any) -> memoryview:
    """A read-only view of `value`'s bytes (no copy), for objects with the buffer
    protocol; a numpy array must be C-contiguous."""
    if isinstance(value, str):
        raise TypeError(f"{name} must be bytes-like, not str (encode it first)")
    try:
        view = memoryview(value)
    except TypeError:
        raise TypeError(
            f"{name} must be bytes-like (bytes, bytearray, memoryview, a numpy array), "
            f"not {type(value).__name__}"
        ) from None
    if not view.c_contiguous:
        raise ValueError(f"{name} must be C-contiguous (use numpy.ascontiguousarray)")
    return view.cast("B") if view.format != "B" or view.ndim != 1 else view


def _local_path(name: str, value: Any) -> str:
    if not isinstance(value, (str, os.PathLike)):
        raise TypeError(f"{name} must be a str or os.PathLike, not {type(value).__name__}")
    return os.fspath(value)


def _program_image(program: Any) -> Tuple[bytes, str]:
    """(object bytes, a name) of a ProgramLike."""
    if isinstance(program, (bytes, bytearray, memoryview)):
        image = bytes(program)
        if not image:
            raise ValueError("program is empty")
        return image, "program"
    if isinstance(program, (str, os.PathLike)):
        path = os.fspath(program)
        name = os.path.splitext(os.path.basename(path))[0] or "program"
        try:
            with open(path, "rb") as f:
                data = f.read()
        except OSError as e:
            raise ValueError(f"program {path!r} cannot be read: {e}") from None
        if path.endswith(".c"):
            return bytes(_native.build(data.decode("utf-8"), name)), name
        if not data:
            raise ValueError(f"program {path!r} is empty")
        return data, name
    raise TypeError(
        "program must be the object's bytes or a path to a .o or .c file, "
        f"not {type(program).__name__}"
    )


@dataclass(frozen=True)
class FileInfo:
    """A device file: its path, size in bytes and number of extents."""

    path: str
    size: int
    extents: int


@dataclass(frozen=True)
class ExecResult:
    """One program run.

    ``r0`` is the return value (unsigned; ``r0_signed`` as C's ``long``), ``output``
    the output window's bytes (a read-only :class:`csx.Buffer`, None without
    ``output_size`` or after a trap), ``timing`` the device's breakdown in ns
    (``queued_ns``, ``transfer_ns``, ``prepare_ns``, ``execute_ns``, ``total_ns``,
    ``modelled_ns``), ``wall_ns`` the host's wall time of the execute command.
    """

    r0: int
    r0_signed: int
    status: int
    status_name: str
    trapped: bool
    trap: Optional[str]
    trap_kind: Optional[str]
    trap_pc: Optional[int]
    fuel_used: int
    trace: List[str]
    detail: Optional[str]
    output: Optional[Any]
    staged_bytes: int
    timing: Dict[str, int]
    wall_ns: int

    def array(self, dtype: Any = np.uint8, count: Optional[int] = None) -> np.ndarray:
        """The output window as a read-only numpy array (no copy); ``count`` items,
        or as many whole items as ``r0`` bytes hold when ``count`` is None."""
        if self.output is None:
            raise ValueError("this run has no output (no output_size, or it trapped)")
        dt = np.dtype(dtype)
        n = self.r0 // dt.itemsize if count is None else _check_int("count", count)
        if n * dt.itemsize > len(self.output):
            raise ValueError(
                f"count {n} of {dt} needs {n * dt.itemsize} bytes; the output has {len(self.output)}"
            )
        return np.frombuffer(self.output, dtype=dt, count=n)


def _exec_result(r: Any) -> ExecResult:
    return ExecResult(
        r0=r.r0,
        r0_signed=r.r0_signed,
        status=r.status,
        status_name=r.status_name,
        trapped=r.trapped,
        trap=r.trap,
        trap_kind=r.trap_kind,
        trap_pc=r.trap_pc,
        fuel_used=r.fuel_used,
        trace=list(r.trace),
        detail=r.detail,
        output=r.output,
        staged_bytes=r.staged_bytes,
        timing=dict(r.timing),
        wall_ns=r.wall_ns,
    )


@dataclass(frozen=True)
class LambdaResult:
    """A λ-IO read: ``output`` (read-only :class:`csx.Buffer`), where it ``ran``
    ("host", "device" or "both" for a profiled request), the cached fraction of the
    input, the modelled ns, and each side's cost dict (media_ns, link_ns, compute_ns,
    latency_ns, link_bytes, media_bytes, fuel, modelled_ns)."""

    output: Any
    ran: str
    cache_ratio: float
    modelled_ns: int
    host: Optional[Dict[str, int]] = field(default=None)
    device: Optional[Dict[str, int]] = field(default=None)

    def array(self, dtype: Any = np.uint8) -> np.ndarray:
        """The output as a read-only numpy array (no copy)."""
        dt = np.dtype(dtype)
        return np.frombuffer(self.output, dtype=dt, count=len(self.output) // dt.itemsize)


class Program:
    """A program loaded into a device slot and activated; run it many times with
    :meth:`run`, then :meth:`unload` (or use it as a context manager)."""

    def __init__(
        self, device: "Device", slot: int, name: str, generation: Optional[int] = None
    ) -> None:
        self._device = device
        self.slot = slot
        self.name = name
        # The loaded program's generation: the unload names it, so it never removes
        # another program put in the slot since (None from an older device).
        self._generation = generation
        self._loaded = True

    def run(
        self,
        input: Any = None,
        *,
        input_offset: int = 0,
        input_length: Optional[int] = None,
        output_size: Optional[int] = None,
        cparam1: int = 0,
        cparam2: int = 0,
        params: BytesLike = b"",
        fuel: Optional[int] = None,
        time_limit_ms: Optional[int] = None,
        check: bool = True,
    ) -> ExecResult:
        """Runs the program once. Ctrl-C (any signal handler that raises) while it
        runs aborts it on the device; the exception (KeyboardInterrupt) is raised once
        the device has stopped it.

        Args:
            input: window 0: a device path (str; the range is copied on the device,
                never through the host), or bytes-like host data, or None (8 zero
                bytes).
            input_offset, input_length: the range of a device-path input (to its end
                when input_length is None).
            output_size: bytes of window 1, zeroed before the run and returned as
                ``ExecResult.output``.
            cparam1, cparam2: ``args->cparam1``/``cparam2`` (u64).
            params: ``args->params`` bytes.
            fuel: the run's budget (the device's default when None).
            time_limit_ms: the run's time limit in ms (the device's default, 1 s unless
                its configuration says otherwise, when None); past it the run stops
                and :class:`csx.TimeLimitExceededError` is raised.
            check: raise :class:`csx.TrapError` when the program traps (otherwise the
                trap is in the result).
        """
        if not self._loaded:
            raise ValueError(f"program {self.name!r} is unloaded")
        kw: Dict[str, Any] = {}
        if input is None:
            if input_offset or input_length is not None:
                raise ValueError("input_offset and input_length need a device-path input")
        elif isinstance(input, str):
            kw["input_path"] = _check_path("input", input)
            kw["input_offset"] = _check_int("input_offset", input_offset)
            kw["input_length"] = _check_opt_int("input_length", input_length, 1)
        else:
            if input_offset or input_length is not None:
                raise ValueError("input_offset and input_length apply to a device-path input only")
            data = _as_bytes("input", input)
            if len(data) == 0:
                raise ValueError("input is empty; window 0 needs at least one byte")
            kw["input_data"] = data
        result = _exec_result(
            self._device._dev().run(
                self.slot,
                output_size=_check_opt_int("output_size", output_size, 1),
                cparam1=_check_int("cparam1", cparam1),
                cparam2=_check_int("cparam2", cparam2),
                params=_as_bytes("params", params),
                fuel=_check_opt_int("fuel", fuel, 1),
                time_limit_ms=_check_opt_int("time_limit_ms", time_limit_ms, 1, (1 << 32) - 1),
                **kw,
            )
        )
        if check and result.trapped:
            raise TrapError(
                f"execute: program {self.name!r} trapped: {result.trap}",
                trap=result.trap,
                trap_kind=result.trap_kind,
                pc=result.trap_pc,
                result=result,
                op="execute",
            )
        return result

    def unload(self) -> None:
        """Frees the slot. Unloading twice does nothing."""
        if self._loaded:
            self._loaded = False
            self._device._dev().unload(self.slot, self._generation)

    def __enter__(self) -> "Program":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.unload()

    def __repr__(self) -> str:
        state = "loaded" if self._loaded else "unloaded"
        return f"csx.Program({self.name!r}, slot={self.slot}, {state})"


class Device:
    """One csx device (see the module doc). Use it as a context manager, or call
    :meth:`close`. Methods release the GIL while the device works, so several Python
    threads may share one Device."""

    def __init__(self, native: Any) -> None:
        # Use Device.open or Device.init.
        self._native = native
        # Programs kept loaded for reuse (csx.scan's per-query programs), by key;
        # unloaded by close().
        self._kept: Dict[str, Program] = {}
        # The device's own csx.scan.ResidentScans (resident=True), and the windows its
        # other scans keep between scans (csx.scan.device_scan_windows), closed by close().
        self._resident_scans: Any = None
        self._scan_windows: Any = None

    def _kept_program(self, key: str, image: bytes, engine: str) -> Program:
        """A program loaded once per device and key, kept until close()."""
        prog = self._kept.get(key)
        if prog is None or not prog._loaded:
            prog = self.load(image, engine=engine)
            self._kept[key] = prog
        return prog

    # -- opening ------------------------------------------------------------------

    @classmethod
    def open(cls, uri: Union[str, "os.PathLike[str]"]) -> "Device":
        """Opens the device at ``uri``: an embedded device's state directory (a path),
        ``shm://NAME`` or ``tcp://HOST:PORT`` (a daemon: ``csx device serve`` or
        :func:`csx.serve`), or ``array:DIR`` (an array's files). Raises :class:`csx.OpenError` when it cannot."""
        if not isinstance(uri, (str, os.PathLike)):
            raise TypeError(f"uri must be a str or os.PathLike, not {type(uri).__name__}")
        u = os.fspath(uri)
        if not u:
            raise ValueError("uri is empty")
        return cls(_native.Device.open(u))

    @classmethod
    def init(
        cls,
        path: Union[str, "os.PathLike[str]"],
        *,
        profile: Optional[str] = None,
        nvm_size: Optional[int] = None,
        slm_size: Optional[int] = None,
        state_size: Optional[int] = None,
        engines: Optional[int] = None,
        resident_memory: Optional[int] = None,
        throttle: Optional[bool] = None,
    ) -> "Device":
        """Creates an embedded device in the state directory ``path`` and opens it.

        ``profile``: the performance profile (``"unthrottled"``, ``"lambda-io"``,
        ``"daisy"``); sizes in bytes (defaults: 4 GiB NVM, sparse; 1 GiB device
        memory; 1 MiB shared state); ``engines``: compute engines (one per core when
        None); ``resident_memory``: bytes of device memory that keep file ranges
        copies ask to keep, valid until the file changes (none when None; resident
        scans, :class:`csx.scan.ResidentScans`, need it to know their entries are
        current); ``throttle``: whether each command is held to the profile's modelled
        time, so wall clocks see the modelled device (None: the profile's own, on for
        ``"lambda-io"`` and ``"daisy"``); False keeps the profile's modelled times and
        runs at this machine's speed, as the benchmarks' wall-time devices do."""
        p = _local_path("path", path)
        if profile is not None:
            _check_str("profile", profile)
        if throttle is not None and not isinstance(throttle, bool):
            raise TypeError(f"throttle must be a bool or None, not {type(throttle).__name__}")
        return cls(
            _native.Device.init(
                p,
                profile=profile,
                nvm_size=_check_opt_int("nvm_size", nvm_size, 1),
                slm_size=_check_opt_int("slm_size", slm_size, 1),
                state_size=_check_opt_int("state_size", state_size, 1),
                engines=_check_opt_int("engines", engines, 1, 1024),
                resident_memory=_check_opt_int("resident_memory", resident_memory, 0),
                throttle=throttle,
            )
        )

    def _dev(self) -> Any:
        return self._native

    @property
    def uri(self) -> str:
        """Where the device is (as opened)."""
        return str(self._native.uri)

    @property
    def closed(self) -> bool:
        return bool(self._native.closed)

    def close(self) -> None:
        """Closes the device; an embedded device whose last client this is shuts down
        and saves its state. Closing twice does nothing."""
        if self._resident_scans is not None:
            self._resident_scans.close()
            self._resident_scans = None
        if self._scan_windows is not None:
            self._scan_windows.close()
            self._scan_windows = None
        if not self._native.closed:
            for prog in self._kept.values():
                try:
                    prog.unload()
                except Exception:  # the device may already be gone; close anyway
                    pass
        self._kept.clear()
        self._native.close()

    def __enter__(self) -> "Device":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"csx.Device({self.uri!r}{', closed' if self.closed else ''})"

    def identify(self) -> Dict[str, Any]:
        """The device's version, sizes, engines and limits."""
        return dict(self._native.identify())

    def flush(self) -> None:
        """Makes everything acknowledged so far survive a crash."""
        self._native.flush()

    # -- files --------------------------------------------------------------------

    def put(self, path: str, data: BytesLike) -> int:
        """Makes the device file ``path`` hold exactly ``data`` (bytes-like, e.g. a
        numpy array's bytes); returns the bytes written."""
        return int(self._native.put(_check_path("path", path), _as_bytes("data", data)))

    def get(self, path: str, *, offset: int = 0, length: Optional[int] = None) -> Any:
        """The bytes of ``path`` from ``offset`` (``length`` of them, fewer at the
        end; to the end when None), as a read-only :class:`csx.Buffer` that numpy,
        memoryview and pyarrow view without copying (``bytes(buf)`` copies)."""
        return self._native.get(
            _check_path("path", path),
            _check_int("offset", offset),
            _check_opt_int("length", length),
        )

    def read_array(
        self,
        path: str,
        dtype: Any = np.uint8,
        *,
        offset: int = 0,
        count: Optional[int] = None,
    ) -> np.ndarray:
        """The file (or ``count`` items from byte ``offset``) as a read-only numpy
        array of ``dtype`` over the bytes that came from the device: no copy after the
        transfer. Raises ValueError when the bytes are not a whole number of items."""
        try:
            dt = np.dtype(dtype)
        except TypeError:
            raise TypeError(f"dtype {dtype!r} is not a numpy dtype") from None
        if dt.itemsize == 0 or dt.hasobject:
            raise ValueError(f"dtype {dt} has no fixed size")
        length = None if count is None else _check_int("count", count) * dt.itemsize
        buf = self.get(path, offset=offset, length=length)
        if len(buf) % dt.itemsize:
            raise ValueError(
                f"{path}: {len(buf)} bytes from offset {offset} are not a whole number of "
                f"{dt} items ({dt.itemsize} bytes each)"
            )
        if count is not None and len(buf) != length:
            raise ValueError(
                f"{path}: count {count} of {dt} needs {length} bytes from offset {offset}; "
                f"the file has {len(buf)}"
            )
        return np.frombuffer(buf, dtype=dt)

    def put_file(self, local: Union[str, "os.PathLike[str]"], path: str) -> int:
        """Streams the local file ``local`` into the device file ``path``."""
        return int(self._native.put_file(_local_path("local", local), _check_path("path", path)))

    def get_file(self, path: str, local: Union[str, "os.PathLike[str]"]) -> int:
        """Streams the device file ``path`` into the local file ``local``."""
        return int(self._native.get_file(_check_path("path", path), _local_path("local", local)))

    def put_dir(self, local: Union[str, "os.PathLike[str]"], path: str) -> int:
        """Puts every file under the local directory ``local`` at the same relative
        path under ``path`` (like ``csx put -r``); returns the bytes written."""
        root = _local_path("local", local)
        dest = _check_path("path", path).rstrip("/")
        if not os.path.isdir(root):
            raise ValueError(f"local {root!r} is not a directory")
        total = 0
        for dirpath, _dirs, files in os.walk(root):
            for name in sorted(files):
                src = os.path.join(dirpath, name)
                rel = os.path.relpath(src, root).replace(os.sep, "/")
                total += self.put_file(src, f"{dest}/{rel}")
        return total

    def ls(self, dir: str = "/") -> List[FileInfo]:
        """The files under ``dir`` (all of them for ``/``), sorted by path."""
        files, _truncated = self._native.ls(_check_path("dir", dir))
        return [FileInfo(p, s, e) for (p, s, e) in files]

    def stat(self, path: str) -> FileInfo:
        """One file's size and extents; :class:`csx.NotFoundError` when absent."""
        p, s, e = self._native.stat(_check_path("path", path))
        return FileInfo(p, s, e)

    def exists(self, path: str) -> bool:
        """Whether a file is at ``path``."""
        from .errors import NotFoundError

        try:
            self.stat(path)
            return True
        except NotFoundError:
            return False

    def rm(self, path: str) -> None:
        """Deletes a file."""
        self._native.rm(_check_path("path", path))

    def mkdir(self, path: str) -> None:
        """Makes a directory."""
        self._native.mkdir(_check_path("path", path))

    # -- programs -----------------------------------------------------------------

    def load(
        self, program: ProgramLike, *, entry: Optional[str] = None, engine: str = "jit"
    ) -> Program:
        """Loads ``program`` into a free slot and activates it on ``engine`` ("jit" or
        "interp"). The device's verifier refusing it raises
        :class:`csx.InvalidProgramError` with its reason."""
        image, name = _program_image(program)
        if entry is not None:
            _check_str("entry", entry)
            name = entry
        slot, generation = self._native.load(
            image, entry, _check_choice("engine", engine, _ENGINES)
        )
        return Program(self, int(slot), name, generation)

    def exec(
        self,
        program: ProgramLike,
        input: Any = None,
        *,
        input_offset: int = 0,
        input_length: Optional[int] = None,
        output_size: Optional[int] = None,
        cparam1: int = 0,
        cparam2: int = 0,
        params: BytesLike = b"",
        engine: str = "jit",
        fuel: Optional[int] = None,
        time_limit_ms: Optional[int] = None,
        entry: Optional[str] = None,
        check: bool = True,
    ) -> ExecResult:
        """Loads ``program``, runs it once next to the data and unloads it (see
        :meth:`Program.run` for the arguments). For many runs, :meth:`load` once."""
        prog = self.load(program, entry=entry, engine=engine)
        try:
            return prog.run(
                input,
                input_offset=input_offset,
                input_length=input_length,
                output_size=output_size,
                cparam1=cparam1,
                cparam2=cparam2,
                params=params,
                fuel=fuel,
                time_limit_ms=time_limit_ms,
                check=check,
            )
        finally:
            prog.unload()

    def read_lambda(
        self,
        path: str,
        program: ProgramLike,
        *,
        offset: int = 0,
        length: Optional[int] = None,
        mode: str = "device",
        output_size: Optional[int] = None,
        cparam1: int = 0,
        cparam2: int = 0,
        params: BytesLike = b"",
        fuel: Optional[int] = None,
        entry: Optional[str] = None,
        state_dir: Optional[Union[str, "os.PathLike[str]"]] = None,
    ) -> LambdaResult:
        """λ-IO: runs the λ ``program`` over ``length`` bytes of ``path`` from
        ``offset`` (to the end when None) on the device, on the host, or where the
        dispatcher predicts it is faster (``mode`` "device", "host", "auto"). The λ
        sees the range as window 0 and writes its output to window 1
        (``output_size`` bytes, as large as the input when None); the result is its
        first r0 bytes. The host side needs the device's state directory on this
        machine: embedded devices know it, a served one needs ``state_dir``.

        Each call is one λ-IO session (the λ is loaded, run and unloaded): in "auto"
        the dispatcher has no history yet, so it profiles, running both sides and
        checking that they agree (``ran == "both"``).

        Ctrl-C (any signal handler that raises) while it runs stops the read: the
        λ-IO handle's stop flag aborts its device runs and stops its host runs, and
        the exception is raised once they have stopped."""
        image, name = _program_image(program)
        if entry is not None:
            _check_str("entry", entry)
        r = self._native.read_lambda(
            _check_path("path", path),
            image,
            entry or name,
            entry=entry,
            offset=_check_int("offset", offset),
            length=_check_opt_int("length", length, 1),
            mode=_check_choice("mode", mode, _MODES),
            output_size=_check_opt_int("output_size", output_size, 1),
            cparam1=_check_int("cparam1", cparam1),
            cparam2=_check_int("cparam2", cparam2),
            params=_as_bytes("params", params),
            fuel=_check_opt_int("fuel", fuel, 1),
            state_dir=None if state_dir is None else _local_path("state_dir", state_dir),
        )
        return LambdaResult(
            output=r.output,
            ran=r.ran,
            cache_ratio=r.cache_ratio,
            modelled_ns=r.modelled_ns,
            host=None if r.host is None else dict(r.host),
            device=None if r.device is None else dict(r.device),
        )


class Server:
    """A device daemon running in this process (what ``csx device serve`` runs):
    clients connect with :meth:`Device.open` on one of :attr:`uris`. Stop it with
    :meth:`shutdown` (or use it as a context manager)."""

    def __init__(self, native: Any) -> None:
        self._native = native

    @property
    def uris(self) -> List[str]:
        """The URIs clients connect to, with the ports chosen for port 0."""
        return list(self._native.uris)

    def status(self) -> Dict[str, int]:
        """clients_connected, clients_total, clients_refused, commands_served."""
        return dict(self._native.status())

    def shutdown(self) -> None:
        """Answers what is in flight, disconnects every client, closes the device."""
        self._native.shutdown()

    def __enter__(self) -> "Server":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.shutdown()

    def __repr__(self) -> str:
        return f"csx.Server({self.uris!r})"


def serve(
    state: Union[str, "os.PathLike[str]"],
    listen: Union[str, List[str]] = "tcp://127.0.0.1:0",
    *,
    token: Optional[str] = None,
) -> Server:
    """Serves the embedded device in the state directory ``state`` (not open
    elsewhere) on ``listen``: one URI or a list (``tcp://HOST:PORT``, port 0 picks a
    free one; ``shm://NAME``). ``token``: a secret tcp clients must present."""
    p = _local_path("state", state)
    uris = [listen] if isinstance(listen, str) else listen
    if not isinstance(uris, list) or not uris:
        raise TypeError("listen must be a URI str or a non-empty list of them")
    for i, u in enumerate(uris):
        _check_str(f"listen[{i}]", u)
    if token is not None:
        _check_str("token", token)
    return Server(_native.Server.start(p, uris, token))


def build(source: Union[str, bytes], name: str = "program") -> bytes:
    """Compiles C ``source`` (text) to an eBPF object with clang against the SDK
    header (``#include "csx.h"``); cached by content. Raises
    :class:`csx.BuildError` with clang's message."""
    if isinstance(source, bytes):
        source = source.decode("utf-8")
    _check_str("source", source)
    _check_str("name", name)
    return bytes(_native.build(source, name))


def sdk_program(name: str) -> bytes:
    """The compiled object of an SDK program (see :func:`sdk_programs`)."""
    return bytes(_native.sdk_program(_check_str("name", name)))


def sdk_programs() -> List[str]:
    """The names of the SDK's programs (sdk/programs/*.c)."""
    return list(_native.sdk_programs())

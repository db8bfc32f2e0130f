"""csx: a computational storage device in software, from Python.

>>> import csx
>>> dev = csx.Device.init("/tmp/dev0")                 # or csx.Device.open("tcp://host:4420")
>>> dev.put("/data/nums", numpy.arange(1000, dtype="u8"))
>>> r = dev.exec(csx.sdk_program("stats64"), "/data/nums", output_size=32)
>>> r.array("u8")                                       # count, sum, min, max
array([  1000, 499500,      0,    999], dtype=uint64)

Modules: :mod:`csx.device` (Device, Program, Server), :mod:`csx.errors` (the
exception hierarchy), :mod:`csx.arrow` (columnar tables as Arrow),
:mod:`csx.duckdb` (pushdown scans feeding DuckDB), :mod:`csx.dask` (a dataset spread
over many storage nodes, queried with Dask; ``import csx.dask``), ``python -m csx.bench``.
"""

from . import errors
from . import _native
from ._native import ABI_VERSION, Buffer
from .device import (
    Device,
    ExecResult,
    FileInfo,
    LambdaResult,
    Program,
    Server,
    build,
    sdk_program,
    sdk_programs,
    serve,
)
from .errors import (
    AlreadyExistsError,
    BuildError,
    BusyError,
    ClosedError,
    CsxError,
    DataError,
    DeviceError,
    DirectoryNotEmptyError,
    AbortedError,
    TimeLimitExceededError,
    InternalDeviceError,
    InvalidCommandError,
    InvalidProgramError,
    LambdaError,
    LimitError,
    LocalFileError,
    NoSpaceError,
    NotFoundError,
    OpenError,
    OutOfRangeError,
    ProgramStateError,
    QueryError,
    ResourceError,
    ServerError,
    StorageError,
    TransportError,
    TrapError,
    UnsupportedFilterError,
)

#: The workspace's version (Cargo.toml), compiled into the native module.
__version__: str = _native.__version__

__all__ = [
    "ABI_VERSION",
    "Buffer",
    "Device",
    "ExecResult",
    "FileInfo",
    "LambdaResult",
    "Program",
    "Server",
    "build",
    "sdk_program",
    "sdk_programs",
    "serve",
    "errors",
    "AlreadyExistsError",
    "BuildError",
    "BusyError",
    "ClosedError",
    "CsxError",
    "DataError",
    "DeviceError",
    "DirectoryNotEmptyError",
    "AbortedError",
    "TimeLimitExceededError",
    "InternalDeviceError",
    "InvalidCommandError",
    "InvalidProgramError",
    "LambdaError",
    "LimitError",
    "LocalFileError",
    "NoSpaceError",
    "NotFoundError",
    "OpenError",
    "OutOfRangeError",
    "ProgramStateError",
    "QueryError",
    "ResourceError",
    "ServerError",
    "StorageError",
    "TransportError",
    "TrapError",
    "UnsupportedFilterError",
]

"""The exceptions of csx.

Every failure is a :class:`CsxError`. A command the device refused or failed is a
:class:`DeviceError` carrying the completion status (``status``, the NVMe-style code,
and ``status_name``), the command (``op``) and the device's detail (``function``,
``code``, ``detail``); the common statuses have their own subclasses, so::

    try:
        dev.get("/missing")
    except csx.NotFoundError as e:       # also a FileNotFoundError
        print(e.status, e.status_name)  # 193 NotFound

A wrong argument type or value raises the built-in ``TypeError`` or ``ValueError``
naming the argument, before anything is sent to the device.
"""

from __future__ import annotations

from typing import Any, Dict, Optional, Type

__all__ = [
    "CsxError",
    "OpenError",
    "TransportError",
    "ClosedError",
    "LimitError",
    "BuildError",
    "LambdaError",
    "ServerError",
    "LocalFileError",
    "DeviceError",
    "InvalidCommandError",
    "ResourceError",
    "InvalidProgramError",
    "ProgramStateError",
    "BusyError",
    "TrapError",
    "NotFoundError",
    "AlreadyExistsError",
    "NoSpaceError",
    "OutOfRangeError",
    "StorageError",
    "DirectoryNotEmptyError",
    "AbortedError",
    "TimeLimitExceededError",
    "InternalDeviceError",
    "DataError",
    "QueryError",
    "UnsupportedFilterError",
    "STATUS_CLASSES",
]


class CsxError(Exception):
    """Base class of every csx exception."""


class OpenError(CsxError):
    """The device could not be opened: a bad URI, a missing or locked state
    directory, a daemon that is not running."""


class TransportError(CsxError):
    """The connection to the device failed (closed, lost, refused)."""


class ClosedError(CsxError, ValueError):
    """The Device (or Server) was used after ``close()``."""


class LimitError(CsxError, ValueError):
    """The host refused a command before sending it: a value is outside the
    protocol's limits (the message names the field, the value and the limit)."""


class BuildError(CsxError):
    """A program did not compile (clang's message) or would not load."""


class LambdaError(CsxError):
    """A λ-IO request failed on the host side (the λ does not load on the host,
    no local image for the host side, the two sides disagreed)."""


class ServerError(CsxError):
    """A device daemon could not start or stop."""


class LocalFileError(CsxError, OSError):
    """A local file of a put_file/get_file could not be read or written."""


class DeviceError(CsxError):
    """The device refused or failed a command.

    Attributes:
        status: the completion status code (for example 0xC1 for NotFound).
        status_name: the status's name (``"NotFound"``).
        op: the command (``"file-stat"``, ``"execute"``, ...).
        function: the device function or component at fault, if the device named one.
        code: its negative csx error code (0 for a component).
        detail: the device's own message.
    """

    status: int
    status_name: str
    op: Optional[str]
    function: Optional[str]
    code: Optional[int]
    detail: Optional[str]

    def __init__(
        self,
        message: str,
        *,
        status: int,
        status_name: str,
        op: Optional[str] = None,
        function: Optional[str] = None,
        code: Optional[int] = None,
        detail: Optional[str] = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.status_name = status_name
        self.op = op
        self.function = function
        self.code = code
        self.detail = detail


class InvalidCommandError(DeviceError):
    """A field is malformed, an opcode unknown, a memory handle, range or range set
    invalid."""


class ResourceError(DeviceError):
    """The device lacks memory, slots or queue entries for the command."""


class InvalidProgramError(DeviceError):
    """The program image is malformed, or the device's loader or verifier refused it
    (``detail`` says why)."""


class ProgramStateError(DeviceError):
    """The slot is empty, the program not activated, the slot index invalid, or the
    slot now holds another program than the one a run named."""


class BusyError(DeviceError):
    """The memory or program is in use by another command."""


class TrapError(DeviceError):
    """A program faulted. ``trap`` is the trap's text, ``trap_kind`` its kind,
    ``pc`` the faulting instruction; ``result`` the ExecResult when there is one."""

    trap: Optional[str]
    trap_kind: Optional[str]
    pc: Optional[int]
    result: Any

    def __init__(
        self,
        message: str,
        *,
        trap: Optional[str] = None,
        trap_kind: Optional[str] = None,
        pc: Optional[int] = None,
        result: Any = None,
        **kw: Any,
    ) -> None:
        kw.setdefault("status", 0xC0)
        kw.setdefault("status_name", "Trap")
        super().__init__(message, **kw)
        self.trap = trap
        self.trap_kind = trap_kind
        self.pc = pc
        self.result = result


class NotFoundError(DeviceError, FileNotFoundError):
    """No file at the path."""


class AlreadyExistsError(DeviceError, FileExistsError):
    """A file already exists at the path."""


class NoSpaceError(DeviceError):
    """The device's storage is full."""


class OutOfRangeError(DeviceError):
    """An offset or length reaches outside its file or allocation."""


class StorageError(DeviceError):
    """The device's storage failed or its persistent data is corrupt."""


class DirectoryNotEmptyError(DeviceError):
    """The directory still has entries."""


class AbortedError(DeviceError):
    """The command was aborted: by an Abort (Ctrl-C during a run from Python raises
    the KeyboardInterrupt instead), because its connection closed, or because the
    device is shutting down; ``detail`` says which."""


class TimeLimitExceededError(DeviceError, TimeoutError):
    """The run went past its time limit (``time_limit_ms``, or the device's default)
    and was stopped; ``detail`` names the limit."""


class InternalDeviceError(DeviceError):
    """The device failed in a way that is its own fault (a bug to report)."""


class DataError(CsxError, ValueError):
    """Columnar data is corrupt or malformed: a column file of the wrong length, a
    dictionary index out of range, a bad schema. The message names the file (and
    the row)."""


class QueryError(CsxError):
    """A pushdown query (csx.scan, csx.duckdb.scan) cannot run as asked."""


class UnsupportedFilterError(QueryError, ValueError):
    """A filter has a part the device cannot evaluate; ``part`` is that part."""

    part: str

    def __init__(self, message: str, part: str) -> None:
        super().__init__(message)
        self.part = part


# Status name (csx_proto::Status) -> class: every status but Success (a test walks
# the protocol's status table, so a new status without a class here fails it).
STATUS_CLASSES: Dict[str, Type[DeviceError]] = {
    "Internal": InternalDeviceError,
    "Aborted": AbortedError,
    "TimeLimitExceeded": TimeLimitExceededError,
    "InvalidOpcode": InvalidCommandError,
    "InvalidField": InvalidCommandError,
    "InvalidMemoryNamespace": InvalidCommandError,
    "InvalidMemoryRangeSet": InvalidCommandError,
    "InvalidMemoryRangeSetId": InvalidCommandError,
    "MaximumMemoryRangesExceeded": InvalidCommandError,
    "OverlappingMemoryRanges": InvalidCommandError,
    "NamespaceNotReachable": InvalidCommandError,
    "InsufficientResources": ResourceError,
    "InsufficientProgramResources": ResourceError,
    "MaximumMemoryRangeSetsExceeded": ResourceError,
    "MaximumProgramsActivated": ResourceError,
    "MaximumProgramBytesExceeded": ResourceError,
    "QueueFull": ResourceError,
    "InvalidProgramData": InvalidProgramError,
    "InvalidProgramType": InvalidProgramError,
    "ProgramTooBig": InvalidProgramError,
    "InvalidProgramIndex": ProgramStateError,
    "NoProgram": ProgramStateError,
    "ProgramNotActivated": ProgramStateError,
    "ProgramIndexNotDownloadable": ProgramStateError,
    "ProgramChanged": ProgramStateError,
    "ProgramInUse": BusyError,
    "MemoryRangeSetInUse": BusyError,
    "Trap": TrapError,
    "NotFound": NotFoundError,
    "FileExists": AlreadyExistsError,
    "NoSpace": NoSpaceError,
    "OutOfRange": OutOfRangeError,
    "IoError": StorageError,
    "Corrupt": StorageError,
    "NotEmpty": DirectoryNotEmptyError,
}

_KIND_CLASSES: Dict[str, Type[CsxError]] = {
    "open": OpenError,
    "transport": TransportError,
    "closed": ClosedError,
    "limit": LimitError,
    "build": BuildError,
    "lambda": LambdaError,
    "server": ServerError,
    "io": LocalFileError,
    "data": DataError,
}


def _from_native(kind: str, message: str, fields: Dict[str, Any]) -> BaseException:
    """Builds the exception for a native failure (called by csx._native)."""
    if kind == "device":
        cls = STATUS_CLASSES.get(fields.get("status_name", ""), DeviceError)
        if cls is TrapError:
            return TrapError(
                message,
                trap=fields.get("trap"),
                trap_kind=fields.get("trap_kind"),
                pc=fields.get("pc"),
                status=fields["status"],
                status_name=fields["status_name"],
                op=fields.get("op"),
                function=fields.get("function"),
                code=fields.get("code"),
                detail=fields.get("detail"),
            )
        return cls(
            message,
            status=fields["status"],
            status_name=fields["status_name"],
            op=fields.get("op"),
            function=fields.get("function"),
            code=fields.get("code"),
            detail=fields.get("detail"),
        )
    if kind == "value":
        return ValueError(message)
    return _KIND_CLASSES.get(kind, CsxError)(message)

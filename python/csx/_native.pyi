"""Type stubs of csx._native, the compiled half of the package (PyO3). Use the
public API in csx (csx.Device, ...), which checks arguments and names the bad one."""

from os import PathLike
from typing import Any, Dict, List, Optional, Tuple, Union, final

__all__ = [
    "Buffer", "Device", "ExecResult", "LambdaResult", "Server", "ScanChunk", "Scanner", "ResidentScans",
    "get_timed", "generate", "write_parquet", "put_dir", "SsbRun", "ssb_run", "ssb_queries",
    "build", "sdk_program", "sdk_programs", "statuses", "table_schema", "table_dictionary",
    "table_read", "local_table_read", "table_write",
    "filter_types", "filter_domain", "filter_raw_ranges", "filter_parse", "filter_bind",
    "ABI_VERSION", "RANGES_MAX", "__version__", "BUILD_PROFILE", "BUILD_OPT_LEVEL",
]

ABI_VERSION: int
RANGES_MAX: int
__version__: str
#: The Cargo profile the module was built with: "dev" or "release".
BUILD_PROFILE: str
#: Its optimisation level (Cargo's OPT_LEVEL: "1" for dev, "3" for release).
BUILD_OPT_LEVEL: str

def statuses() -> List[Tuple[int, str, str]]: ...

@final
class Buffer:
    """Read-only bytes from the device; supports the buffer protocol, so
    numpy.frombuffer, memoryview and pyarrow.py_buffer view it without a copy."""

    def __len__(self) -> int: ...
    def __bytes__(self) -> bytes: ...
    def __buffer__(self, flags: int) -> memoryview: ...
    @property
    def address(self) -> int: ...

@final
class ExecResult:
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
    output: Optional[Buffer]
    staged_bytes: int
    timing: Dict[str, int]
    wall_ns: int

@final
class LambdaResult:
    output: Buffer
    ran: str
    cache_ratio: float
    modelled_ns: int
    host: Optional[Dict[str, int]]
    device: Optional[Dict[str, int]]

_Path = Union[str, PathLike[str]]

@final
class Device:
    @staticmethod
    def open(uri: str) -> Device: ...
    @staticmethod
    def init(
        path: _Path,
        profile: Optional[str] = None,
        nvm_size: Optional[int] = None,
        slm_size: Optional[int] = None,
        state_size: Optional[int] = None,
        engines: Optional[int] = None,
        resident_memory: Optional[int] = None,
        throttle: Optional[bool] = None,
    ) -> Device: ...
    @property
    def uri(self) -> str: ...
    @property
    def closed(self) -> bool: ...
    def close(self) -> None: ...
    def identify(self) -> Dict[str, Any]: ...
    def put(self, path: str, data: Any) -> int: ...
    def get(self, path: str, offset: int = 0, length: Optional[int] = None) -> Buffer: ...
    def put_file(self, local: _Path, path: str) -> int: ...
    def get_file(self, path: str, local: _Path) -> int: ...
    def ls(self, dir: str) -> Tuple[List[Tuple[str, int, int]], bool]: ...
    def stat(self, path: str) -> Tuple[str, int, int]: ...
    def rm(self, path: str) -> None: ...
    def mkdir(self, path: str) -> None: ...
    def flush(self) -> None: ...
    def load(
        self, image: bytes, entry: Optional[str] = None, engine: str = "jit"
    ) -> Tuple[int, Optional[int]]: ...
    def unload(self, slot: int, generation: Optional[int] = None) -> None: ...
    def run(
        self,
        slot: int,
        input_path: Optional[str] = None,
        input_offset: int = 0,
        input_length: Optional[int] = None,
        input_data: Any = None,
        output_size: Optional[int] = None,
        cparam1: int = 0,
        cparam2: int = 0,
        params: Any = None,
        fuel: Optional[int] = None,
        time_limit_ms: Optional[int] = None,
    ) -> ExecResult: ...
    def read_lambda(
        self,
        path: str,
        image: bytes,
        name: str,
        entry: Optional[str] = None,
        offset: int = 0,
        length: Optional[int] = None,
        mode: str = "device",
        output_size: Optional[int] = None,
        cparam1: int = 0,
        cparam2: int = 0,
        params: Any = None,
        fuel: Optional[int] = None,
        state_dir: Optional[_Path] = None,
    ) -> LambdaResult: ...

@final
class Server:
    @staticmethod
    def start(state: _Path, listen: List[str], token: Optional[str] = None) -> Server: ...
    @property
    def uris(self) -> List[str]: ...
    def status(self) -> Dict[str, int]: ...
    def shutdown(self) -> None: ...

def build(source: str, name: str = "program") -> bytes: ...
def sdk_program(name: str) -> bytes: ...
def sdk_programs() -> List[str]: ...

@final
class ScanChunk:
    first_row: int
    rows: int
    kept: int
    columns: List[Buffer]

@final
class Scanner:
    def __new__(
        cls,
        device: Device,
        table: str,
        columns: List[str],
        predicates: List[Tuple[str, str, List[int]]],
        engine: str = "jit",
        chunk_rows: Optional[int] = None,
        resident: Optional[ResidentScans] = None,
    ) -> Scanner: ...
    @property
    def program(self) -> Buffer: ...
    @property
    def resident(self) -> bool: ...
    @property
    def reused(self) -> bool: ...
    @property
    def chunk_rows(self) -> int: ...
    @property
    def chunks(self) -> int: ...
    @property
    def meter(self) -> Tuple[int, int, int, int, int, int]: ...
    def use_loaded(self, slot: int) -> None: ...
    def next(self) -> Optional[ScanChunk]: ...
    def close(self) -> None: ...

@final
class ResidentScans:
    def __new__(cls, device: Device, budget: Optional[int] = None, keep_inputs: bool = True) -> ResidentScans: ...
    @property
    def kept_bytes(self) -> int: ...
    @property
    def entries(self) -> int: ...
    def close(self) -> None: ...

def get_timed(device: Device, path: str) -> Tuple[Buffer, int]: ...
def table_schema(device: Device, table: str) -> Tuple[str, int, List[Tuple[str, str, int, int]]]: ...
def table_dictionary(device: Device, table: str, column: str) -> List[str]: ...
def filter_types() -> List[str]: ...
def filter_domain(ty: str) -> Tuple[int, int]: ...
def filter_raw_ranges(
    column: str, ty: str, predicates: List[Tuple[str, str, List[int]]]
) -> Optional[List[Tuple[int, int]]]: ...

# A filter constant (kind, text, count) and comparison (column, op, constants, text);
# a failure (kind, message, part).
_FilterConstant = Tuple[str, str, int]
_FilterComparison = Tuple[str, str, List[_FilterConstant], str]
_FilterError = Tuple[str, str, str]

def filter_parse(text: str) -> Tuple[List[_FilterComparison], Optional[_FilterError]]: ...
def filter_bind(
    table: str,
    columns: List[Tuple[str, str, int]],
    comparisons: List[_FilterComparison],
    dictionaries: Dict[str, List[str]],
) -> Tuple[List[Tuple[str, int, int, List[int], Optional[List[int]]]], Optional[_FilterError]]: ...

_SchemaInfo = Tuple[str, int, int, List[Tuple[str, str, int, int]]]
_ColumnRead = Tuple[str, Buffer, Optional[List[str]]]

def table_read(
    device: Device, table: str, columns: Optional[List[str]] = None
) -> Tuple[_SchemaInfo, List[_ColumnRead], int, int]: ...
def local_table_read(
    dir: str, columns: Optional[List[str]] = None
) -> Tuple[_SchemaInfo, List[_ColumnRead]]: ...
def table_write(
    device: Device,
    table: str,
    name: str,
    columns: List[Tuple[str, str, int, bytes]],
    dictionaries: List[Tuple[str, List[str]]],
    raw: bool = False,
) -> _SchemaInfo: ...

@final
class SsbRun:
    query: str
    sql: str
    rows_json: str
    split: str
    modelled_ns: int
    bytes_to_host: int
    media_bytes: int
    fuel: int
    commands: int
    phases: List[Tuple[str, int, int]]
    host_ns: int
    wall_ns: int
    partitions: int
    joined: int

def generate(kind: str, out: _Path, sf: float, seed: int = 1) -> Dict[str, int]: ...
def write_parquet(dataset: _Path, out: _Path) -> None: ...
def put_dir(device: Device, local: _Path, dev_dir: str) -> Tuple[int, int, int]: ...
def ssb_queries() -> List[Tuple[str, str]]: ...
def ssb_run(
    device: Device,
    data_dir: str,
    query: str,
    split: str = "offload",
    engine: str = "jit",
    strategy: str = "bitmask",
    partitions: Optional[int] = None,
    probe: str = "emitted",
) -> SsbRun: ...

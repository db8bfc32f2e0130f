//! Every bound of the device protocol, each with the reason it exists.
//!
//! A command that exceeds one of these is refused before anything is allocated for it:
//! the host checks with [`crate::Command::validate`], the wire decoder checks every
//! length it reads, and the device checks again on submission (pair assertions).
//! The VM's own bounds (stack, call depth, region size) live in `csx-ebpf`'s `limits`;
//! the ones repeated here are asserted equal where the two must agree.

/// Windows one execution may map (`struct csx_args.windows[16]`). Part of the program
/// ABI: programs compiled today index `args->windows[i]` for `i < 16`. It also fits the
/// VM's embedder regions: 2 (args) + 1 (shared state) + 16 windows = 19 of 20.
pub const WINDOWS_MAX: usize = 16;

/// Bytes of one window. A window is a VM region, and a region offset is the low 32 bits
/// of a virtual address, so no region can be larger.
pub const WINDOW_SIZE_MAX: u64 = u32::MAX as u64;

/// Bytes of a program's parameter block (`struct csx_args.params`). Parameters are
/// scalars and small descriptors (paths, thresholds); bulk data belongs in windows.
/// Keeps the per-run argument block under two pages.
pub const PARAMS_SIZE_MAX: usize = 4096;

/// Bytes of the fixed part of `struct csx_args`: cparam1, cparam2, nwindows,
/// params_len and 16 windows of (addr, len).
pub const ARGS_HEADER_SIZE: usize = 8 + 8 + 4 + 4 + WINDOWS_MAX * 16;

/// Bytes of one program image (ELF object or raw bytecode). Large enough for the VM's
/// largest program (1,000,000 instructions of 8 bytes) plus ELF overhead and debug info;
/// bounded so one load cannot take the device's memory.
pub const PROGRAM_SIZE_MAX: u32 = 16 << 20;

/// Bytes across all loaded programs (TP4091 MAXPB). Bounds the memory the compute
/// namespace holds for program images at any time.
pub const PROGRAM_BYTES_TOTAL_MAX: u64 = 256 << 20;

/// Bytes in one Load Program chunk. Chunks keep every command (and every wire frame)
/// small; TP4091 loads programs in pieces the same way firmware images are downloaded.
pub const LOAD_CHUNK_SIZE_MAX: u32 = 1 << 20;

/// Program slots (PINDs `0..PROGRAM_SLOTS_COUNT`) in the compute namespace. Slots are a
/// fixed table, as in TP4091's compute namespace, so a listing is always small.
pub const PROGRAM_SLOTS_COUNT: u16 = 64;

/// Programs that may be activated at once (TP4091 MAXACT). Each activation holds a
/// verified program and, with the JIT, executable memory.
pub const PROGRAMS_ACTIVE_MAX: u16 = 32;

/// Memory range sets a device holds at once (TP4091 MAXMEMRS).
pub const RANGE_SETS_MAX: u16 = 256;

/// Ranges in one memory range set or one inline Execute (TP4091 MAXMEMR). Range *i*
/// becomes window *i*, so this cannot exceed [`WINDOWS_MAX`].
pub const RANGES_PER_SET_MAX: usize = WINDOWS_MAX;

/// Bytes one Memory Read or Memory Write may move. Bounds the largest data frame on
/// every transport; a host moves more in several commands.
pub const MEM_IO_SIZE_MAX: u64 = 16 << 20;

/// Bytes one File Read or File Write may move, for the same reason as
/// [`MEM_IO_SIZE_MAX`].
pub const FILE_IO_SIZE_MAX: u64 = 16 << 20;

/// The file-store directory where whole-file writes stage their data before renaming it
/// over the target (replace-by-rename). A file store removes whatever it finds there
/// when it opens (a writer killed mid-copy leaves its temporary behind), and never keeps
/// the directory itself once it is empty.
pub const PARTIAL_DIR: &str = "/.csx-partial";

/// Source ranges in one Memory Copy, as NVMe Copy's 256 source ranges.
pub const COPY_SOURCES_MAX: usize = 256;

/// Bytes one Memory Copy may stage. Copies run on the transfer worker; a bound keeps a
/// single command from monopolising it for more than a fraction of a second.
pub const COPY_SIZE_MAX: u64 = 4 << 30;

/// Bytes of a device path (`/dir/file`). Long enough for any sane hierarchy, short
/// enough that paths in VM memory and on the wire are cheap to check.
pub const PATH_SIZE_MAX: usize = 1024;

/// Entries one File List returns. A host lists a larger directory by prefix.
pub const FILE_LIST_ENTRIES_MAX: usize = 65_536;

/// Extents one File Extents reply returns.
pub const EXTENTS_MAX: usize = 65_536;

/// Bytes of a program entry (ELF symbol) name or a program name in a listing.
pub const NAME_SIZE_MAX: usize = 256;

/// Bytes of a human-readable message (error detail, trap message, function doc).
pub const MESSAGE_SIZE_MAX: usize = 1024;

/// Instruction classes an execution's work is counted in (`ExecuteInfo::work`): the VM
/// has 10 (`csx_ebpf::count::InsnClass`); room for a few more without a wire change.
pub const WORK_CLASSES_MAX: usize = 16;

/// Messages one execution may emit with `csx_trace`.
pub const TRACE_MESSAGES_MAX: usize = 64;

/// Bytes of one `csx_trace` message; longer messages are truncated.
pub const TRACE_MESSAGE_SIZE_MAX: usize = 256;

/// Entries in a function table listing; equals the VM's function-table bound.
pub const FUNCTIONS_MAX: usize = 1024;

/// Commands one queue pair may have in flight (submitted, not yet reaped). Every
/// queue is bounded: the completion queue of a pair can never hold more than this, so
/// posting a completion never blocks or fails.
pub const QUEUE_DEPTH_MAX: u32 = 1024;

/// Queue pairs (clients) one device serves at once. With [`QUEUE_DEPTH_MAX`] this bounds
/// every internal work queue.
pub const QUEUE_PAIRS_MAX: u32 = 64;

/// Execution engines (threads) a device may run.
pub const ENGINES_MAX: u32 = 256;

/// Fuel one execution may ask for. Enough for minutes of work; a larger budget would only
/// let a runaway program hold an engine longer.
pub const FUEL_MAX: u64 = 1 << 40;

/// Milliseconds one execution may ask to run for (its time limit). An hour is far more
/// than any program the device is for; a longer run only holds an engine from others.
pub const TIME_LIMIT_MS_MAX: u32 = 3_600_000;

/// Bytes of the shared state region. It is persisted to the state directory on every
/// flush, so it stays modest.
pub const STATE_SIZE_MAX: u64 = 1 << 30;

/// Bytes of the memory namespace (SLM). The emulation keeps it in host memory.
pub const SLM_SIZE_MAX: u64 = 64 << 30;

/// Bytes of the NVM namespace image.
pub const NVM_SIZE_MAX: u64 = 16 << 40;

/// Bytes one SLM allocation may have: a single window must be able to cover it.
pub const SLM_ALLOC_SIZE_MAX: u64 = WINDOW_SIZE_MAX;

/// Granularity of SLM allocations. A cache line, so two allocations never share one and
/// engines working on neighbouring regions do not false-share.
pub const SLM_ALIGNMENT: u64 = 64;

/// Bytes of the largest encoded command or completion. The largest command is a write
/// of [`MEM_IO_SIZE_MAX`] or [`FILE_IO_SIZE_MAX`] bytes plus its path and header; the
/// margin covers headers. A transport refuses any frame larger than this before reading
/// it.
pub const FRAME_SIZE_MAX: usize = PAYLOAD_SIZE_MAX + 32 * 1024;

/// Payload bytes of one completion (a read's data, a listing). A listing that would
/// exceed it is cut short and marked truncated.
pub const PAYLOAD_SIZE_MAX: usize = (16 << 20) + 32 * 1024;

// ------------------------------------------------------------------------------------
// Transports (`csx_host::transport::{shm,tcp}`, byte tables in `docs/design/`). Each
// transport module re-exports its own under its short name.

/// Bytes of bulk data one command moves through a transport outside its encoding (a
/// Memory or File Write's source, a read's destination): the largest read or write.
pub const TRANSFER_SIZE_MAX: usize = MEM_IO_SIZE_MAX as usize;

/// Bytes of a human-readable message in a transport's handshake answer or termination
/// (why a client was refused or dropped): one line an operator reads, like a completion's
/// message.
pub const TRANSPORT_MESSAGE_SIZE_MAX: usize = MESSAGE_SIZE_MAX;

/// Bytes of host memory an shm client may ask for, at least: one response area per
/// command of a small queue, and a few 4 KiB buffers.
pub const SHM_HOST_MEMORY_MIN: u64 = 1 << 20;

/// Bytes of host memory an shm client may ask for, at most. Bounds what one client makes
/// the device create and map.
pub const SHM_HOST_MEMORY_MAX: u64 = 1 << 30;

/// Bytes of an shm queue name (`shm://NAME`): it becomes part of a socket's file name,
/// whose path must fit a `sockaddr_un` (108 bytes) with its directory.
pub const SHM_NAME_SIZE_MAX: usize = 64;

/// Times an shm host asks again for a listing that overflowed its response area (it may
/// grow between the tries) before it gives up.
pub const SHM_RESPONSE_RETRIES_MAX: u32 = 3;

/// Bytes of a tcp shared-secret token. Long enough for any generated secret (a 256-bit
/// key in hex is 64 bytes), short enough that the connect request stays tiny.
pub const TCP_TOKEN_SIZE_MAX: usize = 256;

/// Bytes of bulk data in one tcp H2C or C2H data PDU. Big enough that the per-PDU cost
/// vanishes against the copy, small enough that a receiver's PDU buffer stays modest and
/// a 16 MiB transfer interleaves with other connections' traffic.
pub const TCP_DATA_PDU_SIZE_MAX: usize = 1 << 20;

/// Bytes of a tcp command capsule: the encoded command without its bulk data. The
/// largest is a Load Program chunk (carried in the capsule), or a Memory Copy of 256
/// sources with maximal paths; both fit with room to spare. Bounds what a server
/// buffers per connection for one command header.
pub const TCP_COMMAND_CAPSULE_SIZE_MAX: usize = 2 << 20;

/// Bytes of a tcp response capsule: any encoded completion (a listing may approach
/// [`FRAME_SIZE_MAX`]).
pub const TCP_RESPONSE_CAPSULE_SIZE_MAX: usize = FRAME_SIZE_MAX;

/// Connections a device daemon (`csx device serve`) holds a thread for at once: its
/// [`QUEUE_PAIRS_MAX`] queue pairs, and a margin so refused or half-open connections are
/// answered without letting a flood of them exhaust threads.
pub const SERVER_CONNECTIONS_MAX: usize = QUEUE_PAIRS_MAX as usize + 16;

const _: () = assert!(FILE_IO_SIZE_MAX as usize == TRANSFER_SIZE_MAX);
const _: () = assert!(SHM_HOST_MEMORY_MIN < SHM_HOST_MEMORY_MAX);
const _: () = assert!(FRAME_SIZE_MAX as u64 <= SHM_HOST_MEMORY_MAX);
const _: () = assert!(TCP_DATA_PDU_SIZE_MAX <= TRANSFER_SIZE_MAX);
const _: () = assert!(TCP_COMMAND_CAPSULE_SIZE_MAX <= FRAME_SIZE_MAX);
const _: () =
    assert!(LOAD_CHUNK_SIZE_MAX as usize + NAME_SIZE_MAX + 4096 < TCP_COMMAND_CAPSULE_SIZE_MAX);
const _: () = assert!(
    16 + 12 + COPY_SOURCES_MAX * (1 + 16 + 4 + PATH_SIZE_MAX) < TCP_COMMAND_CAPSULE_SIZE_MAX
);

const _: () = assert!(RANGES_PER_SET_MAX <= WINDOWS_MAX);
const _: () = assert!(ARGS_HEADER_SIZE == 280);
const _: () = assert!(ARGS_HEADER_SIZE + PARAMS_SIZE_MAX <= 2 * 4096 + 280);
const _: () = assert!(LOAD_CHUNK_SIZE_MAX <= PROGRAM_SIZE_MAX);
const _: () = assert!(PROGRAM_SIZE_MAX as u64 <= PROGRAM_BYTES_TOTAL_MAX);
const _: () = assert!(PROGRAMS_ACTIVE_MAX <= PROGRAM_SLOTS_COUNT);
const _: () = assert!((MEM_IO_SIZE_MAX as usize) + PATH_SIZE_MAX + 4096 < FRAME_SIZE_MAX);
const _: () = assert!((FILE_IO_SIZE_MAX as usize) + PATH_SIZE_MAX + 4096 < FRAME_SIZE_MAX);
const _: () = assert!((LOAD_CHUNK_SIZE_MAX as usize) + NAME_SIZE_MAX + 4096 < FRAME_SIZE_MAX);
const _: () = assert!((MEM_IO_SIZE_MAX as usize) <= PAYLOAD_SIZE_MAX);
const _: () = assert!((FILE_IO_SIZE_MAX as usize) <= PAYLOAD_SIZE_MAX);
// A listing of the maximum entry count with maximum-length paths must not be promised:
// the device truncates a listing at PAYLOAD_SIZE_MAX and says so.
const _: () = assert!(SLM_ALIGNMENT.is_power_of_two());
const _: () = assert!(SLM_ALLOC_SIZE_MAX <= SLM_SIZE_MAX);
const _: () = assert!(TRACE_MESSAGE_SIZE_MAX <= MESSAGE_SIZE_MAX);
const _: () = assert!(COPY_SIZE_MAX >= MEM_IO_SIZE_MAX);
const _: () = assert!(QUEUE_DEPTH_MAX.is_power_of_two());

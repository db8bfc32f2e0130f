//! `CS_STATUS`: the API's status codes, and the one place every csx error is mapped to
//! one of them (the table in `docs/capi.md` is checked against [`call_status`]).

use csx_host::{CallError, OpenError, TransportError};

/// A status code as C sees it (`typedef int32_t CS_STATUS`).
pub type CsStatus = i32;

macro_rules! statuses {
    ($( $name:ident = $value:expr, $doc:literal; )*) => {
        $( #[doc = $doc] #[allow(clippy::doc_markdown)] pub const $name: CsStatus = $value; )*
        /// Every status: name, value, meaning (the header is generated from this).
        pub const ALL: &[(&str, CsStatus, &str)] = &[ $( (stringify!($name), $value, $doc), )* ];
    };
}

statuses! {
    CS_SUCCESS = 0, "The call completed successfully.";
    CS_COULD_NOT_MAP_MEMORY = 1, "Device memory cannot be mapped into the host (a tcp device).";
    CS_DEVICE_ERROR = 2, "The device failed the command through its own fault.";
    CS_DEVICE_NOT_AVAILABLE = 3, "The device is closed, shut down or its connection was lost.";
    CS_DEVICE_NOT_READY = 4, "The device is shutting down and did not run the command.";
    CS_DEVICE_NOT_PRESENT = 5, "No device answers at this name.";
    CS_ENODEV = 6, "The device name is not one csx can open.";
    CS_ENOENT = 7, "No file at the path.";
    CS_ENTITY_NOT_ON_DEVICE = 8, "The entity is not reachable from this device.";
    CS_ENXIO = 9, "The transport is not available in this build.";
    CS_ERROR_IN_EXECUTION = 10, "The program trapped.";
    CS_FATAL_ERROR = 11, "The library or the device's persistent data is in a state it cannot recover.";
    CS_HANDLE_IN_USE = 12, "The slot or file is occupied or in use.";
    CS_INVALID_HANDLE = 13, "A device, memory, file, request or batch handle is unknown or was freed.";
    CS_INVALID_ARG = 14, "An argument is null, malformed or outside the protocol's limits.";
    CS_INVALID_EVENT = 15, "The event handle is unknown or was deleted.";
    CS_INVALID_ID = 16, "A program slot, range set or other id is out of range or unknown.";
    CS_INVALID_LENGTH = 17, "A length or offset reaches outside its object or over a limit.";
    CS_INVALID_OPTION = 18, "A type, mode or flag value is not one the API defines.";
    CS_INVALID_FUNCTION = 19, "The CSF is loaded but not activated.";
    CS_INVALID_FUNCTION_NAME = 20, "No CSF has this name.";
    CS_IO_TIMEOUT = 21, "The device did not answer in time.";
    CS_LOAD_ERROR = 22, "The program image is malformed or the verifier refused it.";
    CS_MEMORY_IN_USE = 23, "The memory is in use by another command in flight.";
    CS_NO_PERMISSIONS = 24, "The caller may not do this.";
    CS_NOT_DONE = 25, "The event has no completion to report.";
    CS_NOT_ENOUGH_MEMORY = 26, "Device memory is exhausted.";
    CS_NO_SUCH_ENTITY_EXISTS = 27, "The named entity does not exist.";
    CS_OUT_OF_RESOURCES = 28, "Another device resource (slots, queue entries, space) is exhausted.";
    CS_QUEUED = 29, "The request is queued: its completion goes to the callback or event.";
    CS_UNKNOWN_MEMORY = 30, "The device does not know this allocation.";
    CS_UNKNOWN_COMPUTE_FUNCTION = 31, "The CSF id names an empty slot.";
    CS_UNSUPPORTED = 32, "csx does not implement this (see docs/capi.md).";
    CSX_ABORTED = 0x1000, "csx extension: the request was aborted (csAbortRequest, csCloseCSx, or the device shutting down).";
}

/// The name of a status, for messages.
pub fn name(status: CsStatus) -> &'static str {
    ALL.iter()
        .find(|(_, v, _)| *v == status)
        .map_or("CS_UNKNOWN_STATUS", |(n, _, _)| n)
}

/// The status of a failed host call: each `CallError` variant maps to exactly one.
pub fn call_status(e: &CallError) -> CsStatus {
    match e {
        CallError::Invalid { .. } => CS_INVALID_ARG,
        CallError::Transport(t) => transport_status(t),
        CallError::UnknownCommand { .. } => CS_FATAL_ERROR,
        CallError::UnexpectedReply { .. } => CS_DEVICE_ERROR,
        CallError::InvalidField(_) => CS_INVALID_ARG,
        CallError::Internal(_) => CS_DEVICE_ERROR,
        CallError::Aborted(_) => CSX_ABORTED,
        CallError::TimeLimitExceeded(_) => CS_ERROR_IN_EXECUTION,
        CallError::ProgramChanged(_) => CS_UNKNOWN_COMPUTE_FUNCTION,
        CallError::NamespaceNotReachable(_) => CS_ENTITY_NOT_ON_DEVICE,
        CallError::InsufficientResources(_) => CS_NOT_ENOUGH_MEMORY,
        CallError::InsufficientProgramResources(_) => CS_OUT_OF_RESOURCES,
        CallError::InvalidMemoryHandle(_) => CS_UNKNOWN_MEMORY,
        CallError::InvalidRangeSet(_) => CS_INVALID_LENGTH,
        CallError::UnknownRangeSet(_) => CS_INVALID_ID,
        CallError::InvalidProgram(_) => CS_LOAD_ERROR,
        CallError::InvalidProgramIndex(_) => CS_INVALID_ID,
        CallError::TooManyRanges(_) => CS_OUT_OF_RESOURCES,
        CallError::TooManyRangeSets(_) => CS_OUT_OF_RESOURCES,
        CallError::TooManyActivePrograms(_) => CS_OUT_OF_RESOURCES,
        CallError::ProgramBytesExceeded(_) => CS_OUT_OF_RESOURCES,
        CallError::MemoryInUse(_) => CS_MEMORY_IN_USE,
        CallError::NoProgram(_) => CS_UNKNOWN_COMPUTE_FUNCTION,
        CallError::OverlappingRanges(_) => CS_INVALID_ARG,
        CallError::ProgramNotActivated(_) => CS_INVALID_FUNCTION,
        CallError::ProgramInUse(_) => CS_HANDLE_IN_USE,
        CallError::ProgramTooBig(_) => CS_INVALID_LENGTH,
        CallError::Trap(_) => CS_ERROR_IN_EXECUTION,
        CallError::NotFound(_) => CS_ENOENT,
        CallError::FileExists(_) => CS_HANDLE_IN_USE,
        CallError::NoSpace(_) => CS_OUT_OF_RESOURCES,
        CallError::OutOfRange(_) => CS_INVALID_LENGTH,
        CallError::Io(_) => CS_DEVICE_ERROR,
        CallError::Corrupt(_) => CS_FATAL_ERROR,
        CallError::QueueFull(_) => CS_OUT_OF_RESOURCES,
        CallError::NotEmpty(_) => CS_HANDLE_IN_USE,
        CallError::Other(_) => CS_DEVICE_ERROR,
        _ => CS_DEVICE_ERROR,
    }
}

/// The status of a failed transport.
pub fn transport_status(e: &TransportError) -> CsStatus {
    match e {
        TransportError::QueueFull { .. } => CS_OUT_OF_RESOURCES,
        TransportError::Closed | TransportError::Disconnected { .. } => CS_DEVICE_NOT_AVAILABLE,
        TransportError::Refused { .. } => CS_NO_PERMISSIONS,
        _ => CS_DEVICE_ERROR,
    }
}

/// The status of a device that could not be opened.
pub fn open_status(e: &OpenError) -> CsStatus {
    match e {
        OpenError::UnknownScheme { .. } | OpenError::BadUri { .. } => CS_ENODEV,
        OpenError::TransportUnavailable { .. } => CS_ENXIO,
        OpenError::Transport(t) => match t {
            TransportError::Io { .. } => CS_DEVICE_NOT_PRESENT,
            other => transport_status(other),
        },
        OpenError::Io { .. } => CS_DEVICE_NOT_PRESENT,
        _ => CS_DEVICE_NOT_PRESENT,
    }
}

/// The table of `docs/capi.md` between its `status-table` markers: every device status
/// (through the `CallError` variant the host gives it) with its `CS_STATUS`.
pub fn device_status_table() -> String {
    use csx_host::proto::{CommandId, Completion, Status};
    let mut t = String::from("| csx device status | csx-host error | CS_STATUS |\n|---|---|---|\n");
    for &s in Status::ALL.iter().filter(|s| !s.is_success()) {
        let e = CallError::from_completion("x", Completion::new(CommandId(1), s));
        let variant = format!("{e:?}");
        let variant = variant.split('(').next().unwrap_or_default();
        t.push_str(&format!(
            "| {s:?} (`{:#04x}`) | `CallError::{variant}` | `{}` |\n",
            s.code(),
            name(call_status(&e))
        ));
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_status_table_in_docs_is_current() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/capi.md");
        let doc = std::fs::read_to_string(path).unwrap_or_default();
        let (begin, end) = ("<!-- status-table -->\n", "<!-- /status-table -->");
        let (Some(a), Some(b)) = (doc.find(begin), doc.find(end)) else {
            panic!("{path} lacks the {begin:?} ... {end:?} markers");
        };
        let current = device_status_table();
        if std::env::var_os("CSX_CAPI_WRITE_HEADER").is_some() {
            let new = format!("{}{current}{}", &doc[..a + begin.len()], &doc[b..]);
            std::fs::write(path, new).expect("write docs/capi.md");
            return;
        }
        assert!(
            doc[a + begin.len()..b] == current,
            "{path}'s status table is stale: run `CSX_CAPI_WRITE_HEADER=1 cargo test -p csx-capi --lib`"
        );
    }

    #[test]
    fn every_device_status_maps_to_a_specific_cs_status() {
        use csx_host::proto::{CommandId, Completion, Status};
        for &s in Status::ALL.iter().filter(|s| !s.is_success()) {
            let e = CallError::from_completion("x", Completion::new(CommandId(1), s));
            let cs = call_status(&e);
            assert_ne!(cs, CS_SUCCESS, "{s:?}");
            assert_ne!(name(cs), "CS_UNKNOWN_STATUS", "{s:?}");
        }
        assert_eq!(
            call_status(&CallError::from_completion(
                "x",
                Completion::new(CommandId(1), Status::NotFound)
            )),
            CS_ENOENT
        );
        assert_eq!(name(CS_INVALID_HANDLE), "CS_INVALID_HANDLE");
        assert_eq!(name(-5), "CS_UNKNOWN_STATUS");
    }
}

//! Newtype identifiers. None of these is ever passed as a bare integer, so an index
//! cannot be confused with a length or with another kind of id.

use std::fmt;

macro_rules! id_type {
    ($(#[$doc:meta])* $name:ident($inner:ty), $prefix:literal) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
        pub struct $name(pub $inner);

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, concat!($prefix, "{}"), self.0)
            }
        }
    };
}

id_type!(
    /// Chosen by the host; the device echoes it in the completion. Unique among the
    /// commands a queue pair has in flight (the device does not check: NVMe's CID is
    /// the host's business too).
    CommandId(u64),
    "cmd#"
);

id_type!(
    /// A program slot in the compute namespace (TP4091 PIND), `0..PROGRAM_SLOTS_COUNT`.
    ProgramIndex(u16),
    "pind "
);

id_type!(
    /// A memory range set (TP4091 RSID). 0 is never allocated: Execute with RSID 0
    /// means "inline ranges" in TP4091, and our encoding keeps that meaning.
    RangeSetId(u16),
    "rsid "
);

id_type!(
    /// An allocation in the memory namespace (SLM), SNIA's `CS_MEM_HANDLE`. 0 is never
    /// allocated, so a zeroed handle is always invalid.
    MemHandle(u32),
    "mem "
);

id_type!(
    /// A queue pair (one client connection) on a device. Allocations and range sets
    /// belong to the client that made them and are reclaimed when it goes away.
    ClientId(u32),
    "client "
);

id_type!(
    /// A registered device function: the immediate of `call imm` in a program.
    FunctionId(u32),
    "fn "
);

impl RangeSetId {
    /// Never a real set.
    pub const NONE: RangeSetId = RangeSetId(0);
}

impl MemHandle {
    /// Never a real allocation.
    pub const NONE: MemHandle = MemHandle(0);
}

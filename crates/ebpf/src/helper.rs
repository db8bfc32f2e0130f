//! The helper ABI: functions a program calls by id (`call imm`) and the embedder
//! implements natively (Delilah's registered device functions).
//!
//! The embedder supplies a [`FunctionTable`]: for each function its name, id and
//! argument kinds. The loader resolves `extern` calls by name against it, the verifier
//! rejects unknown ids, and at run time [`call_helper`] checks every pointer argument
//! against the region table *before* the native code runs. Both engines go through
//! [`call_helper`], so helper semantics (and their traps) are identical.

use std::collections::HashMap;

use crate::memory::MemoryMap;
use crate::trap::TrapKind;

/// What a helper argument register carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ArgKind {
    /// A plain integer.
    Scalar,
    /// A pointer to bytes the helper reads; their count is argument `len_arg` (0-based).
    PtrIn { len_arg: u8 },
    /// A pointer to bytes the helper writes; their count is argument `len_arg`.
    PtrOut { len_arg: u8 },
}

/// One native function a program may call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FunctionSig {
    /// C name, the one programs declare `extern`.
    pub name: String,
    /// The id in `call imm`; stable for a given name on a given device version.
    pub id: u32,
    /// Kinds of r1.. in order; at most 5.
    pub args: Vec<ArgKind>,
    /// Version of this function's contract.
    pub version: u32,
    /// One line for `csx functions`.
    pub doc: String,
}

/// Errors building a function table.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FunctionTableError {
    #[error("function id {id} is used by both `{first}` and `{second}`")]
    DuplicateId {
        id: u32,
        first: String,
        second: String,
    },
    #[error("function name `{name}` is defined twice")]
    DuplicateName { name: String },
    #[error("function `{name}` has {count} arguments, limit is 5")]
    TooManyArgs { name: String, count: usize },
    #[error("function `{name}` argument {arg} names length argument {len_arg}, which is not a scalar argument")]
    BadLenArg {
        name: String,
        arg: usize,
        len_arg: u8,
    },
    #[error("function table has {count} entries, limit is {limit}")]
    TooMany { count: usize, limit: usize },
}

/// The functions an embedder offers, by id and by name.
#[derive(Clone, Debug, Default)]
pub struct FunctionTable {
    by_id: HashMap<u32, FunctionSig>,
    by_name: HashMap<String, u32>,
}

impl FunctionTable {
    /// An empty table.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds `sig`, checking that its id and name are new and its pointer arguments
    /// name scalar length arguments.
    pub fn insert(&mut self, sig: FunctionSig) -> Result<(), FunctionTableError> {
        if self.by_id.len() >= crate::limits::FUNCTIONS_MAX {
            return Err(FunctionTableError::TooMany {
                count: self.by_id.len() + 1,
                limit: crate::limits::FUNCTIONS_MAX,
            });
        }
        if sig.args.len() > 5 {
            return Err(FunctionTableError::TooManyArgs {
                name: sig.name,
                count: sig.args.len(),
            });
        }
        for (i, a) in sig.args.iter().enumerate() {
            if let ArgKind::PtrIn { len_arg } | ArgKind::PtrOut { len_arg } = *a {
                if sig.args.get(len_arg as usize) != Some(&ArgKind::Scalar) {
                    return Err(FunctionTableError::BadLenArg {
                        name: sig.name,
                        arg: i,
                        len_arg,
                    });
                }
            }
        }
        if let Some(prev) = self.by_id.get(&sig.id) {
            return Err(FunctionTableError::DuplicateId {
                id: sig.id,
                first: prev.name.clone(),
                second: sig.name,
            });
        }
        if self.by_name.contains_key(&sig.name) {
            return Err(FunctionTableError::DuplicateName { name: sig.name });
        }
        self.by_name.insert(sig.name.clone(), sig.id);
        self.by_id.insert(sig.id, sig);
        Ok(())
    }

    /// The function with id `id`.
    pub fn get(&self, id: u32) -> Option<&FunctionSig> {
        self.by_id.get(&id)
    }

    /// The function called `name`.
    pub fn by_name(&self, name: &str) -> Option<&FunctionSig> {
        self.by_name.get(name).and_then(|id| self.by_id.get(id))
    }

    /// All functions, sorted by id.
    pub fn iter(&self) -> impl Iterator<Item = &FunctionSig> {
        let mut v: Vec<_> = self.by_id.values().collect();
        v.sort_by_key(|s| s.id);
        v.into_iter()
    }

    /// Number of functions.
    pub fn len(&self) -> usize {
        self.by_id.len()
    }

    /// Whether the table is empty.
    pub fn is_empty(&self) -> bool {
        self.by_id.is_empty()
    }

    /// The table the bpf_conformance suite assumes: helper 5 returns its first argument.
    pub fn conformance() -> Self {
        let mut t = Self::new();
        t.insert(FunctionSig {
            name: "conformance_identity".into(),
            id: 5,
            args: vec![ArgKind::Scalar],
            version: 1,
            doc: "returns its first argument (bpf_conformance helper 5)".into(),
        })
        .expect("a fresh table accepts one valid entry");
        t
    }
}

/// What a native function may report instead of a value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HelperAbort {
    /// A negative csx error code.
    pub code: i64,
    pub message: String,
}

/// The embedder's implementation of the functions in its [`FunctionTable`].
pub trait HelperHost {
    /// Runs function `id` with argument registers `args`. Pointer arguments have been
    /// checked against `mem` per the function's signature. Return `Ok(r0)`, or
    /// `Err` to abort the run with [`TrapKind::HelperAbort`]. Recoverable failures should
    /// be a negative `Ok` value the program can test, not an abort.
    fn call(
        &mut self,
        id: u32,
        args: [u64; 5],
        mem: &mut MemoryMap<'_>,
    ) -> Result<u64, HelperAbort>;
}

/// A host for programs that call nothing but the conformance helper: id 5 returns r1.
#[derive(Debug, Default, Clone, Copy)]
pub struct ConformanceHost;

impl HelperHost for ConformanceHost {
    fn call(
        &mut self,
        id: u32,
        args: [u64; 5],
        _mem: &mut MemoryMap<'_>,
    ) -> Result<u64, HelperAbort> {
        if id == 5 {
            Ok(args[0])
        } else {
            Err(HelperAbort {
                code: -38,
                message: format!("no helper {id}"),
            })
        }
    }
}

/// Calls helper `id` on behalf of a program: looks it up, checks its pointer
/// arguments, then runs it. The one path both engines use.
pub fn call_helper(
    table: &FunctionTable,
    host: &mut dyn HelperHost,
    mem: &mut MemoryMap<'_>,
    id: i64,
    args: [u64; 5],
) -> Result<u64, TrapKind> {
    let sig = u32::try_from(id)
        .ok()
        .and_then(|id| table.get(id))
        .ok_or(TrapKind::UnknownHelper { id })?;
    for (i, kind) in sig.args.iter().enumerate() {
        let (len_arg, write) = match *kind {
            ArgKind::Scalar => continue,
            ArgKind::PtrIn { len_arg } => (len_arg, false),
            ArgKind::PtrOut { len_arg } => (len_arg, true),
        };
        let addr = args[i];
        let len = args[len_arg as usize];
        if mem.translate(addr, len, write).is_err() {
            return Err(TrapKind::HelperArgument {
                helper: sig.id,
                arg: i as u8,
                addr,
                len,
            });
        }
    }
    host.call(sig.id, args, mem)
        .map_err(|a| TrapKind::HelperAbort {
            helper: sig.id,
            code: a.code,
            message: a.message,
        })
}

//! Engines built by recent activations, kept by what they were built from.
//!
//! A query's programs are loaded afresh by every query (into whatever slots are free),
//! so without this every query verified and compiled them again: for a warm SSB query
//! a third of its instructions were Cranelift compiling the same four programs. An
//! activation whose type, entry, engine and image bytes equal a kept engine's takes
//! that engine instead of building one.
//!
//! Sharing is safe because an engine holds nothing a run writes: every run gets its
//! own stack and its own copies of the writable globals (`RunMemory`), and the
//! compiled code and the verified program are immutable. A raw image's program is
//! named after its slot, so raw images match only in the same slot. The key is the
//! whole image, compared byte for byte, never a hash: two different programs cannot
//! share an engine. The cache is bounded in entries and in image bytes; the least
//! recently used entry goes first.

use std::collections::VecDeque;
use std::sync::Arc;

use csx_ebpf::engine::Engine;
use csx_proto::{EngineKind, ProgramIndex, ProgramType};

/// Engines kept at most.
pub(super) const CACHED_ENGINES_MAX: usize = 24;

/// Image bytes kept at most, over every entry (a kept engine's code and verified
/// program grow with its image).
pub(super) const CACHED_IMAGE_BYTES_MAX: usize = 4 << 20;

/// What an engine was built from.
#[derive(PartialEq, Eq)]
pub(super) struct EngineKey {
    pub ptype: ProgramType,
    pub kind: EngineKind,
    pub entry: Option<String>,
    /// The slot, for raw images only (their program is named after it).
    pub raw_slot: Option<ProgramIndex>,
    pub image: Arc<[u8]>,
}

impl EngineKey {
    pub fn new(
        ptype: ProgramType,
        kind: EngineKind,
        entry: Option<&str>,
        pind: ProgramIndex,
        image: &[u8],
    ) -> EngineKey {
        EngineKey {
            ptype,
            kind,
            entry: entry.map(str::to_owned),
            raw_slot: (ptype == ProgramType::Raw).then_some(pind),
            image: Arc::from(image),
        }
    }
}

/// A kept engine: the engine and, when it is a tiered JIT program, the same engine
/// as that type.
#[derive(Clone)]
pub(super) struct Built {
    pub engine: Arc<dyn Engine>,
    pub tiered: Option<Arc<csx_ebpf_jit::TieredProgram>>,
}

/// The kept engines, most recently used last.
#[derive(Default)]
pub(super) struct EngineCache {
    entries: VecDeque<(EngineKey, Built)>,
    image_bytes: usize,
}

impl EngineCache {
    /// The engine built from `key`, if kept (it becomes the most recently used).
    pub fn take(&mut self, key: &EngineKey) -> Option<Built> {
        let at = self.entries.iter().position(|(k, _)| k == key)?;
        let entry = self.entries.remove(at)?;
        let built = entry.1.clone();
        self.entries.push_back(entry);
        Some(built)
    }

    /// Keeps `built` under `key`, evicting the least recently used entries past the
    /// bounds. An image larger than the whole byte bound is not kept.
    pub fn keep(&mut self, key: EngineKey, built: Built) {
        let len = key.image.len();
        if len > CACHED_IMAGE_BYTES_MAX {
            return;
        }
        if let Some(at) = self.entries.iter().position(|(k, _)| *k == key) {
            if let Some((old, _)) = self.entries.remove(at) {
                self.image_bytes -= old.image.len();
            }
        }
        while self.entries.len() >= CACHED_ENGINES_MAX
            || self.image_bytes + len > CACHED_IMAGE_BYTES_MAX
        {
            let Some((old, _)) = self.entries.pop_front() else {
                break;
            };
            self.image_bytes -= old.image.len();
        }
        self.image_bytes += len;
        self.entries.push_back((key, built));
    }

    /// How many engines are kept.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.entries.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use csx_ebpf::program::Program;

    fn built() -> Built {
        let insns = csx_ebpf::asm::assemble("mov %r0, 7\nexit").expect("assembles");
        let program = Program::from_insns("t", insns);
        let verified =
            csx_ebpf::verifier::verify(program, Arc::new(csx_ebpf::helper::FunctionTable::new()))
                .expect("verifies");
        Built {
            engine: Arc::new(csx_ebpf::interp::Interpreter::new(Arc::new(verified))),
            tiered: None,
        }
    }

    fn key(image: &[u8]) -> EngineKey {
        EngineKey::new(
            ProgramType::Elf,
            EngineKind::Interpreter,
            None,
            ProgramIndex(0),
            image,
        )
    }

    /// Only a key equal in every byte of its image finds the engine.
    #[test]
    fn a_kept_engine_is_found_only_by_the_same_image() {
        let mut c = EngineCache::default();
        c.keep(key(b"image-a"), built());
        assert!(c.take(&key(b"image-a")).is_some());
        assert!(c.take(&key(b"image-b")).is_none());
        assert!(c.take(&key(b"image-a\0")).is_none());
        let jit = EngineKey {
            kind: EngineKind::Jit,
            ..key(b"image-a")
        };
        assert!(c.take(&jit).is_none(), "another engine kind");
        let other_entry = EngineKey {
            entry: Some("f".into()),
            ..key(b"image-a")
        };
        assert!(c.take(&other_entry).is_none(), "another entry");
    }

    /// The bounds hold: the least recently used entry goes first, and an image over
    /// the byte bound is not kept.
    #[test]
    fn the_cache_keeps_its_bounds_evicting_the_least_recently_used() {
        let mut c = EngineCache::default();
        for n in 0..CACHED_ENGINES_MAX + 3 {
            c.keep(key(format!("image-{n}").as_bytes()), built());
            if n == CACHED_ENGINES_MAX - 1 {
                assert!(c.take(&key(b"image-0")).is_some(), "used again: kept");
            }
        }
        assert_eq!(c.len(), CACHED_ENGINES_MAX);
        assert!(c.take(&key(b"image-0")).is_some(), "recently used");
        assert!(c.take(&key(b"image-1")).is_none(), "least recently used");
        c.keep(key(&vec![1u8; CACHED_IMAGE_BYTES_MAX + 1]), built());
        assert_eq!(c.len(), CACHED_ENGINES_MAX, "too large to keep");
        c.keep(key(&vec![2u8; CACHED_IMAGE_BYTES_MAX]), built());
        assert_eq!(c.len(), 1, "the byte bound evicts the rest");
        assert!(c.image_bytes <= CACHED_IMAGE_BYTES_MAX);
    }
}

//! The command dispatch of a worker, and the admin commands: identify, functions,
//! programs, range sets, SLM allocation, shared state and flush.

use std::sync::Arc;
use std::time::Instant;

use csx_ebpf::engine::StopFlag;
use csx_proto::limits::*;
use csx_proto::{ClientId, Command, Completion, DeviceInfo, Op, ProgramIndex, Reply, ABI_VERSION};

use super::{ns, Shared};
use crate::programs::LoadChunk;
use crate::status::{fail_with, ok, with_reply, ToStatus};

/// The completion of a command that returns nothing: success (value 0) or its error.
fn done<E: ToStatus>(r: Result<(), E>) -> Completion {
    r.map_or_else(|e| fail_with(&e), |()| ok(0))
}

impl Shared {
    /// Empties slot `pind` for `client` if it holds the program of `generation` (any
    /// program when `None`).
    fn unload(&self, client: ClientId, pind: ProgramIndex, generation: Option<u64>) -> Completion {
        done(self.programs.unload(client, pind, generation))
    }

    pub(super) fn handle(&self, client: ClientId, cmd: &Command) -> Completion {
        match &cmd.op {
            // Workers run executes with the flag registered at submission (`run`).
            Op::Execute { .. } => self.execute(client, &cmd.op, &Arc::new(StopFlag::new()), None),
            // Abort completes at submission (`QueuePair::submit`), never on a worker.
            Op::Abort { .. } => ok(0),
            Op::Identify => with_reply(Reply::Device(self.identify())),
            Op::ListFunctions => with_reply(Reply::Functions(self.infos.clone())),
            Op::ListPrograms => {
                // The listing a client that predates generations can decode.
                let mut list = self.programs.list();
                list.iter_mut().for_each(|p| p.generation = None);
                with_reply(Reply::Programs(list))
            }
            Op::ListProgramsWithGenerations => with_reply(Reply::Programs(self.programs.list())),
            Op::LoadProgram {
                pind,
                ptype,
                total_size_bytes,
                offset,
                data,
                entry,
            } => {
                let start = Instant::now();
                let chunk = LoadChunk {
                    pind: *pind,
                    ptype: *ptype,
                    total_size_bytes: *total_size_bytes,
                    offset: *offset,
                    data,
                    entry: entry.as_deref(),
                };
                let r = self.programs.load_chunk(client, chunk);
                let mut c = match r {
                    Ok(received) => ok(u64::from(received)),
                    Err(e) => fail_with(&e),
                };
                c.timing.transfer_ns = ns(start.elapsed());
                c
            }
            Op::UnloadProgram { pind, generation } => self.unload(client, *pind, *generation),
            Op::ActivateProgram { pind, engine } => match self.programs.activate(*pind, *engine) {
                Ok(t) => {
                    let mut c = ok(0);
                    c.timing.prepare_ns = ns(t.verify + t.compile);
                    c
                }
                Err(e) => fail_with(&e),
            },
            Op::PersistProgram { pind, name } => {
                done(self.programs.persist_as(client, *pind, name))
            }
            Op::DeactivateProgram { pind } => done(self.programs.deactivate(client, *pind)),
            Op::RangeSetCreate { ranges } => match self.rangesets.create(&self.slm, client, ranges)
            {
                Ok(rsid) => ok(u64::from(rsid.0)),
                Err(e) => fail_with(&e),
            },
            Op::RangeSetDelete { rsid } => done(self.rangesets.delete(client, *rsid)),
            Op::ClearState { offset, len } => done(self.state.clear(*offset, *len)),
            Op::Flush => self.flush(),
            Op::MemAlloc { size_bytes } => match self.slm.alloc(client, *size_bytes) {
                Ok(h) => ok(u64::from(h.0)),
                Err(e) => fail_with(&e),
            },
            Op::MemFree { handle } => done(self.slm.free(client, *handle)),
            _ => self.transfer(client, &cmd.op),
        }
    }

    fn identify(&self) -> DeviceInfo {
        DeviceInfo {
            version: env!("CARGO_PKG_VERSION").to_string(),
            abi_version: ABI_VERSION,
            nvm_size_bytes: self.nvm.size(),
            slm_size_bytes: self.slm.size_bytes(),
            slm_free_bytes: self.slm.free_bytes(),
            state_size_bytes: self.state.size_bytes(),
            engines: self.engines,
            program_slots: PROGRAM_SLOTS_COUNT,
            programs_active_max: PROGRAMS_ACTIVE_MAX,
            range_sets_max: RANGE_SETS_MAX,
            ranges_per_set_max: RANGES_PER_SET_MAX as u16,
            params_size_max: PARAMS_SIZE_MAX as u32,
            program_size_max: PROGRAM_SIZE_MAX,
            load_chunk_size_max: LOAD_CHUNK_SIZE_MAX,
            mem_io_size_max: MEM_IO_SIZE_MAX,
            file_io_size_max: FILE_IO_SIZE_MAX,
            queue_depth_max: QUEUE_DEPTH_MAX,
            fuel_default: csx_ebpf::limits::FUEL_DEFAULT,
            jit: self.config.jit.unwrap_or(true),
        }
    }

    fn flush(&self) -> Completion {
        let start = Instant::now();
        let mut c = match (self.files.flush(), self.state.save()) {
            (Ok(()), Ok(())) => ok(0),
            (Err(e), _) => fail_with(&e),
            (_, Err(e)) => fail_with(&e),
        };
        c.timing.transfer_ns = ns(start.elapsed());
        c
    }
}

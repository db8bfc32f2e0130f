//! Concurrent submitters: threads sharing one client, and threads each with their own
//! client, all submitting many executions across several engines. Every command must
//! complete exactly once, to the thread that sent it, with its own r0.

use std::collections::HashSet;
use std::sync::Mutex;

use csx_host::proto::{CommandId, EngineKind};
use csx_host::ExecuteRequest;

use crate::programs::{load, MIX};
use crate::Fixture;

const THREADS: u64 = 6;
const PER_THREAD: u64 = 400;
/// Commands each thread keeps in flight.
const BATCH: usize = 16;

fn expected(thread: u64, i: u64) -> u64 {
    thread * 1_000_000 * 1000003 + i * 1000003 + thread
}

/// Submits batches of executions and waits for each by id; returns the ids used.
fn hammer(
    dev: &csx_host::Device,
    pind: csx_host::proto::ProgramIndex,
    thread: u64,
) -> Vec<CommandId> {
    let client = dev.client();
    let mut ids = Vec::new();
    let mut i = 0;
    while i < PER_THREAD {
        let mut batch = Vec::new();
        while batch.len() < BATCH && i < PER_THREAD {
            let req = ExecuteRequest::new(pind).cparams(thread * 1_000_000 + i, thread);
            batch.push((client.submit_private(req.to_op()).unwrap(), i));
            i += 1;
        }
        // Wait in reverse order: completions arrive in any order anyway.
        for (id, n) in batch.into_iter().rev() {
            let c = client.wait(id, None).unwrap().expect("completes");
            assert_eq!(c.id, id);
            assert_eq!(c.value, expected(thread, n), "thread {thread} command {n}");
            ids.push(id);
        }
    }
    ids
}

/// Many threads, one client (one queue pair): the leader/follower reaping hands every
/// completion to its own thread.
fn shared_client(f: &mut Fixture) {
    let pind = load(f, MIX, EngineKind::Jit);
    let dev = f.dev();
    let all = Mutex::new(HashSet::new());
    std::thread::scope(|s| {
        for t in 0..THREADS {
            let all = &all;
            s.spawn(move || {
                let ids = hammer(dev, pind, t);
                let mut all = all.lock().unwrap();
                for id in ids {
                    assert!(all.insert(id), "{id} completed twice");
                }
            });
        }
    });
    assert_eq!(all.into_inner().unwrap().len() as u64, THREADS * PER_THREAD);
    assert_eq!(dev.client().outstanding(), 0);
    assert_eq!(dev.client().stray_completions(), 0);
    let listed = dev.programs().unwrap();
    assert_eq!(
        listed[0].executions,
        THREADS * PER_THREAD,
        "the device counted every run"
    );
}

/// Many threads, a client each (several queue pairs on one device).
fn client_per_thread(f: &mut Fixture) {
    let pind = load(f, MIX, EngineKind::Interpreter);
    std::thread::scope(|s| {
        for t in 0..THREADS {
            let dev = f.open();
            s.spawn(move || {
                let ids = hammer(&dev, pind, t);
                assert_eq!(ids.iter().collect::<HashSet<_>>().len() as u64, PER_THREAD);
                assert_eq!(dev.client().stray_completions(), 0);
                dev.close().unwrap();
            });
        }
    });
}

/// Threads waiting by id and a thread reaping "any" share one client: the reaper never
/// takes a completion somebody waits for, and nothing is lost.
fn waiters_and_reaper(f: &mut Fixture) {
    let pind = load(f, MIX, EngineKind::Jit);
    let dev = f.dev();
    let client = dev.client();
    std::thread::scope(|s| {
        for t in 0..3 {
            s.spawn(move || hammer(dev, pind, t));
        }
        s.spawn(move || {
            // Rounds of 50 submissions, each collected with `reap` in any order.
            for round in 0..6u64 {
                let mut want = HashSet::new();
                for i in 0..50u64 {
                    let c1 = 7_000_000 + round * 50 + i;
                    client
                        .submit_wait(ExecuteRequest::new(pind).cparams(c1, 9).to_op())
                        .unwrap();
                    want.insert(c1 * 1000003 + 9);
                }
                while !want.is_empty() {
                    let c = client
                        .reap(None)
                        .unwrap()
                        .expect("our commands are outstanding");
                    assert!(want.remove(&c.value), "unexpected r0 {}", c.value);
                }
            }
        });
    });
    assert_eq!(client.outstanding(), 0);
}

crate::backend_tests!(shared_client, client_per_thread, waiters_and_reaper);

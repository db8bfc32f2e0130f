//! A session that runs a persistent program by its name never runs a program another
//! client put in its slot between the lookup and the run: every run names the program
//! generation it looked up, and a refusal looks the name up once more.

use csx_host::proto::{EngineKind, ProgramIndex, ProgramType};
use csx_host::session::{Session, SessionError};
use csx_host::{Device, ExecuteRequest};

use crate::Fixture;

const IMPOSTOR: i32 = 0x5bad;

/// A raw program that returns `r0`.
fn returns(r0: i32) -> Vec<u8> {
    let mut image = vec![0xb7, 0, 0, 0];
    image.extend_from_slice(&r0.to_le_bytes());
    image.extend_from_slice(&[0x95, 0, 0, 0, 0, 0, 0, 0]);
    image
}

/// Loads a program returning `r0` into `slot` (a free one when `None`), active.
fn load(dev: &Device, slot: Option<ProgramIndex>, r0: i32) -> ProgramIndex {
    let image = returns(r0);
    let pind = match slot {
        Some(s) => {
            dev.load_program(s, ProgramType::Raw, &image, None).unwrap();
            s
        }
        None => dev
            .load_program_any_slot(ProgramType::Raw, &image, None)
            .unwrap(),
    };
    dev.activate(pind, EngineKind::Interpreter).unwrap();
    pind
}

fn a_persistent_program_run_by_name_is_never_another_clients(f: &mut Fixture) {
    let b = f.open();
    let slot = load(&b, None, 11);
    b.persist_program(slot, "count").unwrap();

    let mut a = Session::new(f.dev());
    let pind = a.adopt_persistent("count").unwrap();
    assert_eq!(pind, slot);
    assert_eq!(a.execute(&ExecuteRequest::new(pind)).unwrap().r0, 11);

    // Between A's lookup and its next run, B puts its own program in the slot and keeps
    // "count" in another one.
    b.unload(slot).unwrap();
    load(&b, Some(slot), IMPOSTOR);
    let moved = load(&b, None, 12);
    b.persist_program(moved, "count").unwrap();
    let r0 = a.execute(&ExecuteRequest::new(pind)).unwrap().r0;
    assert_ne!(r0, IMPOSTOR as u64, "{}: A ran B's program", f.backend.name);
    assert_eq!(r0, 12, "{}", f.backend.name);

    // Gone everywhere: a typed error naming the program, and nothing ran.
    b.unload(moved).unwrap();
    match a.execute(&ExecuteRequest::new(pind)) {
        Err(SessionError::NotLoaded { program }) => assert_eq!(program, "count"),
        other => panic!("{}: {other:?}", f.backend.name),
    }
    a.close().unwrap();
    b.unload(slot).unwrap();
    b.close().unwrap();
}

/// A program adopted by its slot (loaded by someone else) names the generation the
/// slot held when it was adopted: a program put there later is refused, not run.
fn an_adopted_slot_never_runs_a_program_put_there_later(f: &mut Fixture) {
    let b = f.open();
    let slot = load(&b, None, 11);
    b.persist_program(slot, "scan").unwrap();
    let mut a = Session::new(f.dev());
    a.adopt("scan", slot);
    assert_eq!(a.execute(&ExecuteRequest::new(slot)).unwrap().r0, 11);
    b.unload(slot).unwrap();
    load(&b, Some(slot), IMPOSTOR);
    match a.execute(&ExecuteRequest::new(slot)) {
        Err(SessionError::Device {
            what,
            source: csx_host::CallError::ProgramChanged(_),
        }) => assert!(what.contains("scan"), "{what}"),
        other => panic!("{}: A ran B's program: {other:?}", f.backend.name),
    }
    a.close().unwrap();
    b.unload(slot).unwrap();
    b.close().unwrap();
}

crate::backend_tests!(
    a_persistent_program_run_by_name_is_never_another_clients,
    an_adopted_slot_never_runs_a_program_put_there_later
);

//! An unload that names the program generation it looked up never removes a program
//! another client put in the slot between the lookup and the unload: the device
//! refuses it with a typed error naming the slot and both generations, and the other
//! program stays loaded, active and runnable.

use csx_host::proto::{EngineKind, ProgramIndex, ProgramType};
use csx_host::session::{Session, SessionError};
use csx_host::{CallError, Device, ExecuteRequest};

use crate::Fixture;

const REPLACEMENT: u8 = 0x5b;

/// Loads a raw program returning `r0` into `slot`, activates it and keeps it as `name`.
fn keep(dev: &Device, slot: ProgramIndex, r0: u8, name: &str) {
    let image = [0xb7, 0, 0, 0, r0, 0, 0, 0, 0x95, 0, 0, 0, 0, 0, 0, 0];
    dev.load_program(slot, ProgramType::Raw, &image, None)
        .unwrap();
    dev.activate(slot, EngineKind::Interpreter).unwrap();
    dev.persist_program(slot, name).unwrap();
}

/// The generation slot `pind` holds, as listed.
fn generation(dev: &Device, pind: ProgramIndex) -> u64 {
    let listed = dev.programs_with_generations().unwrap();
    let found = listed.into_iter().find(|p| p.pind == pind);
    found.and_then(|p| p.generation).expect("an occupied slot")
}

/// B replaces the program in `slot` with one returning [`REPLACEMENT`], kept as `name`.
fn replace(b: &Device, slot: ProgramIndex, name: &str) -> u64 {
    b.unload(slot).unwrap();
    keep(b, slot, REPLACEMENT, name);
    generation(b, slot)
}

/// The replacement is still in `slot`, active, and runs.
fn assert_replacement_stays(f: &Fixture, dev: &Device, slot: ProgramIndex) {
    let r0 = dev.execute(&ExecuteRequest::new(slot)).unwrap().r0;
    assert_eq!(
        r0,
        u64::from(REPLACEMENT),
        "{}: the replacement is gone",
        f.backend.name
    );
}

fn an_unload_naming_a_looked_up_generation_spares_a_replacement(f: &mut Fixture) {
    let (a, b) = (f.open(), f.open());
    let slot = ProgramIndex(4);
    keep(&b, slot, 1, "shared");
    let looked_up = generation(&a, slot);
    let now = replace(&b, slot, "shared");
    match a.unload_generation(slot, Some(looked_up)) {
        Err(CallError::ProgramChanged(e)) => {
            let text = e.to_string();
            for named in ["slot 4", &looked_up.to_string(), &now.to_string()] {
                assert!(
                    text.contains(named),
                    "{}: {named} in {text}",
                    f.backend.name
                );
            }
        }
        other => panic!("{}: the unload was not refused: {other:?}", f.backend.name),
    }
    assert_replacement_stays(f, &a, slot);
    a.unload_generation(slot, Some(now)).unwrap();
    assert!(a.programs().unwrap().is_empty(), "{}", f.backend.name);
    a.close().unwrap();
    b.close().unwrap();
}

fn a_session_unloading_an_adopted_slot_spares_a_replacement(f: &mut Fixture) {
    let b = f.open();
    let slot = ProgramIndex(6);
    keep(&b, slot, 1, "scan");
    let mut a = Session::new(f.dev());
    a.adopt_persistent("scan").unwrap();
    replace(&b, slot, "scan");
    match a.unload_slot(slot, None) {
        Err(SessionError::Device {
            what,
            source: CallError::ProgramChanged(_),
        }) => assert!(what.contains("scan"), "{what}"),
        other => panic!("{}: A unloaded B's program: {other:?}", f.backend.name),
    }
    assert_replacement_stays(f, f.dev(), slot);
    // By name, a fresh lookup: the program kept as "scan" now.
    assert_eq!(a.unload_persistent("scan").unwrap(), slot);
    assert!(f.dev().programs().unwrap().is_empty(), "{}", f.backend.name);
    a.close().unwrap();
    b.close().unwrap();
}

crate::backend_tests!(
    an_unload_naming_a_looked_up_generation_spares_a_replacement,
    a_session_unloading_an_adopted_slot_spares_a_replacement
);

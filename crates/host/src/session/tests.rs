//! The session on an embedded device: what it holds is released on close, on drop after
//! an error and while a panic unwinds; its meter adds up the completions.

use std::panic::{catch_unwind, AssertUnwindSafe};

use csx_proto::{EngineKind, ProgramType};

use super::*;
use crate::transport::inproc::DeviceConfig;

/// An embedded device whose commands have modelled times (the lambda-io profile).
fn device(dir: &std::path::Path) -> Device {
    let config = DeviceConfig {
        perf: csx_device::perf::PerfModel::lambda_io(),
        ..Default::default()
    };
    Device::init(dir, config).unwrap()
}

/// A raw eBPF program: `r0 = value; exit`.
fn returns(value: i32) -> Vec<u8> {
    let mut image = vec![0xb7, 0x00, 0, 0];
    image.extend_from_slice(&value.to_le_bytes());
    image.extend_from_slice(&[0x95, 0, 0, 0, 0, 0, 0, 0]);
    image
}

/// A raw eBPF program that loops until its fuel runs out.
fn spins() -> Vec<u8> {
    let mut image = vec![0x05, 0x00];
    image.extend_from_slice(&(-1i16).to_le_bytes());
    image.extend_from_slice(&[0, 0, 0, 0]);
    image.extend_from_slice(&[0x95, 0, 0, 0, 0, 0, 0, 0]);
    image
}

/// Free device memory and the occupied program slots.
fn footprint(dev: &Device) -> (u64, usize) {
    let info = dev.identify().unwrap();
    (info.slm_free_bytes, dev.programs().unwrap().len())
}

/// Loads "seven" (`returns(7)`) into `s`, activated.
fn load_seven(s: &mut Session) -> ProgramIndex {
    s.load(
        "seven",
        ProgramType::Raw,
        &returns(7),
        EngineKind::Interpreter,
    )
    .unwrap()
}

/// Loads a program and allocates and stages memory in `s`.
fn hold_things(s: &mut Session) -> (ProgramIndex, MemHandle) {
    let pind = load_seven(s);
    let h = s.alloc(1 << 16).unwrap();
    s.copy_file("/data", 0, 4096, h, 0).unwrap();
    (pind, h)
}

#[test]
fn close_releases_programs_and_memory_and_reports_the_meter() {
    let tmp = tempfile::tempdir().unwrap();
    let dev = device(tmp.path());
    dev.put_bytes("/data", &[1u8; 4096]).unwrap();
    let before = footprint(&dev);
    let mut s = Session::new(&dev);
    let (pind, h) = hold_things(&mut s);
    assert_eq!(footprint(&dev).1, before.1 + 1);
    assert!(footprint(&dev).0 < before.0);
    let meter = s.close().unwrap();
    assert_eq!(footprint(&dev), before);
    assert_eq!(meter.media_bytes, 4096);
    // The slot and the handle are gone, not merely unused.
    assert!(dev.free(h).is_err());
    assert!(dev.execute(&ExecuteRequest::new(pind)).is_err());
}

#[test]
fn an_error_returned_past_the_session_releases_what_it_held() {
    let tmp = tempfile::tempdir().unwrap();
    let dev = device(tmp.path());
    dev.put_bytes("/data", &[1u8; 4096]).unwrap();
    let before = footprint(&dev);
    let work = || -> Result<(), SessionError> {
        let mut s = Session::new(&dev);
        hold_things(&mut s);
        // A copy from a file that is too short: the error leaves by `?`.
        let h = s.alloc(8192)?;
        s.copy_file("/data", 0, 8192, h, 0)?;
        unreachable!("the copy fails")
    };
    let e = work().unwrap_err();
    // The device refuses the copy, naming the file and its length.
    assert!(matches!(e, SessionError::Device { .. }), "{e}");
    assert!(e.to_string().contains("/data has 4096 of 8192"), "{e}");
    assert_eq!(footprint(&dev), before);

    // A trap is an error naming the program, and releases the same way.
    let work = || -> Result<(), SessionError> {
        let mut s = Session::new(&dev);
        hold_things(&mut s);
        let spin = s.load("spin", ProgramType::Raw, &spins(), EngineKind::Interpreter)?;
        s.execute(&ExecuteRequest::new(spin).fuel(1000))?;
        unreachable!("the program runs out of fuel")
    };
    let e = work().unwrap_err();
    assert!(
        matches!(&e, SessionError::Trap { program, .. } if program == "spin"),
        "{e}"
    );
    assert_eq!(footprint(&dev), before);
}

#[test]
fn a_panic_unwinding_past_the_session_releases_what_it_held() {
    let tmp = tempfile::tempdir().unwrap();
    let dev = device(tmp.path());
    dev.put_bytes("/data", &[1u8; 4096]).unwrap();
    let before = footprint(&dev);
    let result = catch_unwind(AssertUnwindSafe(|| {
        let mut s = Session::new(&dev);
        hold_things(&mut s);
        // Copies still in flight are waited for before their memory is freed.
        let h = s.alloc(4096).unwrap();
        let _pending = s.start_copy_file("/data", 0, 4096, h, 0).unwrap();
        panic!("the caller's bug");
    }));
    assert!(result.is_err());
    assert_eq!(footprint(&dev), before);
}

#[test]
fn an_adopted_program_is_run_but_never_unloaded() {
    let tmp = tempfile::tempdir().unwrap();
    let dev = device(tmp.path());
    let pind = dev
        .load_program_any_slot(ProgramType::Raw, &returns(3), None)
        .unwrap();
    dev.activate(pind, EngineKind::Interpreter).unwrap();
    let mut s = Session::new(&dev);
    s.adopt("three", pind);
    assert_eq!(s.execute_r0(&ExecuteRequest::new(pind)).unwrap(), 3);
    s.close().unwrap();
    assert_eq!(dev.execute(&ExecuteRequest::new(pind)).unwrap().r0, 3);
}

#[test]
fn the_meter_sums_the_completions() {
    let tmp = tempfile::tempdir().unwrap();
    let dev = device(tmp.path());
    dev.put_bytes("/data", &[1u8; 4096]).unwrap();
    let mut s = Session::new(&dev);
    let engines = s.engines().unwrap();
    let image = returns(7);
    let seven = s
        .load("seven", ProgramType::Raw, &image, EngineKind::Interpreter)
        .unwrap();
    let loaded = s.meter;
    // Loading: one Load Program (a small image) and one Activate, as set-up time.
    assert_eq!(loaded.commands, 2);
    assert_eq!(loaded.bytes_from_host, image.len() as u64);
    assert!(loaded.setup_ns > 0);
    assert_eq!(loaded.modelled_ns, 0);

    let h = s.alloc(8192).unwrap();
    s.write(h, 4096, &[9u8; 100]).unwrap();
    s.copy_file("/data", 0, 4096, h, 0).unwrap();
    let back = s.read(h, 4000, 196).unwrap();
    assert_eq!(&back[..96], &[1u8; 96][..]);
    assert_eq!(&back[96..], &[9u8; 100][..]);
    let staged = s.meter.since(&loaded);
    assert_eq!(staged.commands, 4);
    assert_eq!(staged.media_bytes, 4096);
    assert_eq!(staged.bytes_from_host, 100);
    assert_eq!(staged.bytes_to_host, 196);
    assert!(staged.modelled_ns > 0);
    assert!(staged.setup_ns > 0);

    // A batch larger than the engines: its runs spread over them, each on its own 64
    // bytes (runs at once may not share a window's bytes).
    let at = s.meter;
    let runs: Vec<ExecuteRequest> = (0..2 * engines + 1)
        .map(|i| ExecuteRequest::new(seven).window(h, i * 64, 64))
        .collect();
    let done = s.execute_all(&runs).unwrap();
    let d = s.meter.since(&at);
    let ns: Vec<u64> = done.iter().map(|x| x.timing.modelled_ns).collect();
    let longest = *ns.iter().max().unwrap();
    let sum: u64 = ns.iter().sum();
    assert!(longest > 0);
    assert_eq!(d.modelled_ns, longest.max(sum.div_ceil(engines)));
    assert_eq!(d.executions, runs.len() as u64);
    assert_eq!(d.commands, runs.len() as u64);
    assert_eq!(d.fuel, done.iter().map(|x| x.fuel_used).sum::<u64>());
    assert_eq!(
        d.execute_ns,
        done.iter().map(|x| x.timing.execute_ns).sum::<u64>()
    );
    assert_eq!(
        d.execute_span_ns,
        done.iter().map(|x| x.timing.execute_ns).max().unwrap()
    );
    assert!(done.iter().all(|x| x.r0 == 7));

    // A negative r0 where a count is expected names the program and the code.
    let failing = s
        .load(
            "einval",
            ProgramType::Raw,
            &returns(-22),
            EngineKind::Interpreter,
        )
        .unwrap();
    let e = s
        .execute_all_r0(&[ExecuteRequest::new(seven), ExecuteRequest::new(failing)])
        .unwrap_err();
    assert!(
        matches!(&e, SessionError::Failed { program, r0: -22, code: "CSX_EINVAL", .. } if program == "einval"),
        "{e}"
    );
    // ... and is an answer to execute.
    assert_eq!(
        s.execute(&ExecuteRequest::new(failing))
            .unwrap()
            .r0_signed(),
        -22
    );

    let total = s.meter;
    let closed = s.close().unwrap();
    // Closing frees one allocation and unloads two programs.
    assert_eq!(closed.commands, total.commands + 3);
    assert_eq!(closed.modelled_ns, total.modelled_ns);
}

#[test]
fn params_name_their_fields_at_their_offsets() {
    let p = Params::new().u32("count", 2).u32("pad", 0).u64("lo", 5);
    assert_eq!(p.fields(), &[("count", 0, 4), ("pad", 4, 4), ("lo", 8, 8)]);
    assert_eq!(
        p.into_bytes(),
        [2, 0, 0, 0, 0, 0, 0, 0, 5, 0, 0, 0, 0, 0, 0, 0]
    );
}

#[test]
fn kept_allocations_are_reused_freed_to_make_room_and_released_at_the_end() {
    let tmp = tempfile::tempdir().unwrap();
    let config = DeviceConfig {
        slm_size_bytes: 1 << 20,
        ..Default::default()
    };
    let dev = Device::init(tmp.path(), config).unwrap();
    let before = footprint(&dev);
    let mut s = Session::new(&dev);
    let (small, n) = s.take(1 << 16).unwrap();
    assert_eq!(n, 1 << 16);
    s.keep(small, n);
    let (large, n) = s.take(1 << 18).unwrap();
    s.keep(large, n);
    assert_eq!(s.idle(), (2, (1 << 16) + (1 << 18)));
    // The smallest kept allocation that fits, not a new one.
    assert_eq!(s.take(1000).unwrap(), (small, 1 << 16));
    s.keep(small, 1 << 16);
    assert_eq!(s.take((1 << 16) + 1).unwrap(), (large, 1 << 18));
    s.keep(large, 1 << 18);
    // Keeping a handle twice, or one the session does not hold, keeps nothing more.
    s.keep(large, 1 << 18);
    s.keep(MemHandle(9999), 1 << 18);
    assert_eq!(s.idle().0, 2);
    // The whole memory fits only once the kept allocations are freed.
    let (whole, n) = s.take(1 << 20).unwrap();
    assert_eq!(n, 1 << 20);
    assert_eq!(s.idle(), (0, 0));
    assert!(dev.free(small).is_err() && dev.free(large).is_err());
    s.keep(whole, n);
    // Too large even with nothing kept: the device's refusal, after freeing what was kept.
    let err = s.take(1 << 21).unwrap_err();
    assert!(matches!(err, SessionError::Device { .. }), "{err}");
    assert_eq!(s.idle(), (0, 0));
    let (h, n) = s.take(4096).unwrap();
    s.keep(h, n);
    drop(s);
    assert_eq!(footprint(&dev), before);
}

#[test]
fn a_program_loaded_into_a_named_slot_is_held_left_loaded_or_unloaded_on_request() {
    let tmp = tempfile::tempdir().unwrap();
    let dev = device(tmp.path());
    let before = footprint(&dev);
    let (a, b) = (ProgramIndex(5), ProgramIndex(6));
    let mut s = Session::new(&dev);
    s.load_program_at("five", None, a, ProgramType::Raw, &returns(5))
        .unwrap();
    s.load_program_at("six", None, b, ProgramType::Raw, &returns(6))
        .unwrap();
    // An occupied slot is refused, naming it; the session still holds one program there.
    let e = s
        .load_program_at("again", None, a, ProgramType::Raw, &returns(1))
        .unwrap_err();
    assert!(e.to_string().contains("into slot 5"), "{e}");
    assert_eq!(s.program_name(a), "five");
    s.activate(a, EngineKind::Interpreter).unwrap();
    assert_eq!(s.execute(&ExecuteRequest::new(a)).unwrap().r0, 5);
    // Slot 6 is left loaded past the session; slot 5 goes with it.
    s.leave_loaded(b);
    s.close().unwrap();
    let slots: Vec<_> = dev.programs().unwrap().iter().map(|p| p.pind).collect();
    assert_eq!(slots, vec![b]);
    // unload_slot empties a slot the session did not load.
    let mut s = Session::new(&dev);
    s.unload_slot(b, None).unwrap();
    assert_eq!(s.close().unwrap().commands, 1);
    assert_eq!(footprint(&dev), before);
}

#[test]
fn a_submitted_execution_is_waited_for_outside_the_session_or_aborted() {
    let tmp = tempfile::tempdir().unwrap();
    let dev = device(tmp.path());
    let mut s = Session::new(&dev);
    let seven = load_seven(&mut s);
    // Waited for without the session, then metered by it.
    let run = s.submit_execute(&ExecuteRequest::new(seven)).unwrap();
    let result = run.wait_on(&dev);
    let before = s.meter;
    assert_eq!(s.finish_submitted(run, result).unwrap().r0, 7);
    assert_eq!(s.meter.since(&before).executions, 1);

    // A run that would spin for its whole time limit stops when aborted.
    let spin = s
        .load("spin", ProgramType::Raw, &spins(), EngineKind::Interpreter)
        .unwrap();
    let long = ExecuteRequest::new(spin)
        .fuel(csx_proto::limits::FUEL_MAX)
        .time_limit_ms(600_000);
    let run = s.submit_execute(&long).unwrap();
    assert!(s.abort(&run).unwrap(), "the run was in flight");
    let e = s.wait_submitted(run).unwrap_err();
    assert!(
        matches!(&e, SessionError::Device { source: CallError::Aborted(_), what } if what.contains("spin")),
        "{e}"
    );
    // Forgotten submissions are waited for before the session frees its memory.
    let _forgotten = s.submit_execute(&ExecuteRequest::new(seven)).unwrap();
    s.close().unwrap();
}

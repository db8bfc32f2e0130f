//! λ-IO's λ-read on array files (`csx_array::lambda::read_lambda`).
//!
//! Method: a λ that echoes its request (cparam1, then the input bytes) runs over a file
//! placed on one member and over a file striped across three; concatenated in the order
//! the sink sees them, the outputs must rebuild the file byte for byte (so every request
//! ran over the right member's bytes and the order is the file's), in host, device and
//! auto modes, with requests that straddle stripes and several in flight per member.
//! With records, cparam1 must be the record index in the array file. Members served over
//! tcp run auto requests on their devices. Then the failures: an object that does not
//! load and a λ that traps on one member's bytes, each a typed error naming the member.

use csx_array::lambda::{read_lambda, ArrayLambdaOptions, LambdaImage, Request};
use csx_array::{Array, ArrayError, LinkModel, Placement};
use csx_lambda::{LambdaArgs, LambdaOptions, LambdaOutput, Mode, Ran};
use csx_testkit::tools;

use crate::common::{bytes, embedded, Daemon};

/// Output: cparam1 (8 bytes), then the input.
const ECHO: &str = r#"#include "csx.h"
CSX_PROGRAM(echo)
{
    unsigned char *out = csx_window_addr(args, 1);
    if (!out)
        return CSX_EINVAL;
    if (csx_window_len(args, 1) < win0_len + 8)
        return CSX_ENOSPC;
    *(csx_u64 *)out = args->cparam1;
    const unsigned char *in = win0;
    for (csx_u64 i = 0; i < win0_len; i++)
        out[8 + i] = in[i];
    return win0_len + 8;
}
"#;

/// Traps (reads past its input) when the input starts with 0xFF.
const TRAPS_ON_FF: &str = r#"#include "csx.h"
CSX_PROGRAM(traps_on_ff)
{
    const unsigned char *in = win0;
    if (win0_len > 0 && in[0] == 0xFF)
        return *(const csx_u64 *)(in + win0_len);
    return 0;
}
"#;

fn compile(source: &str) -> Vec<u8> {
    tools::compile_program_source(source)
}

/// Runs `image` over `path`; the requests and outputs in the order the sink saw them.
fn run(
    array: &Array,
    path: &str,
    image: &[u8],
    args: &LambdaArgs,
    opts: &ArrayLambdaOptions,
) -> Result<Vec<(Request, LambdaOutput)>, ArrayError> {
    let mut seen = Vec::new();
    let lambda = LambdaImage {
        name: "test",
        image,
        entry: None,
    };
    let report = read_lambda(array, path, lambda, args, opts, &mut |r, o| {
        seen.push((*r, o.clone()));
        Ok(())
    })?;
    assert_eq!(report.requests, seen.len() as u64);
    assert_eq!(
        report.output_bytes,
        seen.iter().map(|(_, o)| o.output.len() as u64).sum::<u64>()
    );
    let per_member: u64 = report
        .members
        .iter()
        .map(|(_, a)| a.requests_host + a.requests_device + a.requests_profiled)
        .sum();
    assert_eq!(per_member, report.requests);
    Ok(seen)
}

/// The sink saw every request once, in file order, and the echoed inputs are the file.
fn check_echo(seen: &[(Request, LambdaOutput)], file: &[u8], record: Option<u64>) {
    let mut rebuilt = Vec::with_capacity(file.len());
    for (i, (r, o)) in seen.iter().enumerate() {
        assert_eq!(r.index, i as u64, "out of order");
        assert_eq!(r.file_offset, rebuilt.len() as u64, "{r:?}");
        assert_eq!(o.output.len() as u64, r.len + 8, "{r:?}");
        let cparam1 = u64::from_le_bytes(o.output[..8].try_into().unwrap());
        assert_eq!(
            cparam1,
            record.map_or(0, |rec| r.file_offset / rec),
            "{r:?}"
        );
        rebuilt.extend_from_slice(&o.output[8..]);
    }
    assert_eq!(rebuilt.len(), file.len());
    assert!(rebuilt == file, "the echoed requests are not the file");
}

fn echo_args(chunk: u64) -> LambdaArgs {
    LambdaArgs {
        output_size_bytes: Some(chunk + 8),
        ..LambdaArgs::default()
    }
}

fn opts(chunk: u64, mode: Mode, threads: u32) -> ArrayLambdaOptions {
    ArrayLambdaOptions {
        chunk,
        mode,
        threads,
        record: None,
        lambda: LambdaOptions {
            period: 6,
            profile_len: 2,
            ..LambdaOptions::default()
        },
        stop: Default::default(),
    }
}

/// Never returns: only a stop (or the device's time limit) ends it.
const SPIN: &str = r#"#include "csx.h"
CSX_PROGRAM(spin)
{
    volatile csx_u64 i = 0;
    for (;;)
        i++;
    return i;
}
"#;

/// The stop flag (Ctrl-C in `csx read`) aborts the runs on every member at once, device
/// runs by an Abort (the members' time limit, a minute, would end them with another
/// error): the read fails with `ArrayError::Aborted` naming every member whose runs were
/// aborted, no member keeps a program or memory, and the array serves the next read.
#[test]
fn stopping_a_lambda_read_aborts_it_on_every_member() {
    let dir = tempfile::tempdir().unwrap();
    let array = Array::init_embedded(
        &dir.path().join("arr"),
        3,
        csx_host::transport::inproc::DeviceConfig {
            time_limit_ms: Some(60_000),
            ..crate::common::member_config()
        },
        LinkModel::default(),
    )
    .unwrap();
    let data = bytes(3 * 4096 * 2, 21);
    array
        .put_bytes("/s", &data, Placement::Striped { stripe_bytes: 4096 })
        .unwrap();
    let spin = compile(SPIN);
    let free_before: Vec<u64> = array
        .members()
        .iter()
        .map(|m| m.device.identify().unwrap().slm_free_bytes)
        .collect();
    // Fuel for an hour of spinning: only the stop (or the time limit) ends a run.
    let args = LambdaArgs {
        fuel: Some(csx_host::proto::limits::FUEL_MAX),
        ..LambdaArgs::default()
    };
    let loaded_everywhere = || {
        array.members().iter().all(|m| {
            m.device
                .programs()
                .unwrap()
                .iter()
                .any(|p| p.name == "spin")
        })
    };
    for mode in [Mode::Device, Mode::Host] {
        // The stop comes once the λ is loaded on every member and its runs had time to
        // start; a stop before any run started aborts nothing, so the wait doubles.
        let mut wait_ms = 200;
        loop {
            let o = opts(4096, mode, 2);
            let stop = std::sync::Arc::clone(&o.stop);
            let e = std::thread::scope(|s| {
                s.spawn(|| {
                    while !loaded_everywhere() {
                        std::thread::sleep(std::time::Duration::from_millis(5));
                    }
                    std::thread::sleep(std::time::Duration::from_millis(wait_ms));
                    stop.store(true, std::sync::atomic::Ordering::SeqCst);
                });
                run(&array, "/s", &spin, &args, &o).unwrap_err()
            });
            let ArrayError::Aborted { members, .. } = &e else {
                panic!("{mode:?}: {e}");
            };
            assert!(e.to_string().contains("aborted"), "{e}");
            for (m, member) in array.members().iter().enumerate() {
                let dev = &member.device;
                assert!(
                    dev.programs().unwrap().iter().all(|p| p.name != "spin"),
                    "{mode:?}: member {m} still has the λ loaded"
                );
                assert_eq!(
                    dev.identify().unwrap().slm_free_bytes,
                    free_before[m],
                    "{mode:?}: member {m} still holds memory"
                );
            }
            if members == &[0, 1, 2] {
                break;
            }
            assert!(
                wait_ms < 5000,
                "{mode:?}: runs never aborted on every member: {e}"
            );
            wait_ms *= 2;
        }
    }
    // Nothing is left running: the next read over the same members is whole.
    let seen = run(
        &array,
        "/s",
        &compile(ECHO),
        &echo_args(4096),
        &opts(4096, Mode::Device, 1),
    )
    .unwrap();
    check_echo(&seen, &data, None);
}

#[test]
fn lambda_read_over_placed_and_striped_files_is_the_file_in_order() {
    let (_d, array) = embedded(3);
    let echo = compile(ECHO);
    let data = bytes(4096 * 23 + 1000, 12);
    array
        .put_bytes("/placed", &data, Placement::Member(1))
        .unwrap();
    array
        .put_bytes("/striped", &data, Placement::Striped { stripe_bytes: 4096 })
        .unwrap();
    for mode in [Mode::Host, Mode::Device, Mode::Auto] {
        // 6000-byte requests: cut at every stripe boundary of the striped file.
        for (chunk, threads) in [(6000u64, 1u32), (4096, 3), (1 << 20, 2)] {
            let o = opts(chunk, mode, threads);
            let placed = run(&array, "/placed", &echo, &echo_args(chunk), &o).unwrap();
            assert!(placed.iter().all(|(r, _)| r.member == 1));
            check_echo(&placed, &data, None);
            let striped = run(&array, "/striped", &echo, &echo_args(chunk), &o).unwrap();
            let mut members: Vec<u16> = striped.iter().map(|(r, _)| r.member).collect();
            members.dedup();
            assert!(members.len() > 3, "the requests alternate between members");
            for (r, out) in &striped {
                assert!(
                    r.file_offset % 4096 + r.len <= 4096,
                    "{r:?} crosses a stripe"
                );
                assert_eq!(r.member as u64, (r.file_offset / 4096) % 3, "{r:?}");
                match mode {
                    Mode::Host => assert_eq!(out.ran, Ran::Host),
                    Mode::Device => assert_eq!(out.ran, Ran::Device),
                    Mode::Auto => {}
                }
            }
            check_echo(&striped, &data, None);
        }
    }
    // Records: cparam1 is the first record's index in the array file.
    let mut o = opts(2048, Mode::Device, 2);
    o.record = Some(512);
    let seen = run(&array, "/striped", &echo, &echo_args(2048), &o).unwrap();
    check_echo(&seen, &data, Some(512));
    // A stripe that is not a whole number of records is refused, naming both.
    o.record = Some(3000);
    o.chunk = 6000;
    let e = run(&array, "/striped", &echo, &echo_args(6000), &o).unwrap_err();
    assert!(
        matches!(
            e,
            ArrayError::Unaligned {
                value: 4096,
                align: 3000,
                ..
            }
        ),
        "{e}"
    );
    // Bad sizes are typed errors with the limit.
    let e = run(
        &array,
        "/striped",
        &echo,
        &echo_args(0),
        &opts(0, Mode::Device, 1),
    )
    .unwrap_err();
    assert!(matches!(e, ArrayError::OutOfRange { value: 0, .. }), "{e}");
    let e = run(
        &array,
        "/nope",
        &echo,
        &echo_args(64),
        &opts(64, Mode::Device, 1),
    )
    .unwrap_err();
    assert!(matches!(e, ArrayError::NotFound { .. }), "{e}");
    // Every run unloaded its λ from every member.
    for m in array.members() {
        assert!(
            m.device.programs().unwrap().is_empty(),
            "member {}",
            m.index
        );
    }
    array.close().unwrap();
}

#[test]
fn a_bad_lambda_fails_naming_the_member() {
    let (_d, array) = embedded(3);
    // Zeros everywhere but the first byte of stripe 5: member 2's second stripe.
    let mut data = vec![0u8; 4096 * 9];
    data[5 * 4096] = 0xFF;
    array
        .put_bytes("/striped", &data, Placement::Striped { stripe_bytes: 4096 })
        .unwrap();
    array
        .put_bytes("/one", &data, Placement::Member(1))
        .unwrap();

    // An object that does not load: refused on the first member holding the file.
    let junk = vec![0x5au8; 40];
    let e = run(
        &array,
        "/one",
        &junk,
        &echo_args(4096),
        &opts(4096, Mode::Device, 1),
    )
    .unwrap_err();
    assert!(
        matches!(
            &e,
            ArrayError::Lambda {
                member: 1,
                file_offset: None,
                ..
            }
        ),
        "{e}"
    );
    assert_eq!(e.member(), Some(1));
    assert!(e.to_string().contains("array member 1"), "{e}");

    // A λ that traps on member 2's bytes: the error names member 2 and the request.
    let traps = compile(TRAPS_ON_FF);
    for mode in [Mode::Device, Mode::Host] {
        let e = run(
            &array,
            "/striped",
            &traps,
            &LambdaArgs::default(),
            &opts(4096, mode, 2),
        )
        .unwrap_err();
        match &e {
            ArrayError::Lambda {
                member,
                file_offset,
                uri,
                ..
            } => {
                assert_eq!(*member, 2, "{e}");
                assert_eq!(*file_offset, Some(5 * 4096), "{e}");
                assert_eq!(uri, &array.members()[2].uri);
            }
            other => panic!("expected a λ error naming member 2, got {other}"),
        }
        assert!(e.to_string().contains("trapped"), "{e}");
    }
    // Nothing stays loaded after a failure.
    for m in array.members() {
        assert!(
            m.device.programs().unwrap().is_empty(),
            "member {}",
            m.index
        );
    }
    // The λ works over the file member 2 does not spoil.
    let seen = run(
        &array,
        "/striped",
        &compile(ECHO),
        &echo_args(4096),
        &opts(4096, Mode::Device, 1),
    )
    .unwrap();
    check_echo(&seen, &data, None);
    array.close().unwrap();
}

#[test]
fn members_served_over_tcp_run_auto_requests_on_their_devices() {
    let daemons = [Daemon::start(), Daemon::start()];
    let dir = tempfile::tempdir().unwrap();
    let uris: Vec<String> = daemons.iter().map(|d| d.uri.clone()).collect();
    let array = Array::init_members(&dir.path().join("arr"), &uris, LinkModel::default()).unwrap();
    let data = bytes(4096 * 10 + 123, 3);
    array
        .put_bytes("/striped", &data, Placement::Striped { stripe_bytes: 8192 })
        .unwrap();
    let seen = run(
        &array,
        "/striped",
        &compile(ECHO),
        &echo_args(8192),
        &opts(8192, Mode::Auto, 2),
    )
    .unwrap();
    assert!(seen.iter().all(|(_, o)| o.ran == Ran::Device));
    check_echo(&seen, &data, None);
    array.close().unwrap();
}

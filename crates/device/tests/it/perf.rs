//! The performance model as the runtime applies it: modelled times are deterministic and
//! follow the bytes and the work executed, throttled commands take at least their modelled time in
//! real time, and the model persists with the device.

use std::time::Instant;

use csx_device::{DeviceConfig, PerfModel};
use csx_proto::*;

use crate::common::{compile, range, test_config, Harness};

fn with_perf(perf: PerfModel) -> Harness {
    let mut config = test_config();
    config.set_perf(perf);
    Harness::with_config(config)
}

fn exec_info(c: &Completion) -> &ExecuteInfo {
    match &c.reply {
        Reply::Execute(info) => info,
        other => panic!("execute replied {other:?}"),
    }
}

#[test]
fn modelled_time_is_deterministic_and_proportional_to_bytes() {
    let model = PerfModel::lambda_io();
    let h = with_perf(model.clone());
    let mem = h.alloc(4 << 20);
    let mut seen = Vec::new();
    for _ in 0..2 {
        for n in [1u64 << 20, 2 << 20, 4 << 20] {
            let c = h.ok(Op::MemWrite {
                handle: mem,
                offset: 0,
                data: vec![7; n as usize],
            });
            assert_eq!(
                c.timing.modelled_ns,
                model.link_latency_ns + model.link_ns(n)
            );
            seen.push(c.timing.modelled_ns - model.link_latency_ns);
        }
    }
    // Same input, same time; twice the bytes, twice the time (to the rounding ns).
    assert_eq!(seen[..3], seen[3..]);
    assert!(seen[1].abs_diff(2 * seen[0]) <= 1);
    assert!(seen[2].abs_diff(2 * seen[1]) <= 1);

    // A read costs what it returns over the link.
    let c = h.ok(Op::MemRead {
        handle: mem,
        offset: 0,
        len: 1 << 20,
    });
    assert_eq!(
        c.timing.modelled_ns,
        model.link_latency_ns + model.link_ns(1 << 20)
    );

    // File data crosses the link and the media; a memory copy from a file only the media.
    let c = h.ok(Op::FileWrite {
        path: "/d".to_string(),
        offset: 0,
        data: vec![1; 1 << 20],
        mode: WriteMode::Write,
    });
    let n = 1u64 << 20;
    assert_eq!(
        c.timing.modelled_ns,
        model.link_latency_ns + model.link_ns(n) + model.media_ns(n)
    );
    let c = h.ok(Op::MemCopy {
        dst: mem,
        dst_offset: 0,
        sources: vec![CopySource::File {
            path: "/d".to_string(),
            offset: 0,
            len: n,
        }],
    });
    assert_eq!(
        c.timing.modelled_ns,
        model.link_latency_ns + model.media_ns(n)
    );
}

#[test]
fn execution_is_modelled_from_its_work() {
    let model = PerfModel::lambda_io();
    let h = with_perf(model.clone());
    h.load(0, &compile("sum.c"), None, EngineKind::Jit, 4096);
    h.load(1, &compile("sum.c"), None, EngineKind::Interpreter, 4096);
    let mem = h.alloc(64 << 10);
    let input: Vec<u8> = (0..64u64 << 10).map(|i| i as u8).collect();
    h.write(mem, 0, &input);
    let mut times = Vec::new();
    for len in [16u64 << 10, 16 << 10, 32 << 10] {
        let c = h.exec(0, vec![range(mem, 0, len)], 0, &[]);
        assert_eq!(c.status, Status::Success, "{:?}", c.detail);
        let work = &exec_info(&c).work;
        assert_eq!(work.len(), csx_ebpf::count::CLASS_COUNT);
        assert!(work.iter().sum::<u64>() > len / 8, "{work:?}");
        assert_eq!(
            c.timing.modelled_ns,
            model.link_latency_ns + model.device_work_ns(work)
        );
        // The interpreter counts the same work, so its modelled time is the same.
        let by_interp = h.exec(1, vec![range(mem, 0, len)], 0, &[]);
        assert_eq!(&exec_info(&by_interp).work, work);
        assert_eq!(by_interp.timing.modelled_ns, c.timing.modelled_ns);
        times.push(c.timing.modelled_ns);
    }
    assert_eq!(times[0], times[1], "same input, same modelled time");
    assert!(times[2] > times[1], "more input, more work, more time");
}

/// Counting is per device: off where the profile prices compute from fuel (the
/// executions then run uncounted code and report no work), and forced either way by
/// `count_work`. The outcome is the same whether or not the run counted.
#[test]
fn counting_is_on_only_where_the_profile_models_compute_from_work() {
    let cases = [
        (PerfModel::unthrottled(), false),
        (PerfModel::lambda_io(), true),
        (
            PerfModel {
                count_work: Some(false),
                ..PerfModel::lambda_io()
            },
            false,
        ),
        (
            PerfModel {
                count_work: Some(true),
                ..PerfModel::unthrottled()
            },
            true,
        ),
    ];
    let mut values = Vec::new();
    for (model, counted) in cases {
        assert_eq!(model.counts_work(), counted, "{model:?}");
        let h = with_perf(model.clone());
        h.load(0, &compile("sum.c"), None, EngineKind::Jit, 4096);
        h.load(1, &compile("sum.c"), None, EngineKind::Interpreter, 4096);
        let mem = h.alloc(4096);
        let input: Vec<u8> = (0..4096u32).map(|i| (i * 7) as u8).collect();
        h.write(mem, 0, &input);
        for pind in [0, 1] {
            let c = h.exec(pind, vec![range(mem, 0, 4096)], 0, &[]);
            assert_eq!(c.status, Status::Success, "{:?}", c.detail);
            let info = exec_info(&c);
            let compute = if counted {
                assert_eq!(info.work.len(), csx_ebpf::count::CLASS_COUNT);
                assert!(info.work.iter().sum::<u64>() > 4096 / 8, "{:?}", info.work);
                model.device_work_ns(&info.work)
            } else {
                assert!(info.work.is_empty(), "{:?}", info.work);
                model.device_compute_ns(info.fuel_used)
            };
            assert_eq!(c.timing.modelled_ns, model.link_latency_ns + compute);
            values.push((c.value, info.fuel_used));
        }
    }
    assert!(values.windows(2).all(|w| w[0] == w[1]), "{values:?}");
}

#[test]
fn throttled_commands_take_at_least_their_modelled_time() {
    // A slow device, so the floors are well above the handling time.
    let model = PerfModel {
        profile: "custom".to_string(),
        link_bytes_per_sec: 100_000_000,
        link_latency_ns: 1_000_000,
        compute_scale_milli: 200_000,
        ..PerfModel::lambda_io()
    };
    let h = with_perf(model);
    let mem = h.alloc(1 << 20);
    let start = Instant::now();
    let c = h.ok(Op::MemWrite {
        handle: mem,
        offset: 0,
        data: vec![0; 1 << 20],
    });
    let wall = start.elapsed().as_nanos() as u64;
    // 1 ms latency + 1 MiB at 100 MB/s.
    assert!(c.timing.modelled_ns >= 11_000_000);
    assert!(wall >= c.timing.modelled_ns);
    assert!(c.timing.total_ns >= c.timing.modelled_ns);

    h.load(0, &compile("sum.c"), None, EngineKind::Jit, 4096);
    let start = Instant::now();
    let c = h.exec(0, vec![range(mem, 0, 1 << 20)], 0, &[]);
    let wall = start.elapsed().as_nanos() as u64;
    assert_eq!(c.status, Status::Success, "{:?}", c.detail);
    assert!(c.timing.total_ns >= c.timing.modelled_ns);
    assert!(wall >= c.timing.modelled_ns);
    // And at least the run itself. The floor at the device's speed is the compute scale
    // times the run's wall or its worker thread's CPU time, whichever is less; the CPU
    // time is not in the completion, and on a loaded machine (tests in parallel) it is
    // far below the wall, so `execute_ns * 200` is no bound here: `PerfModel::floor_ns`'s
    // unit tests check the scaled floor for both cases.
    assert!(c.timing.total_ns >= c.timing.execute_ns);
}

#[test]
fn unthrottled_counts_but_does_not_wait() {
    let h = Harness::new();
    assert_eq!(h.dev().config().perf, PerfModel::unthrottled());
    let mem = h.alloc(1 << 20);
    let c = h.ok(Op::MemWrite {
        handle: mem,
        offset: 0,
        data: vec![0; 1 << 20],
    });
    assert_eq!(c.timing.modelled_ns, 0, "an unlimited link costs nothing");
}

#[test]
fn model_persists_and_old_configs_are_unthrottled() {
    let mut h = with_perf(PerfModel::daisy());
    assert_eq!(h.dev().config().engines, Some(3), "explicit engines win");
    h.reopen();
    assert_eq!(h.dev().config().perf, PerfModel::daisy());

    // A device.json written before the model existed opens unthrottled.
    let dir = tempfile::tempdir().unwrap();
    let mut json = serde_json::to_value(test_config()).unwrap();
    json.as_object_mut().unwrap().remove("perf");
    std::fs::write(
        dir.path().join(csx_device::config::CONFIG_FILE_NAME),
        serde_json::to_vec(&json).unwrap(),
    )
    .unwrap();
    let loaded = DeviceConfig::load(dir.path()).unwrap();
    assert_eq!(loaded.perf, PerfModel::unthrottled());

    let mut fresh = DeviceConfig::default();
    fresh.set_perf(PerfModel::lambda_io());
    assert_eq!(
        fresh.engines,
        Some(4),
        "the profile's cores become the engines"
    );
}

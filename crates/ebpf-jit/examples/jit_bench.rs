//! Times the JIT on the `sdk/bench` kernels (a development aid; `csx bench vm` is the
//! real benchmark): `jit_bench DIR` runs each `DIR/<kernel>.o` on an input shaped like
//! the benchmark's and prints the median time per run.

use std::sync::Arc;
use std::time::Instant;

use csx_ebpf::engine::{Engine, RunOptions};
use csx_ebpf::helper::{ConformanceHost, FunctionTable};
use csx_ebpf::memory::{MemoryMap, RegionIdx};

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

fn input(name: &str, rng: &mut Rng) -> Vec<u8> {
    let mut params = [0u64; 6];
    let (count, data): (u64, Vec<u8>) = match name {
        "stats64" => (
            8192,
            (0..8192).flat_map(|_| rng.next().to_le_bytes()).collect(),
        ),
        "stats32" => (
            16384,
            (0..16384)
                .flat_map(|_| (rng.next() as u32).to_le_bytes())
                .collect(),
        ),
        "filter" => {
            params[..4].copy_from_slice(&[500, 50, 8, 2]);
            let mut d = Vec::new();
            for _ in 0..65536 {
                for (m, _) in [(1000, 0), (100, 0), (1 << 32, 0), (4, 0)] {
                    d.extend_from_slice(&((rng.next() % m) as u32).to_le_bytes());
                }
            }
            (65536, d)
        }
        "grep" => {
            params[0] = 6;
            params[1] = u64::from_le_bytes(*b"needle\0\0");
            let mut d = Vec::new();
            while d.len() < 65536 {
                for w in 0..4 + rng.next() % 9 {
                    if w > 0 {
                        d.push(b' ');
                    }
                    if rng.next() % 40 == 0 {
                        d.extend_from_slice(b"needle");
                    } else {
                        d.extend((0..2 + rng.next() % 8).map(|_| b'a' + (rng.next() % 26) as u8));
                    }
                }
                d.push(b'\n');
            }
            (0, d)
        }
        "knn" => {
            params[0] = 150_000;
            (
                4096,
                (0..4097 * 16)
                    .flat_map(|_| ((rng.next() % 256) as i32).to_le_bytes())
                    .collect(),
            )
        }
        "fnv" => (0, (0..65536).map(|_| rng.next() as u8).collect()),
        "primes" => {
            params[0] = 20_000;
            (0, Vec::new())
        }
        _ => panic!("unknown kernel {name}"),
    };
    let mut bytes = Vec::new();
    bytes.extend_from_slice(&count.to_le_bytes());
    bytes.extend_from_slice(&(data.len() as u64).to_le_bytes());
    for p in params {
        bytes.extend_from_slice(&p.to_le_bytes());
    }
    bytes.extend_from_slice(&data);
    bytes
}

fn main() {
    let dir = std::env::args().nth(1).expect("usage: jit_bench DIR");
    let table = Arc::new(FunctionTable::conformance());
    for name in [
        "filter", "fnv", "grep", "knn", "primes", "stats32", "stats64",
    ] {
        let bytes = std::fs::read(format!("{dir}/{name}.o")).expect("kernel object");
        let program = csx_ebpf::loader::load_elf(&bytes, None, &table).expect("loads");
        let verified =
            Arc::new(csx_ebpf::verifier::verify(program, table.clone()).expect("verifies"));
        let jit = csx_ebpf_jit::JitProgram::compile(verified.clone()).expect("compiles");
        let interp = csx_ebpf::interp::Interpreter::new(verified);
        let data = input(name, &mut Rng(0x2545_f491_4f6c_dd1d));
        let run = |e: &dyn Engine| {
            let mut map = MemoryMap::new();
            let a = map.map_read_only(RegionIdx(2), &data).expect("maps");
            e.run(
                &mut map,
                [a, data.len() as u64, 0, 0, 0],
                &RunOptions::default(),
                &mut ConformanceHost,
            )
        };
        assert_eq!(run(&jit), run(&interp), "{name}");
        let mut times = Vec::new();
        let started = Instant::now();
        while started.elapsed().as_millis() < 300 {
            let t = Instant::now();
            std::hint::black_box(run(&jit));
            times.push(t.elapsed().as_nanos() as f64 / 1e3);
        }
        times.sort_by(f64::total_cmp);
        println!(
            "{name:8} {:9.1} us  (compile {:6.0} us, {} bytes)",
            times[times.len() / 2],
            jit.compile_time().as_secs_f64() * 1e6,
            jit.code_size()
        );
    }
}

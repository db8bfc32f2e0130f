//! Writes starting inputs for the fuzz targets into `DIR/NAME/` (`scripts/fuzz.sh` runs
//! it for a target whose corpus is empty): valid frames, PDUs, entries and programs, so
//! the fuzzers start from the formats instead of from nothing. The ELF seeds are the
//! SDK's programs, compiled as `csx build` compiles them (which needs clang).
//!
//! Usage: `cargo run -p csx-fuzzing --example seeds -- DIR [REPO_ROOT]`

use std::path::{Path, PathBuf};

use csx_host::proto::{
    encode_command, encode_completion, Command, CommandId, Completion, CopySource, EngineKind,
    MemHandle, MemRange, Op, ProgramIndex, ProgramType, Reply, Status, Windows, WriteMode,
};
use csx_host::transport::shm::framing::{Cqe, Hello, Layout, Span, Sqe, SqeFrame};
use csx_host::transport::tcp::framing::{
    command_capsule_header, data_header, response_capsule_header, ConnectStatus, ICReq, ICResp,
    PduType, TermReason, TermReq,
};

fn commands() -> Vec<Command> {
    let h = MemHandle(1);
    let ops = vec![
        Op::Identify,
        Op::ListFunctions,
        Op::ListPrograms,
        Op::MemAlloc { size_bytes: 4096 },
        Op::MemFree { handle: h },
        Op::MemWrite {
            handle: h,
            offset: 8,
            data: b"hello".to_vec(),
        },
        Op::MemRead {
            handle: h,
            offset: 0,
            len: 64,
        },
        Op::MemFill {
            handle: h,
            offset: 0,
            len: 64,
            byte: 7,
        },
        Op::MemCopy {
            dst: h,
            dst_offset: 0,
            sources: vec![
                CopySource::File {
                    path: "/a".into(),
                    offset: 0,
                    len: 16,
                },
                CopySource::Nvm {
                    offset: 0,
                    len: 512,
                },
            ],
        },
        Op::RangeSetCreate {
            ranges: vec![MemRange {
                handle: h,
                offset: 0,
                len: 64,
            }],
        },
        Op::LoadProgram {
            pind: ProgramIndex(3),
            ptype: ProgramType::Raw,
            total_size_bytes: 16,
            offset: 0,
            data: csx_ebpf::isa::encode_all(
                &csx_ebpf::asm::assemble("mov %r0, 0\nexit").expect("the no-op assembles"),
            ),
            entry: None,
        },
        Op::UnloadProgram {
            pind: ProgramIndex(3),
            generation: None,
        },
        Op::ActivateProgram {
            pind: ProgramIndex(3),
            engine: EngineKind::Jit,
        },
        Op::Execute {
            pind: ProgramIndex(3),
            windows: Windows::Inline(vec![MemRange {
                handle: h,
                offset: 0,
                len: 64,
            }]),
            cparam1: 1,
            cparam2: 2,
            params: vec![1, 2, 3],
            fuel: Some(1000),
            time_limit_ms: Some(250),
            generation: None,
        },
        Op::Abort {
            target: CommandId(7),
        },
        Op::FileWrite {
            path: "/dir/file".into(),
            offset: 0,
            data: b"data".to_vec(),
            mode: WriteMode::Truncate,
        },
        Op::FileRead {
            path: "/dir/file".into(),
            offset: 0,
            len: 4,
        },
        Op::FileList { dir: "/".into() },
        Op::FileRename {
            from: "/a".into(),
            to: "/b".into(),
        },
        Op::DirRead {
            dir: "/".into(),
            after: String::new(),
            max: 10,
        },
        Op::Flush,
    ];
    ops.into_iter()
        .enumerate()
        .map(|(i, op)| Command::new(CommandId(i as u64 + 1), op))
        .collect()
}

fn completions() -> Vec<Completion> {
    let mut ok = Completion::new(CommandId(1), Status::Success);
    ok.value = 42;
    let mut data = Completion::new(CommandId(2), Status::Success);
    data.reply = Reply::Data(b"some bytes".to_vec());
    let err = Completion::error(CommandId(3), Status::NotFound, "files", "no /x");
    vec![ok, data, err]
}

fn write(dir: &Path, name: &str, inputs: &[Vec<u8>]) {
    let d = dir.join(name);
    std::fs::create_dir_all(&d).expect("the corpus directory");
    for (i, bytes) in inputs.iter().enumerate() {
        std::fs::write(d.join(format!("seed-{i:03}")), bytes).expect("a seed file");
    }
    println!("{name}: {} seeds", inputs.len());
}

fn main() {
    let mut args = std::env::args().skip(1);
    let dir = PathBuf::from(args.next().expect("usage: seeds DIR [REPO_ROOT]"));
    let root = args
        .next()
        .map_or_else(|| PathBuf::from("."), PathBuf::from);

    let frames: Vec<Vec<u8>> = commands()
        .iter()
        .map(|c| encode_command(c).expect("a valid command encodes"))
        .collect();
    let responses: Vec<Vec<u8>> = completions()
        .iter()
        .map(|c| encode_completion(c).expect("a valid completion encodes"))
        .collect();
    let mut wire = frames.clone();
    wire.extend(responses.iter().cloned());
    write(&dir, "wire", &wire);

    // tcp: a seed byte, a connect request, then capsules with their data PDUs.
    let mut tcp = Vec::new();
    for (i, f) in frames.iter().enumerate() {
        let mut s = vec![i as u8];
        s.extend(
            ICReq {
                queue_depth: 8,
                token: b"tok".to_vec(),
            }
            .encode(),
        );
        let data = b"0123456789abcdef";
        let with_data = i % 3 == 0;
        let data_len = if with_data { data.len() } else { 0 };
        s.extend(command_capsule_header(1, data_len, f.len()));
        s.extend(f);
        if with_data {
            s.extend(data_header(PduType::H2CData, i as u64 + 1, 0, data.len()));
            s.extend(data);
        }
        tcp.push(s);
    }
    let mut control = vec![9u8];
    control.extend(
        ICResp {
            status: ConnectStatus::Accepted,
            queue_depth: 8,
            data_pdu_size_max: 1 << 20,
            queue_id: 1,
            message: String::new(),
        }
        .encode(),
    );
    control.extend(response_capsule_header(0, responses[0].len()));
    control.extend(&responses[0]);
    control.extend(TermReq::encode(
        PduType::C2HTermReq,
        TermReason::ShuttingDown,
        "bye",
    ));
    tcp.push(control);
    write(&dir, "tcp_pdu", &tcp);

    // shm: submission entries (inline and out of line), completion entries, a hello, a
    // control page with its region size.
    let mut shm = Vec::new();
    for (i, f) in frames.iter().enumerate() {
        let frame = if f.len() <= 200 {
            SqeFrame::Inline(f.clone())
        } else {
            SqeFrame::OutOfLine(Span {
                offset: 1 << 20,
                len: f.len() as u64,
            })
        };
        let sqe = Sqe {
            queue_id: 1,
            frame,
            data: Span {
                offset: (1 << 20) + 4096 * i as u64,
                len: 64,
            },
            response: Span::default(),
        };
        shm.push(sqe.encode().to_vec());
    }
    for r in responses.iter().filter(|r| r.len() <= 100) {
        let cqe = Cqe {
            cid: 1,
            flags: 0,
            frame_len: r.len() as u32,
            data_len: 0,
            inline: r.clone(),
        };
        shm.push(cqe.encode().to_vec());
    }
    shm.push(
        Hello {
            queue_depth: 16,
            host_memory_bytes: 1 << 20,
        }
        .encode()
        .to_vec(),
    );
    let layout = Layout::new(16, 1, 1 << 20);
    let mut page = layout.encode().to_vec();
    page.extend(layout.region_bytes().to_le_bytes());
    shm.push(page);
    write(&dir, "shm_entries", &shm);

    // verifier: the assembled programs of tests/vectors, behind a 16-byte header.
    let mut programs = Vec::new();
    let mut vectors: Vec<PathBuf> = Vec::new();
    for sub in ["semantics", "traps", "verifier"] {
        if let Ok(entries) = std::fs::read_dir(root.join("tests/vectors").join(sub)) {
            vectors.extend(entries.flatten().map(|e| e.path()));
        }
    }
    vectors.sort();
    for path in vectors {
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        let Some(asm) = text.split("-- asm\n").nth(1) else {
            continue;
        };
        let asm = asm.split("\n--").next().unwrap_or("");
        if let Ok(insns) = csx_ebpf::asm::assemble(asm) {
            let mut seed = vec![0u8; 16];
            seed[14] = 16;
            seed.extend(csx_ebpf::isa::encode_all(&insns));
            programs.push(seed);
        }
    }
    write(&dir, "verifier", &programs);

    // jit_differential: the generator reads any bytes; a few patterns to start.
    let gen: Vec<Vec<u8>> = (0u8..8)
        .map(|k| {
            (0..256u32)
                .map(|i| (i as u8).wrapping_mul(k * 2 + 1) ^ k)
                .collect()
        })
        .collect();
    write(&dir, "jit_differential", &gen);

    write(&dir, "elf", &sdk_program_objects(&root));
}

/// The ELF objects of the SDK's programs (`sdk/programs/*.c` under `root`), compiled as
/// `csx build` compiles (csx-testkit, through csx-build).
fn sdk_program_objects(root: &Path) -> Vec<Vec<u8>> {
    let dir = root.join("sdk/programs");
    let mut sources: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
        .map(|entry| entry.expect("a directory entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "c"))
        .collect();
    sources.sort();
    sources
        .iter()
        .map(|p| csx_testkit::tools::compile_program(p))
        .collect()
}

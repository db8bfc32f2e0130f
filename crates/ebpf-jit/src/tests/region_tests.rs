//! Global sections as regions known when the program is compiled: accesses through an
//! `lddw` of a section's address are checked against its constant bounds, or not at all
//! where the offset is proven in range, and must still match the interpreter in value,
//! trap (pc, address, kind) and fuel at every budget.

use super::*;

/// `.rodata`: 16 little-endian u32 `3, 1, 4, 1, 5, ...` (64 bytes), region 22.
/// `.data`: 16 writable bytes `0xa0, 0xa1, ...`, region 23.
fn sections() -> Vec<GlobalSection> {
    let digits: [u32; 16] = [3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 9, 3];
    vec![
        GlobalSection {
            name: ".rodata".into(),
            data: digits.iter().flat_map(|d| d.to_le_bytes()).collect(),
            writable: false,
        },
        GlobalSection {
            name: ".data".into(),
            data: (0xa0..0xb0).collect(),
            writable: true,
        },
    ]
}

const RODATA: &str = "0x1600000000";
const DATA: &str = "0x1700000000";

/// Runs `src` (with [`sections`]) on every engine at every fuel budget up to one past
/// what it needs; returns the full run's outcome.
fn every_budget(src: &str) -> RunOutcome {
    let p = program(src, sections());
    let full = check_program(p.clone(), u64::MAX);
    every_budget_runs_out_or_matches(&p, &full);
    full
}

#[test]
fn table_lookups_by_masked_and_shifted_bytes() {
    // clang's shape of `s += lut[p[i] & 15] * lut[p[i] >> 4]` over region 2's 64 bytes
    // `0, 1, ..., 63`: both indexes are bounded by the mask and the shift, so neither
    // table load needs a check; the `lddw`s sit inside the loop, as clang leaves them.
    let src = format!(
        "mov %r0, 0\nmov %r3, 0\n\
         loop:\nmov %r4, %r1\nadd %r4, %r3\nldxb %r4, [%r4+0]\nmov %r5, %r4\nrsh %r5, 2\n\
         and %r5, 60\nlddw %r6, {RODATA}\nadd %r6, %r5\nand %r4, 15\nlsh %r4, 2\n\
         lddw %r5, {RODATA}\nadd %r5, %r4\nldxw %r4, [%r5+0]\nldxw %r5, [%r6+0]\n\
         mul %r5, %r4\nlsh %r5, 32\nrsh %r5, 32\nadd %r0, %r5\nadd %r3, 1\n\
         jgt %r2, %r3, loop\nexit"
    );
    let digits = [3u64, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 9, 3];
    let want: u64 = (0..64usize).map(|b| digits[b & 15] * digits[b >> 4]).sum();
    assert_eq!(every_budget(&src).result, Ok(want));
}

#[test]
fn table_lookups_out_of_range_trap_where_the_interpreter_does() {
    // An index the JIT cannot bound (a data byte times 4, up to 252) reads past the
    // 64-byte table at the first byte >= 16: a trap at that load, every budget.
    let src = format!(
        "mov %r0, 0\nmov %r3, 0\n\
         loop:\nmov %r4, %r1\nadd %r4, %r3\nldxb %r4, [%r4+0]\nlsh %r4, 2\n\
         lddw %r5, {RODATA}\nadd %r5, %r4\nldxw %r4, [%r5+0]\nadd %r0, %r4\nadd %r3, 1\n\
         jgt %r2, %r3, loop\nexit"
    );
    let out = every_budget(&src);
    assert_eq!(trap_of(&out).pc, 9);
    assert_eq!(
        trap_of(&out).kind,
        TrapKind::OutOfBounds {
            addr: (22 << 32) + 64,
            size: 4,
            write: false
        }
    );
    // A masked index whose last element straddles the end: `idx & 15` words of 4
    // bytes read at +4 end at byte 68. Region 2's bytes reach 15 at the 16th.
    let straddle = format!(
        "mov %r0, 0\nmov %r3, 0\n\
         loop:\nmov %r4, %r1\nadd %r4, %r3\nldxb %r4, [%r4+0]\nand %r4, 15\nlsh %r4, 2\n\
         lddw %r5, {RODATA}\nadd %r5, %r4\nldxw %r4, [%r5+4]\nadd %r0, %r4\nadd %r3, 1\n\
         jgt %r2, %r3, loop\nexit"
    );
    let out = every_budget(&straddle);
    assert_eq!(trap_of(&out).pc, 10);
    assert_eq!(
        trap_of(&out).kind,
        TrapKind::OutOfBounds {
            addr: (22 << 32) + 64,
            size: 4,
            write: false
        }
    );
}

#[test]
fn global_pointers_leaving_their_section() {
    // Below the table's start (region 21 is unmapped there).
    let below = format!("lddw %r4, {RODATA}\nldxb %r0, [%r4-1]\nexit");
    let out = check_program(program(&below, sections()), 100);
    assert_eq!(
        trap_of(&out).kind,
        TrapKind::OutOfBounds {
            addr: (22 << 32) - 1,
            size: 1,
            write: false
        }
    );
    // An index bounded by 2^32 carries a `.rodata` address into `.data` (the next
    // region): the load is legal there and reads `.data`'s bytes, not the table's.
    let next = format!(
        "mov %r6, 1\nlsh %r6, 32\nlddw %r4, {RODATA}\nadd %r4, %r6\nldxw %r0, [%r4+1]\nexit"
    );
    let out = check_program(program(&next, sections()), 100);
    assert_eq!(out.result, Ok(0xa4a3_a2a1));
    // Stores into `.rodata` at a proven offset are still read-only faults.
    let store =
        format!("lddw %r4, {RODATA}\nmov %r5, 7\nand %r5, 3\nadd %r4, %r5\nstb [%r4+0], 1\nexit");
    let out = check_program(program(&store, sections()), 100);
    assert_eq!(
        trap_of(&out).kind,
        TrapKind::ReadOnly {
            addr: (22 << 32) + 3,
            size: 1
        }
    );
}

#[test]
fn writable_globals_at_proven_offsets() {
    // A running count per low nibble in `.data` (16 bytes), every budget; then the
    // bytes read back, and one store past the end.
    let src = format!(
        "mov %r3, 0\n\
         loop:\nmov %r4, %r1\nadd %r4, %r3\nldxb %r4, [%r4+0]\nand %r4, 15\n\
         lddw %r5, {DATA}\nadd %r5, %r4\nldxb %r6, [%r5+0]\nadd %r6, 1\nstxb [%r5+0], %r6\n\
         add %r3, 1\njgt %r2, %r3, loop\n\
         lddw %r5, {DATA}\nldxdw %r0, [%r5+0]\nldxdw %r6, [%r5+8]\nxor %r0, %r6\nexit"
    );
    let bytes: Vec<u8> = (0xa0u8..0xb0).map(|b| b + 4).collect();
    let lo = u64::from_le_bytes(bytes[..8].try_into().unwrap());
    let hi = u64::from_le_bytes(bytes[8..].try_into().unwrap());
    assert_eq!(every_budget(&src).result, Ok(lo ^ hi));
    let past = format!(
        "lddw %r5, {DATA}\nmov %r4, 9\nand %r4, 15\nadd %r5, %r4\nstxdw [%r5+0], %r4\nexit"
    );
    let out = check_program(program(&past, sections()), 100);
    assert_eq!(
        trap_of(&out).kind,
        TrapKind::OutOfBounds {
            addr: (23 << 32) + 9,
            size: 8,
            write: true
        }
    );
}

/// A host whose helper 6 maps a shorter buffer at the `.rodata` section's region.
struct RemapGlobalHost;

impl HelperHost for RemapGlobalHost {
    fn call(&mut self, id: u32, _: [u64; 5], mem: &mut MemoryMap<'_>) -> Result<u64, HelperAbort> {
        static SHORT: [u8; 4] = [0; 4];
        assert_eq!(id, 6);
        mem.map_read_only(RegionIdx(22), &SHORT).unwrap();
        Ok(0)
    }
}

#[test]
fn helpers_may_not_remap_global_sections() {
    // The JIT checks `.rodata` against the bounds the program fixes, so a helper that
    // remaps it aborts the run at the call, on every engine alike.
    let src = format!("call 6\nlddw %r4, {RODATA}\nldxw %r0, [%r4+60]\nexit");
    let p = program(&src, sections());
    let run = |engine: &dyn Engine| {
        let mut map = MemoryMap::new();
        engine.run(
            &mut map,
            [0; 5],
            &RunOptions::default(),
            &mut RemapGlobalHost,
        )
    };
    let want = run(&Interpreter::new(p.clone()));
    assert!(
        matches!(&trap_of(&want).kind, TrapKind::HelperAbort { helper: 6, message, .. }
            if message.contains("global section")),
        "{want:?}"
    );
    assert_eq!(trap_of(&want).pc, 0);
    assert_eq!(run(&JitProgram::compile(p.clone()).unwrap()), want);
    #[cfg(target_arch = "x86_64")]
    assert_eq!(run(&QuickProgram::compile(p).unwrap()), want);
}

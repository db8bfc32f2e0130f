//! Where a function's code starts within a 64-byte line: a measurement knob.
//!
//! Where a loop's code falls moves its time a great deal on the x86-64 hosts we
//! measure (AMD Zen 4). Over sixteen placements of otherwise identical code, each 4
//! bytes further past a line (`CSX_JIT_PLACE`, in-process CPU time, quiet machine):
//! hashjoin's JIT took 40.3-54.8 µs a run, grep's 65.6-85.8 µs (1.92-2.50x native);
//! matmul's stayed within 45.0-46.0 µs. Cranelift aligns functions but no block inside
//! them, so a change anywhere above a loop moves it, and its time with it: two builds
//! are compared over several placements, not at the one each happens to get
//! (`docs/benchmarks.md`).
//!
//! Choosing the placement at compile time was tried and not kept: the offset making
//! the function's loops (jumps back, from Cranelift's block layout) span the fewest
//! 64-byte lines in all picked 47.1 µs for hashjoin (best 40.3) and 84.1 µs for grep
//! (best 65.6). What counts is where the blocks a loop runs at each iteration fall,
//! which the layout alone does not tell (hashjoin's key loop skips its probe loop and
//! its miss path on most keys). See `docs/design/vm.md`.
//!
//! [`padded`] puts the code `pad` bytes into a function aligned to a line, behind a
//! jump over the padding (run once a call). Relative jumps and references to the
//! function's constants move with the code; relocations are shifted by the caller.
//! The padding is a multiple of the buffer's own alignment, so every constant stays
//! as aligned as Cranelift placed it.

/// The line a function's code is placed in, in bytes.
pub(crate) const LINE: u32 = 64;

/// The padding before a function's code: none, or `CSX_JIT_PLACE=N` (`N` modulo
/// [`LINE`], rounded down to a multiple of `align`, the code buffer's alignment).
pub(crate) fn placement(align: u32) -> u32 {
    let forced = std::env::var("CSX_JIT_PLACE")
        .ok()
        .and_then(|v| v.parse::<u32>().ok());
    forced.map_or(0, |n| padding(n, align))
}

/// `n` modulo [`LINE`], rounded down to a multiple of `align`.
fn padding(n: u32, align: u32) -> u32 {
    let align = align.clamp(1, LINE);
    (n % LINE) / align * align
}

/// `code` moved `pad` bytes on: a jump over the padding first (`jmp rel8`, or a `nop`
/// for one byte), the padding filled with `int3`, never run.
pub(crate) fn padded(code: &[u8], pad: u32) -> Vec<u8> {
    const NOP: u8 = 0x90;
    const JMP_REL8: u8 = 0xeb;
    const INT3: u8 = 0xcc;
    let pad = pad as usize;
    let mut out = Vec::with_capacity(pad + code.len());
    match pad {
        0 => {}
        1 => out.push(NOP),
        _ => {
            out.push(JMP_REL8);
            out.push((pad - 2) as u8);
            out.resize(pad, INT3);
        }
    }
    out.extend_from_slice(code);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_padding_keeps_the_constants_aligned() {
        assert_eq!(padding(6, 1), 6);
        assert_eq!(padding(70, 1), 6);
        assert_eq!(padding(70, 16), 0);
        assert_eq!(padding(40, 16), 32);
        assert_eq!(padding(63, 0), 63);
    }

    #[test]
    fn the_padding_is_jumped_over() {
        let code = [0x55, 0xc3];
        assert_eq!(padded(&code, 0), code);
        assert_eq!(padded(&code, 1), [0x90, 0x55, 0xc3]);
        let p = padded(&code, 6);
        assert_eq!(p, [0xeb, 4, 0xcc, 0xcc, 0xcc, 0xcc, 0x55, 0xc3]);
        // The jump lands on the code's first byte.
        assert_eq!(2 + usize::from(p[1]), 6);
        // The longest padding still fits a rel8 jump.
        let p = padded(&code, LINE - 1);
        assert_eq!(2 + usize::from(p[1]), LINE as usize - 1);
    }
}

//! The guard of a loop inside another runs at every iteration of the outer loop (knn's
//! distance over 16 coordinates, once a point), and its table lookups were most of what
//! an outer iteration cost: for each pointer, the region's row found from the address,
//! its length and base loaded, and the iterations left in it divided out.
//!
//! Such a loop with an unrolled copy knows, from the registers on entry, how many
//! iterations run before its counted exit can leave (`stays`, see
//! `unroll::exit_lower_bound`). Its guard first asks the region caches whether every span
//! stays inside the region they hold for those `stays + 1` iterations: the span's first
//! and last byte, each the cache's one compare (the stack's constant check for a span
//! through r10). When all do, the unchecked copy runs `stays + 1` iterations with the
//! caches' deltas, and no row is read. Otherwise the guard makes its lookups as before
//! and caches the region each span starts in (one that is mapped and long enough, as a
//! missed access does), so the next entry of the loop finds it.
//!
//! The caches hold a region's true bounds whenever they are read (they are filled only
//! from the table and reset after a helper), so a span whose first and last byte they
//! both hold lies in that region, and the unchecked iterations it allows are proven as
//! the lookups would prove them. Value, trap and fuel stay the interpreter's.

use super::*;

impl Translator<'_, '_> {
    /// The start of loop `i`'s guard of `spans` (its `stays` computed from the registers
    /// on entry `regs`) trying the region caches first (see the module doc): leaves the
    /// hit's block current, each access's delta defined, and returns the iterations it
    /// proves and the miss's block, where the lookups are still to be made.
    pub(super) fn cached_guard(
        &mut self,
        i: usize,
        spans: &[loops::GuardSpan],
        regs: &[Value; 10],
        stays: Value,
    ) -> (Value, Block) {
        let mut all_in: Option<Value> = None;
        // The cache each pointer form's first span was checked against: the form's
        // delta, and its region, which the form's other spans must share.
        let mut forms: BTreeMap<[i64; 11], CacheValues> = BTreeMap::new();
        for span in spans {
            let (mut both, cache) = self.span_cached(span, regs, stays);
            let b = &mut self.b;
            match forms.get(&span.coef) {
                // Read and write spans of one pointer in one region (the other cache
                // may hold another).
                Some(had) if had.neg_lo != cache.neg_lo => {
                    let same = b.ins().icmp(IntCC::Equal, had.neg_lo, cache.neg_lo);
                    both = b.ins().band(both, same);
                }
                Some(_) => {}
                None => {
                    forms.insert(span.coef, cache);
                }
            }
            all_in = Some(match all_in {
                Some(a) => b.ins().band(a, both),
                None => both,
            });
        }
        let all_in = all_in.expect("a versioned loop has an unchecked access");
        let hit = self.b.create_block();
        let miss = self.b.create_block();
        self.b.set_cold_block(miss);
        self.b.ins().brif(all_in, hit, &[], miss, &[]);

        self.enter(hit);
        for span in spans {
            let delta = forms[&span.coef].delta;
            for pc in &span.pcs {
                let var = self.loops[i].deltas[pc];
                self.b.def_var(var, delta);
            }
        }
        (self.b.ins().iadd_imm_s(stays, 1), miss)
    }

    /// Whether the bytes `span` covers over `stays + 1` iterations from the registers
    /// on entry `regs` lie in the region of the cache it is checked against (returned
    /// with it: the stack's constants for a span through r10).
    fn span_cached(
        &mut self,
        span: &loops::GuardSpan,
        regs: &[Value; 10],
        stays: Value,
    ) -> (Value, CacheValues) {
        let addr = self.eval_form((span.coef, span.k), regs);
        // A pointer computed from r10 on every path (an array in the frame, through a
        // register) is checked against the stack: it keeps the input's region in the
        // read cache.
        let on_stack = span.pcs.iter().all(|pc| self.plan.stack_bases.contains(pc));
        let cache = if span.stack || on_stack {
            self.stack_cache(8)
        } else {
            self.cache(span.write)
        };
        let b = &mut self.b;
        // `stays < 2^32` and `|stride| <= 2^24`: no wrap.
        let moved = b.ins().imul_imm_s(stays, span.stride);
        let far = b.ins().iadd(addr, moved);
        let (low, high) = if span.stride < 0 {
            (far, addr)
        } else {
            (addr, far)
        };
        // The first byte in the region (`rel <= len - 1`, unsigned: the cache's limit is
        // `len - 8`, below 2^32, so no wrap), and the end (`rel_end - 8 <= len - 8`)
        // compared signed: where the first holds, `rel_end - 8` lies in `[-8, 2^57)`, so
        // the compare is exact, for a span within a region's first 8 bytes too (a frame
        // array at `r10 - 8`, with the first compare, its last).
        let first = b.ins().iadd(low, cache.neg_lo);
        let last = b.ins().iadd(high, cache.neg_lo);
        let last = b.ins().iadd_imm_s(last, span.len - 8);
        let last_byte = b.ins().iadd_imm_s(cache.limit, 7);
        let first_in = b
            .ins()
            .icmp(IntCC::UnsignedLessThanOrEqual, first, last_byte);
        let last_in = b
            .ins()
            .icmp(IntCC::SignedLessThanOrEqual, last, cache.limit);
        (b.ins().band(first_in, last_in), cache)
    }

    /// In a guard's lookup: caches (for accesses that write when `write`) the region of
    /// index `idx`, whose row gave `delta` (host minus virtual address) and `len`, unless
    /// it is too short to cache (an index past the table reads row 0, never mapped).
    pub(super) fn refill_from_guard(&mut self, write: bool, idx: Value, delta: Value, len: Value) {
        let old = self.cache(write);
        let lo = self.b.ins().ishl_imm_s(idx, 32);
        self.cache_region(write, &old, lo, delta, len);
    }
}

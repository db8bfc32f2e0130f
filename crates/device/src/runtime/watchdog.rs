//! The watchdog: one thread that stops executions at their time limit, and the device
//! close that stops them all.
//!
//! A running execution registers its deadline and its stop flag ([`Watchdog::watch`]) and
//! unregisters when the guard drops. The thread sleeps until the earliest deadline it
//! knows of, sets the flags of the runs past theirs (reason [`StopReason::TimeLimit`]),
//! and sleeps again; with nothing registered it sleeps until a registration wakes it. A
//! registration wakes it only when its deadline is earlier than the one it sleeps for, so
//! a steady stream of executions with the same limit costs a wake-up per limit, not one
//! per execution.
//!
//! A run may also carry a *leash* (an Execute a transport runs inline on its own
//! thread, `QueuePair::submit_inline`): at [`INLINE_LEASH`] into the run, if it still
//! runs, the thread calls the leash's hook once (the transport then frees a reader, so
//! an Abort for the run is read while the run holds the transport's thread). A leash
//! does not wake the thread by itself: while leashed runs keep registering, the thread
//! wakes at least every [`TICK`] and fires the leashes past due; once a whole tick passes
//! with no leashed registration it sleeps as above again, and the first one after that
//! wakes it. A steady stream of short inline runs so costs a wake-up per tick, not one
//! per run, and a run is told of at most `max(INLINE_LEASH, TICK)` after it began.
//!
//! [`Watchdog::close`] (device close) stops every registered run with
//! [`StopReason::Shutdown`], stops any run registered afterwards at once, and ends the
//! thread.

use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use csx_ebpf::engine::StopFlag;

use super::INLINE_LEASH;
use crate::execute::StopReason;

/// How often the thread wakes at most while leashed runs keep registering (see the
/// module doc).
pub(crate) const TICK: Duration = Duration::from_millis(2);

/// What a run's leash calls (see the module doc).
pub(crate) type LeashHook = Arc<dyn Fn() + Send + Sync>;

/// A registered run.
struct Run {
    key: u64,
    deadline: Instant,
    flag: Arc<StopFlag>,
    /// When to call the hook, if the run lasts; `None` once called.
    leash: Option<(Instant, LeashHook)>,
}

#[derive(Default)]
struct Inner {
    runs: Vec<Run>,
    /// Leashed registrations since the thread last looked (it ticks while there are
    /// some).
    registered: u64,
    next_key: u64,
    /// When the thread wakes next by itself; `None`: only when woken.
    wake_at: Option<Instant>,
    closed: bool,
}

/// See the module doc.
#[derive(Default)]
pub(crate) struct Watchdog {
    inner: Mutex<Inner>,
    changed: Condvar,
}

/// Unregisters a run when dropped.
pub(crate) struct Watch<'a> {
    dog: &'a Watchdog,
    key: u64,
}

impl Drop for Watch<'_> {
    fn drop(&mut self) {
        let mut inner = self.dog.lock();
        if let Some(pos) = inner.runs.iter().position(|r| r.key == self.key) {
            inner.runs.swap_remove(pos);
        }
    }
}

impl Watchdog {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        // Every update leaves the table consistent; a panic elsewhere cannot break it.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Sets `flag` (reason time limit) at `deadline` unless the guard drops first; on a
    /// closed watchdog, sets it (reason shutdown) at once. With `leash`, calls it once
    /// when the run still runs [`INLINE_LEASH`] from now.
    pub(crate) fn watch(
        &self,
        deadline: Instant,
        flag: &Arc<StopFlag>,
        leash: Option<LeashHook>,
    ) -> Watch<'_> {
        let now = Instant::now();
        let mut inner = self.lock();
        let key = inner.next_key;
        inner.next_key += 1;
        if inner.closed {
            flag.stop(StopReason::Shutdown.code());
        } else {
            // The latest the thread may wake for this run: a ticking thread already
            // wakes in time for a leash.
            let wake_by = match &leash {
                Some(_) => deadline.min(now + INLINE_LEASH + TICK),
                None => deadline,
            };
            if leash.is_some() {
                inner.registered += 1;
            }
            inner.runs.push(Run {
                key,
                deadline,
                flag: Arc::clone(flag),
                leash: leash.map(|hook| (now + INLINE_LEASH, hook)),
            });
            if inner.wake_at.is_none_or(|t| wake_by < t) {
                self.changed.notify_one();
            }
        }
        Watch { dog: self, key }
    }

    /// Stops every registered run and every later one; ends [`Watchdog::run`].
    pub(crate) fn close(&self) {
        let mut inner = self.lock();
        inner.closed = true;
        for run in &inner.runs {
            run.flag.stop(StopReason::Shutdown.code());
        }
        self.changed.notify_all();
    }

    /// The thread's loop, until [`Watchdog::close`].
    pub(crate) fn run(&self) {
        let mut inner = self.lock();
        while !inner.closed {
            let now = Instant::now();
            let mut next: Option<Instant> = None;
            let mut earliest = |t: Instant| next = Some(next.map_or(t, |n: Instant| n.min(t)));
            let mut hooks = Vec::new();
            for run in &mut inner.runs {
                if run.deadline <= now {
                    run.flag.stop(StopReason::TimeLimit.code());
                } else if !run.flag.is_set() {
                    earliest(run.deadline);
                }
                match &run.leash {
                    Some((at, _)) if *at <= now => {
                        hooks.extend(run.leash.take().map(|(_, hook)| hook));
                    }
                    Some((at, _)) => earliest(*at),
                    None => {}
                }
            }
            if std::mem::take(&mut inner.registered) > 0 {
                // Leashed runs keep coming: look again within a tick.
                earliest(now + TICK);
            }
            inner.wake_at = next;
            if !hooks.is_empty() {
                // Outside the lock: a hook may take the transport's locks.
                drop(inner);
                for hook in hooks {
                    hook();
                }
                inner = self.lock();
                continue;
            }
            inner = match next {
                None => self.changed.wait(inner).unwrap_or_else(|p| p.into_inner()),
                Some(t) => {
                    self.changed
                        .wait_timeout(inner, t.saturating_duration_since(now))
                        .unwrap_or_else(|p| p.into_inner())
                        .0
                }
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn stops_runs_at_their_deadline_and_all_at_close() {
        let dog = Arc::new(Watchdog::default());
        let thread = {
            let dog = Arc::clone(&dog);
            std::thread::spawn(move || dog.run())
        };
        let late = Arc::new(StopFlag::new());
        let soon = Arc::new(StopFlag::new());
        let far = Instant::now() + Duration::from_secs(3600);
        let _late = dog.watch(far, &late, None);
        let w = dog.watch(Instant::now() + Duration::from_millis(5), &soon, None);
        // The earlier deadline woke the thread; it fires without any other wake-up.
        while !soon.is_set() {
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(soon.reason(), StopReason::TimeLimit.code());
        assert!(!late.is_set());
        drop(w);
        assert_eq!(dog.lock().runs.len(), 1, "the guard unregistered its run");
        dog.close();
        thread.join().unwrap();
        assert_eq!(late.reason(), StopReason::Shutdown.code());
        // After close, a new run is stopped at once.
        let after = Arc::new(StopFlag::new());
        let _w = dog.watch(far, &after, None);
        assert_eq!(after.reason(), StopReason::Shutdown.code());
    }

    /// A leashed run that lasts gets its hook called once, soon after the leash, with
    /// no other registration to wake the thread; one that ends first never does.
    #[test]
    fn a_leash_calls_its_hook_once_when_the_run_lasts() {
        use std::sync::atomic::{AtomicU32, Ordering};

        let dog = Arc::new(Watchdog::default());
        let thread = {
            let dog = Arc::clone(&dog);
            std::thread::spawn(move || dog.run())
        };
        let far = Instant::now() + Duration::from_secs(3600);
        // The thread sleeps for the far deadline before the leashed runs come.
        let parked = Arc::new(StopFlag::new());
        let _parked = dog.watch(far, &parked, None);
        std::thread::sleep(TICK * 3);
        let called = Arc::new(AtomicU32::new(0));
        let hook: LeashHook = {
            let called = Arc::clone(&called);
            Arc::new(move || {
                called.fetch_add(1, Ordering::SeqCst);
            })
        };
        let short = Arc::new(StopFlag::new());
        drop(dog.watch(far, &short, Some(Arc::clone(&hook))));
        let long = Arc::new(StopFlag::new());
        let started = Instant::now();
        let w = dog.watch(far, &long, Some(hook));
        while called.load(Ordering::SeqCst) == 0 {
            assert!(
                started.elapsed() < Duration::from_secs(60),
                "the leash's hook was never called"
            );
            std::thread::sleep(Duration::from_micros(200));
        }
        assert!(started.elapsed() >= INLINE_LEASH);
        std::thread::sleep(TICK * 3);
        assert_eq!(
            called.load(Ordering::SeqCst),
            1,
            "called once, for the long run"
        );
        assert!(!long.is_set(), "a leash stops nothing");
        drop(w);
        dog.close();
        thread.join().unwrap();
    }
}

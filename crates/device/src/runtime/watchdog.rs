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
//! [`Watchdog::close`] (device close) stops every registered run with
//! [`StopReason::Shutdown`], stops any run registered afterwards at once, and ends the
//! thread.

use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Instant;

use csx_ebpf::engine::StopFlag;

use crate::execute::StopReason;

#[derive(Default)]
struct Inner {
    /// Registered runs: (key, deadline, flag).
    runs: Vec<(u64, Instant, Arc<StopFlag>)>,
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
        if let Some(pos) = inner.runs.iter().position(|r| r.0 == self.key) {
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
    /// closed watchdog, sets it (reason shutdown) at once.
    pub(crate) fn watch(&self, deadline: Instant, flag: &Arc<StopFlag>) -> Watch<'_> {
        let mut inner = self.lock();
        let key = inner.next_key;
        inner.next_key += 1;
        if inner.closed {
            flag.stop(StopReason::Shutdown.code());
        } else {
            inner.runs.push((key, deadline, Arc::clone(flag)));
            if inner.wake_at.is_none_or(|t| deadline < t) {
                self.changed.notify_one();
            }
        }
        Watch { dog: self, key }
    }

    /// Stops every registered run and every later one; ends [`Watchdog::run`].
    pub(crate) fn close(&self) {
        let mut inner = self.lock();
        inner.closed = true;
        for (_, _, flag) in &inner.runs {
            flag.stop(StopReason::Shutdown.code());
        }
        self.changed.notify_all();
    }

    /// The thread's loop, until [`Watchdog::close`].
    pub(crate) fn run(&self) {
        let mut inner = self.lock();
        while !inner.closed {
            let now = Instant::now();
            let mut next: Option<Instant> = None;
            for (_, deadline, flag) in &inner.runs {
                if *deadline <= now {
                    flag.stop(StopReason::TimeLimit.code());
                } else if !flag.is_set() {
                    next = Some(next.map_or(*deadline, |n| n.min(*deadline)));
                }
            }
            inner.wake_at = next;
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
        let _late = dog.watch(far, &late);
        let w = dog.watch(Instant::now() + Duration::from_millis(5), &soon);
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
        let _w = dog.watch(far, &after);
        assert_eq!(after.reason(), StopReason::Shutdown.code());
    }
}

//! The helper thread of a connection whose own thread runs an Execute inline
//! (`QueuePair::submit_inline`): the device calls the pair's overrun hook
//! (`QueuePair::on_inline_overrun`) when such a run outlasts its leash
//! (`csx_device::INLINE_LEASH`), which wakes the helper, and the helper reads the client
//! in the busy thread's place until the run ends, so an Abort for the run is read and
//! acted on at once rather than at the run's time limit. Short inline runs never wake it.

use std::sync::{Condvar, Mutex, MutexGuard};

/// Wakes the helper: the device's leash hook, and the connection's end.
#[derive(Debug, Default)]
pub(crate) struct HelpSignal {
    /// (help asked for, the connection ends)
    state: Mutex<(bool, bool)>,
    changed: Condvar,
}

impl HelpSignal {
    fn lock(&self) -> MutexGuard<'_, (bool, bool)> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn request(&self) {
        self.lock().0 = true;
        self.changed.notify_one();
    }

    pub(crate) fn close(&self) {
        self.lock().1 = true;
        self.changed.notify_one();
    }

    /// As [`HelpSignal::wait`], but at most `timeout`: `None` when it passed first.
    pub(crate) fn wait_for(&self, timeout: std::time::Duration) -> Option<bool> {
        let deadline = std::time::Instant::now() + timeout;
        let mut state = self.lock();
        loop {
            if state.1 {
                return Some(false);
            }
            if std::mem::take(&mut state.0) {
                return Some(true);
            }
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                return None;
            }
            state = self
                .changed
                .wait_timeout(state, left)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }

    /// Waits until help is asked for (`true`) or the connection ends (`false`).
    pub(crate) fn wait(&self) -> bool {
        let mut state = self.lock();
        loop {
            if state.1 {
                return false;
            }
            if std::mem::take(&mut state.0) {
                return true;
            }
            state = self.changed.wait(state).unwrap_or_else(|p| p.into_inner());
        }
    }
}

//! JSON output: `--json` prints one compact document, `--json --pretty` an indented one.

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};

static PRETTY: AtomicBool = AtomicBool::new(false);

/// Sets the indentation of every JSON document this process prints (`--pretty`).
pub fn set_pretty(pretty: bool) {
    PRETTY.store(pretty, Ordering::Relaxed);
}

/// A value printed as JSON, compact or indented per `--pretty`.
pub struct Json<T>(pub T);

impl<T: serde::Serialize> fmt::Display for Json<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let text = if PRETTY.load(Ordering::Relaxed) {
            serde_json::to_string_pretty(&self.0)
        } else {
            serde_json::to_string(&self.0)
        }
        .map_err(|_| fmt::Error)?;
        f.write_str(&text)
    }
}

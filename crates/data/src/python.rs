//! Running the crate's embedded Python scripts (the Parquet writer, the DuckDB oracle):
//! python3, or `$CSX_PYTHON` if set, with the script's source as `-c`. A python that
//! does not start or a script that fails is `DataError::Tool` naming the interpreter and
//! the script's role, with python's own message (the scripts name `scripts/setup.sh`
//! for a missing package).

use std::ffi::OsStr;
use std::process::Command;

use crate::error::DataError;

/// What a script that ran to success printed.
pub(crate) struct ScriptOutput {
    /// The interpreter and the script's role, as errors name them.
    pub(crate) tool: String,
    pub(crate) stdout: Vec<u8>,
}

/// Runs `script` with `args` (its `sys.argv[1..]`); `role` names it in errors, after
/// the interpreter (`python3 (the DuckDB oracle)`).
pub(crate) fn run_script(
    script: &str,
    args: &[&OsStr],
    role: &str,
) -> Result<ScriptOutput, DataError> {
    let python = std::env::var("CSX_PYTHON").unwrap_or_else(|_| "python3".to_string());
    let output = Command::new(&python)
        .arg("-c")
        .arg(script)
        .args(args)
        .output()
        .map_err(|e| DataError::Tool {
            tool: python.clone(),
            message: format!("cannot start it ({e})"),
        })?;
    let tool = format!("{python} {role}");
    if !output.status.success() {
        return Err(DataError::Tool {
            tool,
            message: String::from_utf8_lossy(&output.stderr).trim().to_string(),
        });
    }
    Ok(ScriptOutput {
        tool,
        stdout: output.stdout,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failing_script_is_a_tool_error_with_its_message() {
        match run_script(
            "import sys; sys.exit('no such package (see setup)')",
            &[],
            "(x)",
        ) {
            Err(DataError::Tool { tool, message }) => {
                assert!(tool.ends_with(" (x)"), "{tool}");
                assert_eq!(message, "no such package (see setup)");
            }
            other => panic!("expected a tool error, got {:?}", other.map(|o| o.stdout)),
        }
        let out = run_script(
            "import sys; print(sys.argv[1])",
            &[OsStr::new("arg")],
            "(x)",
        )
        .expect("python3 runs (installed by scripts/setup.sh)");
        assert_eq!(out.stdout, b"arg\n");
    }
}

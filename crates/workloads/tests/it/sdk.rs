//! The committed `sdk/include/csx.h` is the generated one, and it compiles.

use std::path::PathBuf;

use csx_workloads::sdk;

fn committed_path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(sdk::HEADER_PATH)
}

/// Fails when the committed header is stale; `CSX_BLESS=1` rewrites it.
#[test]
fn committed_header_is_current() {
    let generated = sdk::builtin_header();
    let path = committed_path();
    if std::env::var_os("CSX_BLESS").is_some() {
        std::fs::write(&path, &generated).expect("write the header");
        return;
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    if committed != generated {
        let line = committed
            .lines()
            .zip(generated.lines())
            .position(|(a, b)| a != b)
            .map_or_else(|| "the end".to_string(), |i| format!("line {}", i + 1));
        panic!(
            "{} is stale (first difference at {line}); regenerate it: {}",
            sdk::HEADER_PATH,
            sdk::REGENERATE
        );
    }
}

/// The header compiles with every warning on, its static assertions included, and a
/// program can use every declaration.
#[test]
fn header_compiles_and_declares_everything() {
    let source = r#"
#include "csx.h"
CSX_PROGRAM(everything)
{
    char path[] = "/x";
    csx_u8 *w = csx_window_addr(args, 0);
    long r = csx_file_size(path, 2);
    r += csx_file_read(path, 2, 0, w, csx_window_len(args, 0));
    r += csx_file_write(path, 2, 0, w, 1);
    r += csx_memcpy(w, w, 1);
    r += csx_memset(w, 0, 1);
    r += (long)csx_now_ns();
    r += csx_trace(path, 2);
    r += csx_filter_u32(w, 4, CSX_CMP_EQ, 0, state);
    r += csx_filter_u64(w, 8, CSX_CMP_GE, 0, state);
    r += csx_sort_u64(w, 8);
    return r + win0_len + state_len + args->cparam1 + CSX_ENOENT + CSX_HELPER_SORT_U64;
}
"#;
    let object = crate::compiler()
        .compile_source("everything", source, &["-Wall", "-Wextra", "-Werror"])
        .expect("compiles");
    let report = csx_workloads::compile::check_object(
        &object,
        None,
        &csx_device::functions::function_infos(),
    )
    .expect("loads and verifies");
    assert_eq!(report.entry, "everything");
    assert_eq!(report.functions_used.len(), 10);
}

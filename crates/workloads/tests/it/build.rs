//! Every SDK program compiles warning-free, loads and verifies against the device's
//! table; objects are cached; a program calling a missing function is named.

use csx_workloads::compile::{check_object, BuildError, PROGRAMS};

#[test]
fn every_program_builds_and_verifies() {
    let compiler = crate::compiler();
    let functions = csx_device::functions::function_infos();
    for p in PROGRAMS {
        let object = compiler
            .program(p.name)
            .unwrap_or_else(|e| panic!("{}: {e}", p.name));
        let report =
            check_object(&object, None, &functions).unwrap_or_else(|e| panic!("{}: {e}", p.name));
        assert_eq!(report.entry, p.name);
        // Cached: the second build returns the same bytes.
        assert_eq!(compiler.program(p.name).unwrap(), object);
    }
}

#[test]
fn programs_use_the_functions_they_document() {
    let compiler = crate::compiler();
    let functions = csx_device::functions::function_infos();
    let used = |name: &str| {
        check_object(&compiler.program(name).unwrap(), None, &functions)
            .unwrap()
            .functions_used
    };
    assert_eq!(used("file_read"), ["csx_file_read"]);
    assert_eq!(used("bitmap"), ["csx_file_write"]);
    assert_eq!(used("select_accel"), ["csx_filter_u32"]);
    assert!(used("stats64").is_empty());
}

#[test]
fn missing_functions_are_named() {
    let source = r#"
#include "csx.h"
extern long csx_gpu_magic(void);
extern long csx_teleport(long);
CSX_PROGRAM(bad) { return csx_gpu_magic() + csx_teleport(1) + csx_memset(win0, 0, 1); }
"#;
    let object = crate::compiler()
        .compile_source("bad", source, &[])
        .unwrap();
    let err = check_object(&object, None, &csx_device::functions::function_infos())
        .expect_err("csx_gpu_magic is not a device function");
    match &err {
        BuildError::MissingFunctions { missing } => {
            assert_eq!(missing, &["csx_gpu_magic", "csx_teleport"]);
        }
        other => panic!("{other}"),
    }
    assert!(err.to_string().contains("csx_gpu_magic, csx_teleport"));
}

#[test]
fn compile_errors_name_the_file() {
    let err = crate::compiler()
        .compile_source(
            "broken",
            "#include \"csx.h\"\nCSX_PROGRAM(broken) { return nope; }\n",
            &[],
        )
        .expect_err("does not compile");
    let text = err.to_string();
    assert!(text.contains("broken-"), "{text}");
    assert!(text.contains("nope"), "{text}");
}

#[test]
fn unknown_programs_and_missing_clang_are_explained() {
    let err = crate::compiler().program("nope").unwrap_err();
    assert!(err.to_string().contains("stats64"), "{err}");
    let err =
        csx_workloads::Compiler::with_clang("/nonexistent/clang".into(), std::env::temp_dir())
            .unwrap_err();
    assert!(err.to_string().contains("scripts/setup.sh"), "{err}");
}

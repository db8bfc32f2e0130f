//! Every SDK program is embedded (built with the crate), loads and verifies against the
//! device's table, and is what the run-time compiler makes of the same source; objects
//! are cached; a program calling a missing function is named.

use std::sync::Arc;

use csx_ebpf::loader;
use csx_workloads::compile::{check_object, function_table, program, BuildError, PROGRAMS};

#[test]
fn every_program_is_embedded_and_verifies() {
    let functions = csx_device::functions::function_infos();
    for p in PROGRAMS {
        let object = program(p.name).unwrap_or_else(|e| panic!("{}: {e}", p.name));
        let report =
            check_object(object, None, &functions).unwrap_or_else(|e| panic!("{}: {e}", p.name));
        assert_eq!(report.entry, p.name);
    }
}

/// One C-to-eBPF path: the objects build.rs embedded and the ones the run-time compiler
/// makes of the same sources (the path `csx build` takes) hold the same instructions.
#[test]
fn the_build_and_the_run_time_compiler_agree() {
    let compiler = crate::compiler();
    let table = Arc::new(function_table(&csx_device::functions::function_infos()).unwrap());
    let insns = |object: &[u8], name: &str| {
        loader::load_elf(object, None, &table)
            .unwrap_or_else(|e| panic!("{name}: {e}"))
            .insns
    };
    for p in PROGRAMS {
        let built = compiler
            .compile_program(p.name)
            .unwrap_or_else(|e| panic!("{}: {e}", p.name));
        assert_eq!(
            insns(&built, p.name),
            insns(program(p.name).unwrap(), p.name),
            "{}",
            p.name
        );
        // Cached: the second build returns the same bytes.
        assert_eq!(compiler.compile_program(p.name).unwrap(), built);
    }
}

#[test]
fn programs_use_the_functions_they_document() {
    let functions = csx_device::functions::function_infos();
    let used = |name: &str| {
        check_object(program(name).unwrap(), None, &functions)
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
    let err = program("nope").unwrap_err();
    assert!(err.to_string().contains("stats64"), "{err}");
    let err = crate::compiler().compile_program("nope").unwrap_err();
    assert!(err.to_string().contains("stats64"), "{err}");
    let err =
        csx_workloads::Compiler::with_clang("/nonexistent/clang".into(), std::env::temp_dir())
            .unwrap_err();
    assert!(err.to_string().contains("scripts/setup.sh"), "{err}");
}

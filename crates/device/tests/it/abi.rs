//! The device implements the program ABI of `csx_proto::abi`, and its test programs are
//! compiled against that ABI, not a copy of it.

use std::path::Path;

use csx_proto::abi;

/// `tests/it/c/csx_it.h` adds test conveniences only: everything of the ABI comes from
/// the generated `csx.h` it includes (see `common::compile`).
#[test]
fn the_c_test_header_restates_nothing_of_the_abi() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/it/c/csx_it.h");
    let text = std::fs::read_to_string(&path).expect("csx_it.h exists");
    assert!(
        text.contains("#include \"csx.h\""),
        "csx_it.h includes csx.h"
    );
    // The code without comments and without the include guard.
    let code = text
        .split("*/")
        .map(|part| part.split("/*").next().unwrap_or(""))
        .collect::<String>()
        .replace("#define CSX_IT_H", "");
    for restated in [
        "struct csx_args {",
        "struct csx_window {",
        "extern ",
        "#define CSX_",
    ] {
        assert!(
            !code.contains(restated),
            "csx_it.h restates `{restated}`; take it from the generated csx.h instead"
        );
    }
}

/// The device publishes exactly the ABI's functions, and the header it hands programs
/// declares each of them.
#[test]
fn the_device_publishes_the_abi_functions() {
    let published = csx_device::functions::function_infos();
    assert_eq!(published, abi::functions::infos());
    let header = abi::header::header(&published);
    for f in abi::functions::FUNCTIONS {
        assert!(header.contains(f.name), "csx.h lacks {}", f.name);
    }
    assert!(header.contains(&format!("#define CSX_ABI_VERSION {}", abi::ABI_VERSION)));
}

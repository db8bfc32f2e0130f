//! Compiles `src/helper.c`: `csHelperSetComputeArg` is variadic, which stable Rust cannot
//! define; the exported symbol is a Rust trampoline (api.rs) that jumps to the C body.

fn main() {
    println!("cargo:rerun-if-changed=src/helper.c");
    cc::Build::new()
        .file("src/helper.c")
        .warnings(true)
        .extra_warnings(true)
        .compile("csx_capi_helper");
}

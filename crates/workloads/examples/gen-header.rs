//! Prints the SDK header for the built-in device's function table:
//! `cargo run -p csx-workloads --example gen-header > sdk/include/csx.h`.

fn main() {
    print!("{}", csx_workloads::sdk::builtin_header());
}

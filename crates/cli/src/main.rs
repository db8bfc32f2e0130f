//! The `csx` command line: a thin clap layer over csx-host and csx-ebpf.

fn main() {
    println!("csx");
}

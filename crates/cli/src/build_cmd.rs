//! `csx build`: compiles a C program for the device with the SDK's clang flags and
//! checks the object against a device's function table before the user ships it.

use std::path::PathBuf;

use anyhow::Context as _;
use csx_workloads::compile::check_object;
use csx_workloads::Compiler;

use crate::{exit, GlobalArgs};

/// Compile a C program for the device and check it will load there.
///
/// Runs clang with the SDK's flags (-O2 -target bpf -mcpu=v3, csx.h on the include
/// path), then loads and verifies the object against the device's functions (with
/// --device) or the built-in table, naming any function the device does not offer.
///
/// Examples:
///   csx build sum.c                     # writes sum.o
///   csx build sum.c -o /tmp/sum.o --entry sum
///   csx build sum.c --device ./dev      # check against that device's functions
#[derive(Debug, clap::Args)]
#[command(verbatim_doc_comment)]
pub struct BuildArgs {
    #[command(flatten)]
    pub dev: crate::connect::DeviceArg,
    /// The C source file.
    #[arg(value_name = "PROG.c")]
    source: PathBuf,
    /// Object file to write (default: the source with `.o`).
    #[arg(short, long, value_name = "PROG.o")]
    output: Option<PathBuf>,
    /// The entry function, when the object has several.
    #[arg(long, value_name = "NAME")]
    entry: Option<String>,
    /// Print the check as JSON: object, entry, instructions, functions.
    #[arg(long)]
    json: bool,
}

pub fn run(args: BuildArgs, global: &GlobalArgs) -> anyhow::Result<u8> {
    let output = args
        .output
        .clone()
        .unwrap_or_else(|| args.source.with_extension("o"));
    let compiler = Compiler::new()?;
    compiler
        .compile_file(&args.source, &output, &[])
        .with_context(|| format!("compiling {}", args.source.display()))?;
    let object = std::fs::read(&output).with_context(|| format!("reading {}", output.display()))?;
    let functions = match &global.device {
        Some(_) => crate::connect::open(global)?
            .functions()
            .context("listing the device's functions")?,
        None => csx_device::functions::function_infos(),
    };
    let report = check_object(&object, args.entry.as_deref(), &functions)
        .with_context(|| format!("checking {}", output.display()))?;
    if args.json {
        println!(
            "{}",
            crate::output::Json(serde_json::json!({
                "object": output,
                "entry": report.entry,
                "instructions": report.slot_count,
                "functions": report.functions_used,
            }))
        );
        return Ok(exit::SUCCESS);
    }
    println!(
        "{}: entry {}, {} instructions, functions: {}",
        output.display(),
        report.entry,
        report.slot_count,
        if report.functions_used.is_empty() {
            "none".to_string()
        } else {
            report.functions_used.join(", ")
        }
    );
    Ok(exit::SUCCESS)
}

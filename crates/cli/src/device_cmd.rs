//! `csx device init`, `csx info` and `csx functions`: creating a device and asking it
//! what it is and what it offers.

use std::path::PathBuf;

use anyhow::Context as _;
use clap::{Args, Subcommand};
use csx_host::proto::{DeviceInfo, FunctionInfo, WireArgKind};
use csx_host::transport::inproc::DeviceConfig;
use csx_host::Device;
use serde_json::json;

use crate::connect::{self, format_size, parse_size};
use crate::{exit, GlobalArgs};

const DEVICE_EXAMPLES: &str = "\
Examples:
  csx device init --state ./dev0
  csx device init --state /var/lib/csx/dev1 --nvm-size 16GiB --slm-size 2GiB --engines 4
  csx device init --state ./dev2 --profile lambda-io --link-bandwidth 2GB/s
  csx device init --state ./dev3 --profile daisy --throttle off
  CSX_DEVICE=./dev0 csx device info";

/// Create and manage devices.
#[derive(Debug, Args)]
#[command(after_help = DEVICE_EXAMPLES)]
pub struct DeviceArgs {
    #[command(subcommand)]
    command: DeviceCommand,
}

#[derive(Debug, Subcommand)]
enum DeviceCommand {
    Init(InitArgs),
    Serve(crate::serve::ServeArgs),
    /// Describe the device: namespaces, engines, limits.
    Info(InfoArgs),
    /// List the device's registered functions (what programs may call).
    Functions(FunctionsArgs),
}

/// Create a device in a state directory.
///
/// The directory gets the NVM namespace image (a sparse file of --nvm-size bytes), the
/// file store's metadata, the shared state and the device's configuration. Open the
/// device afterwards with `--device DIR` (or CSX_DEVICE=DIR): it runs embedded in each
/// csx command, no daemon needed.
#[derive(Debug, Args)]
#[command(after_help = DEVICE_EXAMPLES)]
pub struct InitArgs {
    /// The state directory to create (it must not hold a device).
    #[arg(long, value_name = "DIR")]
    state: PathBuf,
    /// Bytes of the NVM namespace (storage), e.g. 1GiB; a multiple of 4 KiB.
    #[arg(long, value_name = "SIZE", default_value = "4GiB", value_parser = parse_size)]
    nvm_size: u64,
    /// Bytes of the memory namespace (device memory, SLM), e.g. 256MiB.
    #[arg(long, value_name = "SIZE", default_value = "1GiB", value_parser = parse_size)]
    slm_size: u64,
    /// Bytes of the shared state programs keep across executions.
    #[arg(long, value_name = "SIZE", default_value = "1MiB", value_parser = parse_size)]
    state_size: u64,
    /// Execution engines (threads); one per core if absent.
    #[arg(long, value_name = "N")]
    engines: Option<u32>,
    /// Device memory besides the SLM kept for resident file ranges (`csx ssb run
    /// --resident`), e.g. 512MiB; none if absent. `csx device serve --resident-memory`
    /// overrides it while serving.
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    resident_memory: Option<u64>,
    /// Time limit of an execution that names none, in milliseconds (1 s if absent; at
    /// most 3600000): a program running longer is stopped.
    #[arg(long, value_name = "MS")]
    time_limit_ms: Option<u32>,
    /// How the device reads its media: direct (its own media, never the host's page
    /// cache of the image; the default) or cached (through the page cache, as a host
    /// engine reads a file: a warm image is read from memory). Writes are durable alike.
    #[arg(long, value_name = "direct|cached")]
    media_reads: Option<csx_device::nvm::MediaReads>,
    /// Performance profile of the emulated device: unthrottled, lambda-io or daisy.
    #[arg(long, value_name = "NAME", default_value = "unthrottled")]
    profile: String,
    /// Hold each command to the profile's modelled time (on), or run at this machine's
    /// speed while still reporting the modelled times (off). If absent: on for lambda-io,
    /// daisy and any overridden profile, off for unthrottled.
    #[arg(long, value_name = "on|off", value_parser = parse_on_off)]
    throttle: Option<bool>,
    /// Override the profile's host link bandwidth, e.g. 2GB/s, 10Gbps, unlimited.
    #[arg(long, value_name = "RATE", value_parser = parse_rate)]
    link_bandwidth: Option<u64>,
    #[arg(long, hide = true, value_name = "X", conflicts_with = "link_bandwidth")]
    link_gbps: Option<f64>,
    /// Override the profile's per-command link latency, µs.
    #[arg(long, value_name = "X")]
    link_latency_us: Option<f64>,
    /// Override the profile's media bandwidth, GB/s (0: unlimited).
    #[arg(long, value_name = "Y")]
    media_gbps: Option<f64>,
    /// Override the profile's device compute time relative to the host (2.4: 2.4× slower).
    #[arg(long, value_name = "Z")]
    compute_scale: Option<f64>,
    /// Print the configuration as JSON.
    #[arg(long)]
    json: bool,
}

pub fn run_device(args: DeviceArgs) -> anyhow::Result<u8> {
    match args.command {
        DeviceCommand::Init(a) => init(a),
        DeviceCommand::Serve(a) => crate::serve::run(a),
        DeviceCommand::Info(a) => {
            let g = a.dev.global();
            run_info(a, &g)
        }
        DeviceCommand::Functions(a) => {
            let g = a.dev.global();
            run_functions(a, &g)
        }
    }
}

/// A link rate (`10Gbps`, `2GB/s`, `unlimited`) in bytes per second.
fn parse_rate(text: &str) -> Result<u64, String> {
    csx_array::link::parse_bandwidth(text).map_err(|e| e.to_string())
}

/// `on` or `off`, naming the bad text otherwise.
fn parse_on_off(text: &str) -> Result<bool, String> {
    match text {
        "on" => Ok(true),
        "off" => Ok(false),
        _ => Err(format!("expected on or off, not {text:?}")),
    }
}

/// The profile and its overrides (`custom` in the profile name once overridden; a
/// custom profile throttles unless `--throttle off`).
fn apply_perf(config: &mut DeviceConfig, args: &InitArgs) -> anyhow::Result<()> {
    config.set_profile(&args.profile)?;
    let perf = &mut config.perf;
    let mut custom = false;
    let per_sec = |gbps: f64| (gbps * 1e9).round() as u64;
    if let Some(x) = args.link_gbps {
        eprintln!("csx: --link-gbps is deprecated; use --link-bandwidth {x}GB/s");
        perf.link_bytes_per_sec = per_sec(x);
        custom = true;
    }
    if let Some(rate) = args.link_bandwidth {
        perf.link_bytes_per_sec = rate;
        custom = true;
    }
    if let Some(x) = args.link_latency_us {
        perf.link_latency_ns = (x * 1e3).round() as u64;
        custom = true;
    }
    if let Some(x) = args.media_gbps {
        perf.media_bytes_per_sec = per_sec(x);
        custom = true;
    }
    if let Some(x) = args.compute_scale {
        perf.compute_scale_milli = (x * 1e3).round() as u32;
        custom = true;
    }
    if custom {
        perf.profile = format!("{}+custom", args.profile);
        perf.throttle = true;
    }
    if let Some(on) = args.throttle {
        perf.throttle = on;
    }
    Ok(())
}

fn init(args: InitArgs) -> anyhow::Result<u8> {
    let mut config = DeviceConfig {
        nvm_size_bytes: args.nvm_size,
        slm_size_bytes: args.slm_size,
        state_size_bytes: args.state_size,
        engines: args.engines,
        time_limit_ms: args.time_limit_ms,
        resident_bytes: args.resident_memory,
        media_reads: args.media_reads,
        ..connect::default_config()
    };
    apply_perf(&mut config, &args)?;
    let dev = Device::init(&args.state, config.clone())
        .with_context(|| format!("cannot create a device in {}", args.state.display()))?;
    let info = dev.identify().context("identify")?;
    dev.close().context("closing the new device")?;
    if args.json {
        let out = json!({
            "state": args.state,
            "nvm_size_bytes": config.nvm_size_bytes,
            "slm_size_bytes": config.slm_size_bytes,
            "state_size_bytes": config.state_size_bytes,
            "engines": info.engines,
            "time_limit_ms": config.time_limit_ms_effective(),
            "media_reads": config.media_reads.unwrap_or_default().to_string(),
            "profile": config.perf.profile,
            "throttle": config.perf.throttle,
        });
        println!("{out:#}");
    } else {
        println!(
            "created device {}: nvm {}, slm {}, shared state {}, {} engines",
            args.state.display(),
            format_size(config.nvm_size_bytes),
            format_size(config.slm_size_bytes),
            format_size(config.state_size_bytes),
            info.engines,
        );
    }
    Ok(exit::SUCCESS)
}

/// Describe the device: its namespaces, engines and limits.
#[derive(Debug, Args)]
#[command(after_help = "Examples:\n  csx device info\n  csx device info --device ./dev0 --json")]
pub struct InfoArgs {
    #[command(flatten)]
    pub dev: crate::connect::DeviceArg,
    /// Print one JSON object.
    #[arg(long)]
    json: bool,
}

pub fn run_info(args: InfoArgs, global: &GlobalArgs) -> anyhow::Result<u8> {
    let dev = connect::open(global)?;
    let i = dev.identify().context("identify")?;
    let about = About {
        device: format!("{} ({})", dev.uri(), dev.client().transport_name()),
        programs: dev.programs().context("list programs")?.len(),
        files: dev.list_files("/").context("list files")?.files.len(),
    };
    if args.json {
        let mut out = info_json(&i, &about);
        out["uri"] = json!(dev.uri().to_string());
        out["transport"] = json!(dev.client().transport_name());
        println!("{out:#}");
    } else {
        for (k, v) in info_rows(&i, &about) {
            println!("{k:<13}{v}");
        }
    }
    dev.close().context("closing the device")?;
    Ok(exit::SUCCESS)
}

/// What `device info` says beside the device's own identification: the device as
/// `URI (transport)`, the programs loaded and the files on it.
struct About {
    device: String,
    programs: usize,
    files: usize,
}

/// `device info --json` without the `uri` and `transport` keys.
fn info_json(i: &DeviceInfo, about: &About) -> serde_json::Value {
    json!({
        "version": i.version,
        "abi_version": i.abi_version,
        "nvm_size_bytes": i.nvm_size_bytes,
        "slm_size_bytes": i.slm_size_bytes,
        "slm_free_bytes": i.slm_free_bytes,
        "state_size_bytes": i.state_size_bytes,
        "engines": i.engines,
        "jit": i.jit,
        "program_slots": i.program_slots,
        "programs_loaded": about.programs,
        "programs_active_max": i.programs_active_max,
        "program_size_max": i.program_size_max,
        "load_chunk_size_max": i.load_chunk_size_max,
        "range_sets_max": i.range_sets_max,
        "ranges_per_set_max": i.ranges_per_set_max,
        "params_size_max": i.params_size_max,
        "mem_io_size_max": i.mem_io_size_max,
        "file_io_size_max": i.file_io_size_max,
        "queue_depth_max": i.queue_depth_max,
        "fuel_default": i.fuel_default,
        "files": about.files,
    })
}

/// The lines of `device info`: (label, value).
fn info_rows(i: &DeviceInfo, about: &About) -> [(&'static str, String); 10] {
    let engines = if i.jit {
        "interpreter and JIT"
    } else {
        "interpreter only"
    };
    [
        ("device", about.device.clone()),
        (
            "version",
            format!("{}, program ABI {}", i.version, i.abi_version),
        ),
        (
            "nvm",
            format!("{}, {} files", format_size(i.nvm_size_bytes), about.files),
        ),
        (
            "slm",
            format!(
                "{} ({} free)",
                format_size(i.slm_size_bytes),
                format_size(i.slm_free_bytes)
            ),
        ),
        ("shared state", format_size(i.state_size_bytes)),
        ("engines", format!("{} ({engines})", i.engines)),
        (
            "programs",
            format!(
                "{} of {} slots loaded, {} active at most, {} per image",
                about.programs,
                i.program_slots,
                i.programs_active_max,
                format_size(u64::from(i.program_size_max))
            ),
        ),
        (
            "executions",
            format!(
                "{} windows, {} of parameters, {} fuel by default",
                i.ranges_per_set_max,
                format_size(u64::from(i.params_size_max)),
                i.fuel_default
            ),
        ),
        (
            "transfers",
            format!(
                "{} per memory or file command",
                format_size(i.mem_io_size_max)
            ),
        ),
        ("queue depth", i.queue_depth_max.to_string()),
    ]
}

/// List the device's registered functions: what programs may call.
///
/// Programs declare these as `extern` C functions and call them by name; the loader
/// resolves each name to its id. Pointer arguments are checked against the program's
/// memory before the function runs; a failing function returns a negative CSX_E* code.
#[derive(Debug, Args)]
#[command(
    after_help = "Examples:\n  csx device functions\n  csx device functions --json | jq '.[].name'"
)]
pub struct FunctionsArgs {
    #[command(flatten)]
    pub dev: crate::connect::DeviceArg,
    /// Print a JSON array of {id, name, version, args, c_decl, doc}.
    #[arg(long)]
    json: bool,
}

fn arg_kind(a: &WireArgKind) -> serde_json::Value {
    match a {
        WireArgKind::Scalar => json!("scalar"),
        WireArgKind::PtrIn { len_arg } => json!({ "ptr_in": { "len_arg": len_arg } }),
        WireArgKind::PtrOut { len_arg } => json!({ "ptr_out": { "len_arg": len_arg } }),
    }
}

fn function_json(f: &FunctionInfo) -> serde_json::Value {
    json!({
        "id": f.id.0,
        "name": f.name,
        "version": f.version,
        "args": f.args.iter().map(arg_kind).collect::<Vec<_>>(),
        "c_decl": f.c_decl,
        "doc": f.doc,
    })
}

pub fn run_functions(args: FunctionsArgs, global: &GlobalArgs) -> anyhow::Result<u8> {
    let dev = connect::open(global)?;
    let functions = dev.functions().context("list functions")?;
    if args.json {
        let out: Vec<_> = functions.iter().map(function_json).collect();
        println!("{}", crate::output::Json(serde_json::Value::Array(out)));
    } else {
        println!("{:>4}  {:<20} {:>3}  DECLARATION", "ID", "NAME", "VER");
        for f in &functions {
            println!(
                "{:>4}  {:<20} {:>3}  {}",
                f.id.0, f.name, f.version, f.c_decl
            );
            println!("{:>4}  {:<20} {:>3}  {}", "", "", "", f.doc);
        }
    }
    dev.close().context("closing the device")?;
    Ok(exit::SUCCESS)
}

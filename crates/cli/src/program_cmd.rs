//! `csx program {load,list,unload}`: programs kept on a device by name.
//!
//! A program another command loads (`csx exec`, `csx pipe`, a library call) belongs to
//! the connection that loaded it and is unloaded when that connection goes, however it
//! goes. `csx program load NAME FILE` loads one that stays: it is activated, made
//! persistent under NAME (the device refuses a name another slot holds) and kept across
//! restarts of the device until `csx program unload NAME`.

use std::path::PathBuf;

use anyhow::{bail, Context as _};
use clap::{Args, Subcommand};
use csx_host::proto::{validate_program_name, EngineKind, ProgramIndex, ProgramInfo, ProgramState};
use csx_host::{program_type_of, Device};
use serde_json::json;

use crate::engine_arg::DeviceEngine;
use crate::{connect, exit, GlobalArgs};

const PROGRAM_EXAMPLES: &str = "\
Examples:
  csx program load grep-errors grep.bpf.o --engine jit
  csx program list
  csx program list --json
  csx program unload grep-errors
  csx program unload 7          # by slot

A program loaded by `csx exec`, `csx pipe` or a library call is unloaded when the
connection that loaded it goes (also when its process is killed); only programs loaded
with `csx program load` stay, across restarts of the device.";

/// Programs kept on the device by name (load, list, unload).
#[derive(Debug, Args)]
#[command(after_help = PROGRAM_EXAMPLES)]
pub struct ProgramArgs {
    #[command(flatten)]
    pub dev: crate::connect::DeviceArg,
    #[command(subcommand)]
    command: ProgramCommand,
}

#[derive(Debug, Subcommand)]
enum ProgramCommand {
    Load(LoadArgs),
    List(ListArgs),
    Unload(UnloadArgs),
}

/// Load a program into a free slot and keep it on the device under NAME.
///
/// The program is activated on --engine and made persistent: it stays loaded and
/// active when this command ends and across restarts of the device, until `csx program
/// unload NAME`. A NAME another slot holds is refused.
#[derive(Debug, Args)]
#[command(after_help = PROGRAM_EXAMPLES)]
pub struct LoadArgs {
    /// The name to keep it under: 1-64 ASCII letters, digits, `_`, `-` or `.`, starting
    /// with a letter or digit, not all digits.
    name: String,
    /// The program: an ELF object from clang, or raw eBPF bytecode.
    file: PathBuf,
    /// The ELF function to run (the only global function if absent).
    #[arg(long, value_name = "NAME")]
    entry: Option<String>,
    /// The engine to activate it on.
    #[arg(long, value_enum, value_name = "ENGINE", default_value_t = DeviceEngine::Jit)]
    engine: DeviceEngine,
    /// Reserve this fixed CSF id (64..=65535) for NAME: C programs of the SNIA API
    /// (libcsx) call the program by it, across restarts and reloads.
    #[arg(long, value_name = "N")]
    id: Option<u32>,
    /// Print one JSON object describing the slot.
    #[arg(long)]
    json: bool,
}

/// List the device's program slots: name, owner or persistence, state and engine.
#[derive(Debug, Args)]
pub struct ListArgs {
    /// Print one JSON array, one object per occupied slot.
    #[arg(long)]
    json: bool,
}

/// Unload a program by its persistent name or its slot number.
#[derive(Debug, Args)]
pub struct UnloadArgs {
    /// A persistent program's name, or a slot number (as `csx program list` shows).
    target: String,
}

pub fn run(args: ProgramArgs, global: &GlobalArgs) -> anyhow::Result<u8> {
    let dev = connect::open(global)?;
    let status = match args.command {
        ProgramCommand::Load(a) => load(&dev, &a)?,
        ProgramCommand::List(a) => list(&dev, &a)?,
        ProgramCommand::Unload(a) => unload(&dev, &a)?,
    };
    dev.close().context("closing the device")?;
    Ok(status)
}

fn engine_name(e: Option<EngineKind>) -> &'static str {
    match e {
        None => "-",
        Some(EngineKind::Jit) => "jit",
        Some(EngineKind::Interpreter) => "interp",
    }
}

fn state_name(s: ProgramState) -> &'static str {
    match s {
        ProgramState::Empty => "empty",
        ProgramState::Loading => "loading",
        ProgramState::Loaded => "loaded",
        ProgramState::Active => "active",
    }
}

fn keeper(p: &ProgramInfo) -> String {
    match (&p.persistent, p.owner) {
        (Some(_), _) => "persistent".into(),
        (None, Some(c)) => format!("client {}", c.0),
        (None, None) => "departed client (unloads when its runs end)".into(),
    }
}

fn info_json(p: &ProgramInfo) -> serde_json::Value {
    json!({
        "slot": p.pind.0,
        "name": p.persistent,
        "persistent": p.persistent.is_some(),
        "owner": p.owner.map(|c| c.0),
        "entry": p.name,
        "state": state_name(p.state),
        "active": p.state == ProgramState::Active,
        "engine": p.engine.map(|e| engine_name(Some(e))),
        "size_bytes": p.size_bytes,
        "executions": p.executions,
    })
}

fn load(dev: &Device, a: &LoadArgs) -> anyhow::Result<u8> {
    validate_program_name(&a.name).map_err(|e| anyhow::anyhow!("{e}"))?;
    let image =
        std::fs::read(&a.file).with_context(|| format!("cannot read {}", a.file.display()))?;
    if let Some(p) = dev
        .programs()
        .context("cannot list programs")?
        .into_iter()
        .find(|p| p.persistent.as_deref() == Some(a.name.as_str()))
    {
        bail!(
            "a program named {:?} is already loaded in slot {}; `csx program unload {}` first",
            a.name,
            p.pind.0,
            a.name
        );
    }
    let pind = dev
        .load_program_any_slot(program_type_of(&image), &image, a.entry.as_deref())
        .with_context(|| format!("cannot load {}", a.file.display()))?;
    let engine = a.engine.kind();
    let kept = dev
        .activate(pind, engine)
        .with_context(|| format!("cannot activate {}", a.file.display()))
        .and_then(|_| {
            dev.persist_program(pind, &a.name)
                .with_context(|| format!("cannot keep {} as {:?}", a.file.display(), a.name))
        });
    let kept = kept.and_then(|()| match a.id {
        Some(id) => csx_capi::fixed::reserve(dev, id, &a.name)
            .with_context(|| format!("cannot reserve CSF id {id} for {:?}", a.name)),
        None => Ok(()),
    });
    if let Err(e) = kept {
        // Not persistent yet (or without the id asked for): unloading it now leaves the
        // device as it was.
        let _ = dev.unload(pind);
        return Err(e);
    }
    let info = dev
        .programs()
        .context("cannot list programs")?
        .into_iter()
        .find(|p| p.pind == pind);
    match (a.json, info) {
        (true, Some(p)) => println!("{}", crate::output::Json(info_json(&p))),
        _ => println!(
            "loaded {} as {:?} in slot {}, active on {}",
            a.file.display(),
            a.name,
            pind.0,
            engine_name(Some(engine))
        ),
    }
    Ok(exit::SUCCESS)
}

fn list(dev: &Device, a: &ListArgs) -> anyhow::Result<u8> {
    let programs = dev.programs().context("cannot list programs")?;
    if a.json {
        let all: Vec<serde_json::Value> = programs.iter().map(info_json).collect();
        println!("{}", crate::output::Json(serde_json::Value::Array(all)));
        return Ok(exit::SUCCESS);
    }
    if programs.is_empty() {
        println!("no programs loaded");
        return Ok(exit::SUCCESS);
    }
    println!(
        "{:>4}  {:<20} {:<16} {:<8} {:<6} {:>10}  kept by",
        "slot", "name", "entry", "state", "engine", "executions"
    );
    for p in &programs {
        println!(
            "{:>4}  {:<20} {:<16} {:<8} {:<6} {:>10}  {}",
            p.pind.0,
            p.persistent.as_deref().unwrap_or("-"),
            if p.name.is_empty() { "-" } else { &p.name },
            state_name(p.state),
            engine_name(p.engine),
            p.executions,
            keeper(p)
        );
    }
    Ok(exit::SUCCESS)
}

/// The program `target` names: a slot number, or a persistent program's name.
fn resolve<'a>(programs: &'a [ProgramInfo], target: &str) -> anyhow::Result<&'a ProgramInfo> {
    if !target.is_empty() && target.bytes().all(|b| b.is_ascii_digit()) {
        let slot: u16 = target
            .parse()
            .map_err(|_| anyhow::anyhow!("slot {target} is not a slot number"))?;
        if let Some(p) = programs.iter().find(|p| p.pind.0 == slot) {
            return Ok(p);
        }
        let slots: Vec<String> = programs.iter().map(|p| p.pind.0.to_string()).collect();
        bail!(
            "slot {slot} holds no program; the occupied slots are: {}",
            if slots.is_empty() {
                "none".into()
            } else {
                slots.join(", ")
            }
        );
    }
    if let Some(p) = programs
        .iter()
        .find(|p| p.persistent.as_deref() == Some(target))
    {
        return Ok(p);
    }
    let names: Vec<&str> = programs
        .iter()
        .filter_map(|p| p.persistent.as_deref())
        .collect();
    bail!(
        "no program is named {:?}; the named programs are: {}",
        target.chars().take(80).collect::<String>(),
        if names.is_empty() {
            "none".into()
        } else {
            names.join(", ")
        }
    )
}

fn unload(dev: &Device, a: &UnloadArgs) -> anyhow::Result<u8> {
    let programs = dev
        .programs_with_generations_if_known()
        .context("cannot list programs")?;
    let pind = unload_listed(dev, &programs, &a.target)?;
    println!("unloaded slot {}", pind.0);
    Ok(exit::SUCCESS)
}

/// Unloads the program `target` names in `programs` (a listing taken before), naming
/// its generation when listed: a program another client put in the slot since the
/// listing stays, and the unload fails saying so.
fn unload_listed(
    dev: &Device,
    programs: &[ProgramInfo],
    target: &str,
) -> anyhow::Result<ProgramIndex> {
    let p = resolve(programs, target)?;
    dev.unload_generation(p.pind, p.generation)
        .with_context(|| format!("cannot unload {target} (slot {})", p.pind.0))?;
    Ok(p.pind)
}

#[cfg(test)]
mod tests {
    use super::*;
    use csx_host::proto::{ClientId, ProgramType};

    fn info(pind: u16, persistent: Option<&str>) -> ProgramInfo {
        ProgramInfo {
            pind: ProgramIndex(pind),
            state: ProgramState::Active,
            ptype: ProgramType::Elf,
            size_bytes: 16,
            loaded_bytes: 16,
            name: "entry".into(),
            engine: Some(EngineKind::Jit),
            executions: 0,
            owner: persistent.is_none().then_some(ClientId(3)),
            persistent: persistent.map(str::to_owned),
            generation: None,
        }
    }

    #[test]
    fn targets_are_slots_or_names() {
        let ps = [info(2, Some("grep")), info(5, None)];
        assert_eq!(resolve(&ps, "grep").unwrap().pind, ProgramIndex(2));
        assert_eq!(resolve(&ps, "5").unwrap().pind, ProgramIndex(5));
        let e = resolve(&ps, "nope").unwrap_err().to_string();
        assert!(e.contains("the named programs are: grep"), "{e}");
        let e = resolve(&ps, "9").unwrap_err().to_string();
        assert!(e.contains("the occupied slots are: 2, 5"), "{e}");
        let e = resolve(&ps, "99999999999").unwrap_err().to_string();
        assert!(e.contains("not a slot number"), "{e}");
    }

    /// A raw program returning `r0`, loaded into `slot`, activated and kept as "keep".
    fn keep(dev: &Device, slot: ProgramIndex, r0: u8) {
        let image = [0xb7, 0, 0, 0, r0, 0, 0, 0, 0x95, 0, 0, 0, 0, 0, 0, 0];
        dev.load_program(slot, ProgramType::Raw, &image, None)
            .unwrap();
        dev.activate(slot, EngineKind::Interpreter).unwrap();
        dev.persist_program(slot, "keep").unwrap();
    }

    /// `csx program unload NAME` names the generation it listed: a program another
    /// client put in the slot under the same name after the listing stays loaded.
    #[test]
    fn an_unload_never_removes_a_program_put_in_the_slot_after_its_listing() {
        let dir = tempfile::tempdir().unwrap();
        let state = dir.path().join("dev");
        let config = csx_host::transport::inproc::DeviceConfig {
            nvm_size_bytes: 16 << 20,
            slm_size_bytes: 16 << 20,
            ..Default::default()
        };
        Device::init(&state, config).unwrap().close().unwrap();
        let path = state.to_str().unwrap();
        let (a, b) = (Device::open(path).unwrap(), Device::open(path).unwrap());
        let slot = ProgramIndex(3);
        keep(&b, slot, 1);
        let listed = a.programs_with_generations_if_known().unwrap();
        b.unload(slot).unwrap();
        keep(&b, slot, 2);
        let e = format!("{:#}", unload_listed(&a, &listed, "keep").unwrap_err());
        assert!(
            e.contains("cannot unload keep (slot 3)") && e.contains("generation"),
            "{e}"
        );
        let now = a.programs().unwrap();
        assert_eq!(now.len(), 1, "the replacement stays: {now:?}");
        assert_eq!(now[0].persistent.as_deref(), Some("keep"));
        let run = a.execute(&csx_host::ExecuteRequest::new(slot)).unwrap();
        assert_eq!(run.r0, 2);
        let fresh = a.programs_with_generations_if_known().unwrap();
        assert_eq!(unload_listed(&a, &fresh, "keep").unwrap(), slot);
        assert!(a.programs().unwrap().is_empty());
        a.close().unwrap();
        b.close().unwrap();
    }
}

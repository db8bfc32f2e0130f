//! What is generated from the clap definitions: shell completions (`csx completions
//! SHELL`), man pages (`csx man DIR`, run by `make install`) and `docs/cli.md` (a test
//! fails when it is stale; `CSX_BLESS=1 cargo test -p csx cli_md` rewrites it).

use std::path::PathBuf;

use anyhow::Context as _;
use clap::CommandFactory as _;

use crate::exit;

/// Print a shell's completion script for csx on standard output.
///
/// Examples:
///   csx completions bash > /etc/bash_completion.d/csx
///   csx completions zsh > "${fpath[1]}/_csx"
///   csx completions fish > ~/.config/fish/completions/csx.fish
#[derive(Debug, clap::Args)]
#[command(verbatim_doc_comment)]
pub struct CompletionsArgs {
    /// bash, zsh, fish, elvish or powershell.
    #[arg(value_enum)]
    shell: clap_complete::Shell,
}

/// Write the man pages (csx.1 and one per command, csx-put.1, csx-device-init.1, ...)
/// into DIR.
#[derive(Debug, clap::Args)]
pub struct ManArgs {
    /// The directory (created if absent).
    dir: PathBuf,
}

pub fn run_completions(args: CompletionsArgs) -> anyhow::Result<u8> {
    let mut cmd = crate::Cli::command();
    clap_complete::generate(args.shell, &mut cmd, "csx", &mut std::io::stdout());
    Ok(exit::SUCCESS)
}

pub fn run_man(args: ManArgs) -> anyhow::Result<u8> {
    std::fs::create_dir_all(&args.dir)
        .with_context(|| format!("cannot create {}", args.dir.display()))?;
    let mut cmd = crate::Cli::command();
    cmd.build();
    let mut written = 0;
    for (name, page) in pages(&cmd, "csx") {
        let path = args.dir.join(format!("{name}.1"));
        let mut out = Vec::new();
        clap_mangen::Man::new(page.clone())
            .title(name.clone())
            .render(&mut out)
            .context("rendering a man page")?;
        std::fs::write(&path, out).with_context(|| format!("cannot write {}", path.display()))?;
        written += 1;
    }
    eprintln!("csx: wrote {written} man pages to {}", args.dir.display());
    Ok(exit::SUCCESS)
}

/// Every visible command with its man page name (`csx-device-init`), depth first.
fn pages(cmd: &clap::Command, name: &str) -> Vec<(String, clap::Command)> {
    let mut out = vec![(name.to_string(), cmd.clone())];
    for sub in cmd
        .get_subcommands()
        .filter(|s| !s.is_hide_set() && s.get_name() != "help")
    {
        out.extend(pages(sub, &format!("{name}-{}", sub.get_name())));
    }
    out
}

#[cfg(test)]
/// Every visible leaf command as its words (`["device", "init"]`) and definition.
pub fn leaves(cmd: &clap::Command) -> Vec<(Vec<String>, clap::Command)> {
    fn walk(cmd: &clap::Command, path: &[String], out: &mut Vec<(Vec<String>, clap::Command)>) {
        let subs: Vec<_> = cmd
            .get_subcommands()
            .filter(|s| !s.is_hide_set() && s.get_name() != "help")
            .collect();
        if subs.is_empty() {
            out.push((path.to_vec(), cmd.clone()));
        }
        for sub in subs {
            let mut p = path.to_vec();
            p.push(sub.get_name().to_string());
            walk(sub, &p, out);
        }
    }
    let mut cmd = cmd.clone();
    cmd.build();
    let mut out = Vec::new();
    walk(&cmd, &[], &mut out);
    out
}

#[cfg(test)]
/// The opening of `docs/cli.md`: the grammar, an example and the old spellings.
const MARKDOWN_HEAD: &str =
        "# The csx command line\n\n\
     Generated from the clap definitions (`crates/cli/src/docs.rs`); a test fails when \
     this file is stale: `CSX_BLESS=1 cargo test -p csx cli_md` rewrites it.\n\n\
     Grammar: porcelain verbs (`put`, `get`, `ls`, `stat`, `rm`, `sync`, `exec`) at the top \
     level beside noun groups (`device`, `array`, `program`, `lambda`, `fs`, `op`, `vm`, \
     `bench`, ...). A command that talks to a device takes `--device URI` (a state \
     directory, `shm://NAME`, `tcp://HOST:PORT`, `tcps://HOST:PORT` or `array:DIR`; \
     default `$CSX_DEVICE`); a command that does not refuses it. Device paths are \
     arguments or `--to DEVPATH`; local files are `-o/--output FILE` (or `--input` for \
     a local input). `--json` (one compact document) and `--pretty` are global. Old \
     spellings still work, hidden, with a one-line deprecation note on stderr.\n\n\
     <!-- example: run -->\n\
     ```sh\n\
     csx device init --state ./dev0 --nvm-size 64MiB --slm-size 16MiB\n\
     csx gen u64 --size 1MiB -o nums.bin\n\
     csx put nums.bin /data/nums --device ./dev0\n\
     csx ls /data --device ./dev0 --json --pretty\n\
     csx --json device info --device ./dev0\n\
     ```\n\n\
     | old spelling | now |\n\
     |---|---|\n\
     | `csx --device URI CMD` | `csx CMD --device URI` |\n\
     | `csx info`, `csx functions` | `csx device info`, `csx device functions` |\n\
     | `csx sort ... --output DEVPATH` | `csx array sort ... --to DEVPATH` |\n\
     | `csx array info --state DIR` | `csx array info --device array:DIR` |\n\
     | `csx read`, `csx write`, `csx cache drop` | `csx lambda read`, `csx lambda write`, `csx lambda cache-drop` |\n\
     | `--state-dir DIR` (λ-IO) | `--state DIR` |\n\
     | `csx mount`, `csx umount` | `csx fs mount`, `csx fs umount` |\n\
     | `csx pipe ... --output DEVPATH` | `csx op pipe ... --to DEVPATH` |\n\
     | `--interp`, `--jit`, `--quick` | `--engine interp\\|jit\\|quick` |\n\
     | `--repeat`, `--rounds` | `--runs` |\n\
     | `--link-gbps X` (`device init`) | `--link-bandwidth RATE` |\n\
     | `--command-latency-us` (`array init`) | `--link-latency-us` |\n\
     | `bench capi --uri URI` | `bench capi --device URI` |\n";

#[cfg(test)]
/// `docs/cli.md`: every visible command, its about, usage and options.
pub fn markdown() -> String {
    use std::fmt::Write as _;
    let mut cmd = crate::Cli::command();
    cmd.build();
    let mut md = String::from(MARKDOWN_HEAD);
    for (words, leaf) in leaves(&cmd) {
        let name = if words.is_empty() {
            "csx".to_string()
        } else {
            format!("csx {}", words.join(" "))
        };
        let _ = writeln!(md, "\n## `{name}`\n");
        if let Some(about) = leaf.get_long_about().or(leaf.get_about()) {
            let _ = writeln!(md, "{}\n", about.to_string().trim());
        }
        let usage = leaf.clone().render_usage().to_string();
        let usage = usage.trim_start_matches("Usage: ").trim();
        let _ = writeln!(md, "```text\n{usage}\n```\n");
        for arg in leaf.get_arguments().filter(|a| !a.is_hide_set()) {
            let id = arg.get_id().as_str();
            if id != "help" && id != "version" {
                let _ = writeln!(md, "{}", option_line(arg));
            }
        }
    }
    md
}

#[cfg(test)]
/// An option's line in `docs/cli.md`: its spellings, value and help.
fn option_line(arg: &clap::Arg) -> String {
    let spelling = match (arg.get_short(), arg.get_long()) {
        (Some(s), Some(l)) => format!("-{s}, --{l}"),
        (None, Some(l)) => format!("--{l}"),
        (Some(s), None) => format!("-{s}"),
        (None, None) => arg.get_id().as_str().to_uppercase(),
    };
    let value = arg
        .get_value_names()
        .map(|v| format!(" {}", v.join(" ")))
        .filter(|_| arg.get_long().is_some() && arg.get_action().takes_values())
        .unwrap_or_default();
    let help = arg
        .get_help()
        .map(|h| h.to_string().replace('\n', " "))
        .unwrap_or_default();
    format!("- `{spelling}{value}`: {help}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn repo_file(rel: &str) -> PathBuf {
        PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../..")
            .join(rel)
    }

    #[test]
    fn cli_md_is_current() {
        let path = repo_file("docs/cli.md");
        let want = markdown();
        if std::env::var_os("CSX_BLESS").is_some() {
            std::fs::write(&path, &want).unwrap();
        }
        let have = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            have == want,
            "docs/cli.md is stale: run `CSX_BLESS=1 cargo test -p csx cli_md` and commit it"
        );
    }

    #[test]
    fn completions_and_man_pages_cover_every_command() {
        for shell in [
            clap_complete::Shell::Bash,
            clap_complete::Shell::Zsh,
            clap_complete::Shell::Fish,
        ] {
            let mut out = Vec::new();
            clap_complete::generate(shell, &mut crate::Cli::command(), "csx", &mut out);
            let text = String::from_utf8(out).unwrap();
            for word in ["cache-drop", "umount", "completions", "--device", "--json"] {
                assert!(text.contains(word), "{shell}: no {word}");
            }
        }
        let tmp = tempfile::tempdir().unwrap();
        run_man(ManArgs {
            dir: tmp.path().to_path_buf(),
        })
        .unwrap();
        for page in [
            "csx.1",
            "csx-put.1",
            "csx-device-init.1",
            "csx-lambda-cache-drop.1",
        ] {
            let text = std::fs::read_to_string(tmp.path().join(page)).unwrap();
            assert!(text.contains(".TH"), "{page}");
        }
    }
}

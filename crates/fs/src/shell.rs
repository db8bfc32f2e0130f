//! Shell pipes of operators in the mount (Metal FS's proxy executables).
//!
//! The mount shows `MOUNT/.ops/NAME` for every operator: a small executable script that
//! runs `csx op proxy` (the *proxy*). A shell composes them like any program:
//!
//! ```text
//! MOUNT/.ops/filter --op gt --value 100 < MOUNT/data | MOUNT/.ops/aggregate --text > sum.txt
//! ```
//!
//! Each proxy classifies its standard input and output through `/proc/self/fd` (as Metal
//! FS does): a file of the mount ([`End::File`]), `/dev/null` ([`End::Null`]), a pipe whose
//! other end is another proxy of the same mount ([`End::Peer`], found by scanning
//! `/proc/*/fd` for the pipe's inode), or anything else ([`End::Host`]). It registers with
//! the mount process over a Unix socket ([`OpsServer`]), which links proxies whose peer
//! claims agree into one chain and runs it as one [`crate::pipe`] pipeline on the device:
//! no payload crosses the pipes between chained proxies. Only a host end moves payload,
//! through the proxy at that end: its stdin to the device, or the device's output to its
//! stdout. A chain broken by an ordinary program (`op | cat | op`) is two pipelines joined
//! by the real pipe; the result is the same either way.
//!
//! Failure: a stage that traps or fails ends every proxy of the chain with a non-zero
//! status and the error on stderr (the mount's log has it too). An output file of the
//! mount is written under a temporary name and renamed only when whole, so it holds
//! what the shell's redirection left (empty, for `>`) when the chain fails.
//!
//! Differences from Metal FS: payload at a host end crosses the socket (Metal FS maps a
//! 2 × 64 MiB shared memory buffer); several chains may run at once (Metal FS runs one).

use std::collections::{HashMap, HashSet};
use std::io::{self, BufRead, BufReader, Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::core::MetalFs;
use crate::ops::Catalogue;
use crate::pipe::{self, PipeError, PipeOptions, Sink, Source};

/// What a proxy's standard input or output is.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum End {
    /// A file of the mount: its device path.
    File(String),
    /// A pipe to another proxy of the same mount: its pid.
    Peer(u32),
    /// `/dev/null`.
    Null,
    /// Anything else: payload goes through the proxy.
    Host,
}

/// A proxy's registration: the first line it sends, JSON.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Registration {
    pub pid: u32,
    /// The operator and its parameters (a pipeline stage's words).
    pub words: Vec<String>,
    pub input: End,
    pub output: End,
}

/// The end of a chain, sent to each of its proxies.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Outcome {
    pub ok: bool,
    /// 3 for a trap, 1 otherwise (the `csx` exit statuses).
    pub status: u8,
    pub message: String,
    /// Stages of the chain this proxy was part of.
    pub stages: usize,
    /// Payload bytes that crossed the host boundary (host → device, device → host).
    pub host_bytes: u64,
    /// Whether the failure is nothing to report (the reader at the chain's end stopped
    /// reading, as `| head` does): the proxies exit with `status` and print nothing.
    #[serde(default)]
    pub quiet: bool,
}

const TAG_DATA: u8 = b'D';
const TAG_END: u8 = b'E';
/// Sent to a proxy whose stdin claim was a peer that does not claim it back: stream
/// stdin to the mount after all.
const TAG_FEED: u8 = b'F';
/// How long a proxy waits for a pipe's other process to become a proxy (it may still be
/// the shell's forked child before exec).
const PEER_WAIT: Duration = Duration::from_secs(5);
/// How long a registered proxy waits for the peers it claims.
const LINK_WAIT: Duration = Duration::from_secs(20);
/// The exit status of a proxy whose reader went away (a shell's 128 + SIGPIPE).
pub const SIGPIPE_STATUS: u8 = 128 + 13;
/// How often a running chain looks whether its proxies are still there.
const WATCH: Duration = Duration::from_millis(50);

/// The executable script the mount shows as `.ops/NAME`.
pub fn script(exe: &Path, socket: &Path, mount: &Path, op: &str) -> Vec<u8> {
    let q = |p: &Path| format!("'{}'", p.display().to_string().replace('\'', r"'\''"));
    format!(
        "#!/bin/sh\n# csx operator `{op}` on the device of the mount {m}; `csx op list` shows its parameters.\nexec {} op proxy --socket {} --mount {} {op} \"$@\"\n",
        q(exe),
        q(socket),
        q(mount),
        m = mount.display()
    )
    .into_bytes()
}

/// The `/.ops` directory of a mount: a script per operator of the catalogue.
pub fn ops_dir(exe: &Path, socket: &Path, mount: &Path) -> crate::fuse::OpsDir {
    crate::fuse::OpsDir {
        entries: Catalogue
            .operators()
            .iter()
            .map(|o| (o.name.to_owned(), script(exe, socket, mount, o.name)))
            .collect(),
    }
}

// -------------------------------------------------------------------------------------
// The proxy side.

/// Runs a proxy: classifies fd 0 and 1, registers, streams a host end, and returns the
/// exit status the chain ended with.
pub fn proxy(socket: &Path, mount: &Path, words: Vec<String>) -> io::Result<u8> {
    let mount = std::fs::canonicalize(mount).unwrap_or_else(|_| mount.to_path_buf());
    let decisions = [decide(0, &mount), decide(1, &mount)];
    let (input, output) = (decisions[0].end.clone(), decisions[1].end.clone());
    let reg = Registration {
        pid: std::process::id(),
        words,
        input: input.clone(),
        output: output.clone(),
    };
    let mut stream = UnixStream::connect(socket).map_err(|e| {
        io::Error::new(
            e.kind(),
            format!(
                "cannot reach the mount's operator socket {}: {e}",
                socket.display()
            ),
        )
    })?;
    let mut line = serde_json::to_vec(&reg).map_err(io::Error::other)?;
    line.push(b'\n');
    stream.write_all(&line)?;
    // A proxy that claims a peer at its stdin still feeds it when the mount says the
    // peer never agreed (the pipe then goes through the host).
    let mut feeder = if input == End::Host {
        Some(feed(&stream)?)
    } else {
        None
    };
    let mut r = BufReader::new(stream.try_clone()?);
    let mut stdout = io::stdout().lock();
    loop {
        let mut head = [0u8; 9];
        if let Err(e) = r.read_exact(&mut head) {
            eprintln!("csx: the mount closed the operator socket: {e}");
            return Ok(1);
        }
        let len = u64::from_le_bytes(head[1..].try_into().expect("8 bytes")) as usize;
        let mut body = vec![0u8; len];
        r.read_exact(&mut body)?;
        match head[0] {
            TAG_DATA => match stdout.write_all(&body) {
                // The reader went away (`| head`): like a program killed by SIGPIPE, end
                // quietly; the mount stops the chain when it sees the socket close.
                Err(e) if e.kind() == io::ErrorKind::BrokenPipe => return Ok(SIGPIPE_STATUS),
                other => other?,
            },
            TAG_FEED => {
                if feeder.is_none() {
                    feeder = Some(feed(&stream)?);
                }
            }
            _ => {
                match stdout.flush() {
                    Err(e) if e.kind() == io::ErrorKind::BrokenPipe => return Ok(SIGPIPE_STATUS),
                    other => other?,
                }
                let outcome: Outcome = serde_json::from_slice(&body).map_err(io::Error::other)?;
                trace(&reg, &decisions, &outcome);
                if !outcome.ok && !outcome.quiet {
                    eprintln!("csx: {}", outcome.message);
                }
                drop(feeder);
                return Ok(outcome.status);
            }
        }
    }
}

/// Copies this process's stdin to the mount over `stream`, on a thread.
fn feed(stream: &UnixStream) -> io::Result<std::thread::JoinHandle<()>> {
    let mut w = stream.try_clone()?;
    Ok(std::thread::spawn(move || {
        let mut stdin = io::stdin().lock();
        // A chain that ends early closes the socket: stop quietly.
        let _ = io::copy(&mut stdin, &mut w);
        let _ = w.shutdown(std::net::Shutdown::Write);
    }))
}

/// Appends this proxy's decisions and outcome to the file [`TRACE_ENV`] names, if set.
fn trace(reg: &Registration, decisions: &[Decision], outcome: &Outcome) {
    let Some(path) = std::env::var_os(TRACE_ENV) else {
        return;
    };
    let line = serde_json::json!({
        "pid": reg.pid,
        "words": reg.words,
        "decisions": decisions,
        "outcome": outcome,
    });
    let written = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .and_then(|mut f| f.write_all(format!("{line}\n").as_bytes()));
    if let Err(e) = written {
        eprintln!(
            "csx: cannot write the proxy trace {}: {e}",
            Path::new(&path).display()
        );
    }
}

fn readlink_fd(pid: &str, fd: u32) -> Option<String> {
    std::fs::read_link(format!("/proc/{pid}/fd/{fd}"))
        .ok()
        .map(|p| p.display().to_string())
}

/// How a proxy decided what one of its standard descriptors is: written to the file
/// named by [`TRACE_ENV`] when it is set, so a run can be checked without timing it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Decision {
    /// 0 (stdin) or 1 (stdout).
    pub fd: u32,
    pub end: End,
    /// Why, in words ("peer is not a proxy: ...", "peer is a proxy", ...).
    pub why: String,
    /// Whether it gave up waiting after [`PEER_WAIT`] for a process that might have
    /// become a proxy.
    pub timed_out: bool,
    /// Times it looked at the pipe's other end.
    pub looks: u32,
}

/// When set, a proxy appends one JSON line to this file as it ends: its pid, its words,
/// its [`Decision`]s and the [`Outcome`] of its chain.
pub const TRACE_ENV: &str = "CSX_OP_TRACE";

/// What fd `fd` (0 or 1) of this process is.
pub fn classify(fd: u32, mount: &Path) -> End {
    decide(fd, mount).end
}

/// What fd `fd` (0 or 1) of this process is, and why.
pub fn decide(fd: u32, mount: &Path) -> Decision {
    let d = |end: End, why: &str| Decision {
        fd,
        end,
        why: why.to_owned(),
        timed_out: false,
        looks: 0,
    };
    let Some(target) = readlink_fd("self", fd) else {
        return d(End::Host, "not open");
    };
    if target == "/dev/null" {
        return if fd == 1 {
            d(End::Null, "/dev/null")
        } else {
            d(End::Host, "/dev/null")
        };
    }
    if target.starts_with("pipe:[") {
        return pipe_peer(&target, fd, mount);
    }
    let m = mount.display().to_string();
    match target.strip_prefix(&m) {
        Some(rest) if rest.starts_with('/') => d(End::File(rest.to_owned()), "a file of the mount"),
        _ => d(End::Host, "not a pipe or a file of the mount"),
    }
}

/// Who holds the other end of a pipe, as one scan of "/proc" saw it.
#[derive(Debug, Default)]
struct Holders {
    /// Processes (other than this one) holding it: (pid, whether at its other standard
    /// descriptor, the lowest other descriptor it holds it at).
    held: Vec<(u32, bool, Option<u32>)>,
    /// Processes whose descriptors this one may not read (another user's) and that may
    /// hold it: not kernel threads, nor processes older than this session's leader.
    hidden: Vec<u32>,
}

/// The processes (other than this one) holding the other end of pipe `target` from our
/// fd `fd`, at any descriptor, and those whose descriptors cannot be seen (see
/// [`may_hold_our_pipes`]).
fn pipe_holders(target: &str, fd: u32, session_start: Option<u64>) -> Holders {
    let other_fd = if fd == 0 { 1 } else { 0 };
    let me = std::process::id();
    let mut holders = Holders::default();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return holders;
    };
    for e in dir.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Ok(pid) = name.parse::<u32>() else {
            continue;
        };
        if pid == me {
            continue;
        }
        let fds = match std::fs::read_dir(format!("/proc/{name}/fd")) {
            Ok(fds) => fds,
            Err(e) if e.kind() == io::ErrorKind::PermissionDenied => {
                if may_hold_our_pipes(pid, session_start) {
                    holders.hidden.push(pid);
                }
                continue;
            }
            Err(_) => continue,
        };
        let (mut at_std, mut elsewhere, mut holds) = (false, None::<u32>, false);
        for f in fds.flatten() {
            if std::fs::read_link(f.path()).is_ok_and(|l| l.as_os_str() == target) {
                let fd_name = f.file_name().to_string_lossy().into_owned();
                // Only the other end of the pipe: a process that shares our end (the
                // shell whose own stdout we inherited) is no peer.
                if !holds_other_end(&name, &fd_name, fd) {
                    continue;
                }
                holds = true;
                match fd_name.parse::<u32>() {
                    Ok(n) if n == other_fd => at_std = true,
                    Ok(n) => elsewhere = Some(elsewhere.map_or(n, |e| e.min(n))),
                    Err(_) => {}
                }
            }
        }
        if holds {
            holders.held.push((pid, at_std, elsewhere));
        }
    }
    holders
}

/// The start (clock ticks since boot) of this process's session leader, when it still
/// runs: a pipe of this session was made after it started.
fn session_start() -> Option<u64> {
    let session = crate::procstat::of(std::process::id())?.session;
    let leader = crate::procstat::of(session)?;
    (session != 0 && leader.session == session && !leader.ended()).then_some(leader.start_time)
}

/// Whether `pid`, whose descriptors this process may not read, may hold a pipe of
/// ours: any process may, but a kernel thread (no descriptors) and one that started
/// before this session's leader (`session_start`), so before the pipe was made (it
/// could only have been handed the pipe over a socket, which no shell does). Without a
/// leader to compare with, every such process may.
fn may_hold_our_pipes(pid: u32, session_start: Option<u64>) -> bool {
    let Some(stat) = crate::procstat::of(pid) else {
        return false;
    };
    !stat.kernel_thread && !stat.ended() && session_start.is_none_or(|s| stat.start_time >= s)
}

/// The proxy at the other end of pipe `target`, or why there is none.
///
/// A process holding the other end is a proxy (its command line says so), another
/// program, or one that may still turn into a proxy: an ancestor of ours (a Python parent
/// that will hand the pipe to its next child), a forked copy of its parent or a shell
/// (a child before it execs). Such a process is waited for only while it runs, forks,
/// execs or sets up its descriptors (an `open` of a redirection on this very mount
/// sleeps until the mount answers): one that sleeps in any other system call (a
/// `$(...)` shell reading the pipe, a subshell's `read`) is the pipe's reader or writer
/// itself, and the pipe goes through the host at once. [`judge`] decides from one look;
/// the wait ends at [`PEER_WAIT`].
fn pipe_peer(target: &str, fd: u32, mount: &Path) -> Decision {
    let ancestors = ancestors();
    let session = session_start();
    let start = Instant::now();
    let mut looks = 0;
    loop {
        looks += 1;
        let holders = pipe_holders(target, fd, session);
        let seen: Vec<Seen> = holders
            .held
            .into_iter()
            .map(|(pid, at_std, elsewhere)| Seen {
                pid,
                at_std,
                elsewhere,
                holder: assess(pid, target, mount, &ancestors),
            })
            .collect();
        let decided = |end: End, why: String| Decision {
            fd,
            end,
            why,
            timed_out: false,
            looks,
        };
        let busy = match judge(&seen, &holders.hidden, &ancestors) {
            Verdict::Peer(pid) => {
                return decided(End::Peer(pid), format!("peer is a proxy (pid {pid})"))
            }
            Verdict::Host(why) => return decided(End::Host, why),
            Verdict::Wait(busy) => busy,
        };
        if start.elapsed() > PEER_WAIT {
            return Decision {
                timed_out: true,
                ..decided(
                    End::Host,
                    format!(
                        "no proxy came within {} s: {}",
                        PEER_WAIT.as_secs(),
                        busy.join(", ")
                    ),
                )
            };
        }
        std::thread::sleep(Duration::from_millis(3));
    }
}

/// One process holding the other end of a proxy's pipe, as one look saw it.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Seen {
    pid: u32,
    /// Whether it holds the pipe at its other standard descriptor (a writer's 1, a
    /// reader's 0): where a program it runs or becomes reads or writes.
    at_std: bool,
    /// The lowest other descriptor it holds the pipe at (`2>&1`, `3>&1`, a shell's or
    /// Python's own copy before it closes it): it may read or write there too.
    elsewhere: Option<u32>,
    holder: Holder,
}

/// What one look at a pipe's other end decides.
#[derive(Debug, PartialEq, Eq)]
enum Verdict {
    /// The proxy with this pid is the pipe's only reader or writer.
    Peer(u32),
    /// The pipe goes through the host, for this reason.
    Host(String),
    /// Not known yet: these processes may still become a proxy or go away.
    Wait(Vec<String>),
}

/// Decides from one look at a pipe's other end (`seen`; `hidden`: processes whose
/// descriptors could not be read; `ancestors` are ours).
///
/// A proxy is the peer only when it is the one process holding the other end, and holds
/// it only at its standard descriptor: another process holding it at any descriptor
/// (a subshell in `{ op; echo x; } | op`, which writes into the pipe after the operator,
/// or one that holds a copy at descriptor 3 from `exec 3>&1`), or the proxy holding a
/// second copy (`op 2>&1 | op`), could read or write bytes the device never sees, so
/// the pipe goes through the host; so it does when some process's descriptors cannot
/// be read (another user's: it may hold the pipe). While such another process may
/// still turn into something else or close its copy (it runs, forks, execs: the shell
/// or Python parent that made the pipe and closes its copy once the next stage is
/// started), the look is repeated.
fn judge(seen: &[Seen], hidden: &[u32], ancestors: &[u32]) -> Verdict {
    if let Some(why) = unseen_or_elsewhere(seen, hidden, ancestors) {
        return Verdict::Host(why);
    }
    let is_peer = |s: &Seen| s.at_std && s.holder == Holder::Proxy && !ancestors.contains(&s.pid);
    let proxies: Vec<u32> = seen.iter().filter(|s| is_peer(s)).map(|s| s.pid).collect();
    let settled = seen
        .iter()
        .find(|s| s.at_std && matches!(s.holder, Holder::Program(_) | Holder::Waiting(..)));
    match (proxies.as_slice(), settled) {
        ([], Some(s)) => {
            return Verdict::Host(format!(
                "peer is not a proxy: pid {} {}",
                s.pid,
                s.holder.describe()
            ))
        }
        ([p, ..], Some(s)) => {
            return Verdict::Host(format!(
                "the proxy pid {p} shares the pipe with pid {} {}",
                s.pid,
                s.holder.describe()
            ))
        }
        ([_, _, ..], None) => {
            return Verdict::Host(format!(
                "more than one proxy holds the other end (pids {proxies:?})"
            ))
        }
        _ => {}
    }
    let others = seen.iter().any(|s| !is_peer(s));
    if let ([p], false) = (proxies.as_slice(), others) {
        return Verdict::Peer(*p);
    }
    let busy: Vec<String> = seen
        .iter()
        .filter(|s| matches!(s.holder, Holder::Proxy | Holder::Busy(_)))
        .map(|s| format!("pid {} {}", s.pid, s.holder.describe()))
        .collect();
    if busy.is_empty() {
        return Verdict::Host(nobody_may_become_one(seen));
    }
    Verdict::Wait(busy)
}

/// Why the pipe goes through the host at once whatever else holds it: a process
/// whose descriptors cannot be read, a proxy at the other end that holds a second copy,
/// or a process that holds the pipe at another descriptor only and will not close it
/// soon (it does not run, fork or exec: it sleeps, or runs another program).
fn unseen_or_elsewhere(seen: &[Seen], hidden: &[u32], ancestors: &[u32]) -> Option<String> {
    if let Some(pid) = hidden.first() {
        return Some(format!(
            "the descriptors of pid {pid} cannot be read (another user's process): it may hold the pipe"
        ));
    }
    let proxy_with_copy = seen.iter().find(|s| {
        s.at_std
            && s.holder == Holder::Proxy
            && !ancestors.contains(&s.pid)
            && s.elsewhere.is_some()
    });
    if let Some(s) = proxy_with_copy {
        return Some(format!(
            "the proxy pid {} also holds the pipe at descriptor {}, which it or a child may read or write",
            s.pid,
            s.elsewhere.unwrap_or_default()
        ));
    }
    let settled_copy = seen
        .iter()
        .find(|s| !s.at_std && !matches!(s.holder, Holder::Busy(_)))?;
    let copy = format!(
        "pid {} {}, at descriptor {}",
        settled_copy.pid,
        settled_copy.holder.describe(),
        settled_copy.elsewhere.unwrap_or_default()
    );
    Some(
        match seen.iter().find(|s| s.at_std && s.holder == Holder::Proxy) {
            Some(p) => format!("the proxy pid {} shares the pipe with {copy}", p.pid),
            None => format!("peer is not a proxy: {copy}"),
        },
    )
}

/// Why a pipe whose other end no process that may become a proxy holds goes through
/// the host.
fn nobody_may_become_one(seen: &[Seen]) -> String {
    let others: Vec<String> = seen
        .iter()
        .map(|s| format!("pid {} {}", s.pid, s.holder.describe()))
        .collect();
    format!(
        "peer is not a proxy: no process that may become one holds the other end ({})",
        if others.is_empty() {
            "nobody else does".to_owned()
        } else {
            others.join(", ")
        }
    )
}

/// What a process holding the other end of a proxy's pipe is.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Holder {
    /// A proxy of this mount (or its script before it execs the proxy).
    Proxy,
    /// Another program: its name.
    Program(String),
    /// An ancestor, a forked copy or a shell that runs (or forks or execs): it may still
    /// start or become a proxy.
    Busy(String),
    /// The same, asleep in another system call (its number, as "/proc/PID/syscall"
    /// shows it): it reads or writes the pipe itself.
    Waiting(String, String),
}

impl Holder {
    fn describe(&self) -> String {
        match self {
            Holder::Proxy => "is a proxy".to_owned(),
            Holder::Program(n) => format!("({n}) is another program"),
            Holder::Busy(n) => format!("({n}) runs and may still start a proxy"),
            Holder::Waiting(n, call) => {
                format!("({n}) waits in system call {call}, reading or writing the pipe itself")
            }
        }
    }
}

/// One look at `pid`: its command line is read once, so a process that finishes an exec
/// between two reads (empty, then a proxy's) is never taken for another program.
fn assess(pid: u32, target: &str, mount: &Path, ancestors: &[u32]) -> Holder {
    let kind = peer_kind(pid, mount);
    if matches!(kind, PeerKind::Proxy) {
        return Holder::Proxy;
    }
    let name = std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .map(|c| c.trim().to_owned())
        .unwrap_or_default();
    let may_turn = ancestors.contains(&pid)
        || matches!(kind, PeerKind::Maybe | PeerKind::Unknown)
        || is_copy_of_parent(pid)
        || mid_exec(pid);
    if !may_turn {
        Holder::Program(name)
    } else if is_busy(pid, target) {
        Holder::Busy(name)
    } else {
        let call = std::fs::read_to_string(format!("/proc/{pid}/syscall"))
            .ok()
            .and_then(|sc| sc.split_whitespace().next().map(str::to_owned))
            .unwrap_or_else(|| "?".to_owned());
        Holder::Waiting(name, call)
    }
}

/// Whether `pid` is a forked copy of its parent that has not exec'd (same executable
/// and command line).
fn is_copy_of_parent(pid: u32) -> bool {
    let Some(ppid) = parent_of(pid) else {
        return false;
    };
    let same = |what: &str| {
        let a = std::fs::read(format!("/proc/{pid}/{what}"));
        let b = std::fs::read(format!("/proc/{ppid}/{what}"));
        matches!((a, b), (Ok(a), Ok(b)) if a == b)
    };
    let exe = |p: u32| std::fs::read_link(format!("/proc/{p}/exe")).ok();
    same("cmdline") && exe(pid).is_some() && exe(pid) == exe(ppid)
}

/// System calls a process makes on its way to starting another program.
#[cfg(target_arch = "x86_64")]
const SPAWNING: &[u64] = &[56, 57, 58, 59, 322, 435]; // clone, fork, vfork, execve, execveat, clone3
#[cfg(target_arch = "aarch64")]
const SPAWNING: &[u64] = &[220, 221, 281, 435]; // clone, execve, execveat, clone3
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
const SPAWNING: &[u64] = &[];

/// System calls a process makes while it sets up its descriptors and finds a program
/// (a shell's child between its fork and its exec opens, duplicates and closes its
/// redirections, looks up the program): each sleeps until the file system answers when
/// the file is on a slow one, such as this very mount under load.
#[cfg(target_arch = "x86_64")]
const PREPARING: &[u64] = &[
    2, 3, 4, 5, 6, 21, 33, 89, 257, 262, 267, 269, 292, 332, 436, 437, 439,
]; // open, close, stat, fstat, lstat, access, dup2, readlink, openat, newfstatat,
   // readlinkat, faccessat, dup3, statx, close_range, openat2, faccessat2
#[cfg(target_arch = "aarch64")]
const PREPARING: &[u64] = &[24, 48, 56, 57, 78, 79, 80, 291, 436, 437, 439];
// dup3, faccessat, openat, close, readlinkat, newfstatat, fstat, statx, close_range,
// openat2, faccessat2
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
const PREPARING: &[u64] = &[];

/// Whether `pid` is in a fork or an exec now, or shows no command line (as in the middle
/// of an exec): what it turns into is not known yet.
fn mid_exec(pid: u32) -> bool {
    let no_cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).map_or(true, |c| c.is_empty());
    let spawning = std::fs::read_to_string(format!("/proc/{pid}/syscall")).is_ok_and(|sc| {
        sc.split_whitespace()
            .next()
            .and_then(|n| n.parse::<u64>().ok())
            .is_some_and(|n| SPAWNING.contains(&n))
    });
    (no_cmdline || spawning) && Path::new(&format!("/proc/{pid}")).exists()
}

/// System calls that read or write one descriptor, their first argument.
#[cfg(target_arch = "x86_64")]
const FD_IO: &[u64] = &[0, 1, 19, 20]; // read, write, readv, writev
#[cfg(target_arch = "aarch64")]
const FD_IO: &[u64] = &[63, 64, 65, 66]; // read, write, readv, writev
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
const FD_IO: &[u64] = &[];

/// Whether `pid` runs or is on its way to another program: it runs (or waits for a
/// CPU), is in a page fault or an uninterruptible sleep, sleeps in a fork or an exec or
/// in setting up its descriptors ([`PREPARING`]: an `open` of a file of this mount), or
/// sleeps reading or writing another pipe than `target` (a shell's child
/// before its exec waits on a pipe for its siblings to be forked; a Python parent waits
/// on one for its child's exec). Asleep on `target` itself, it is that pipe's reader or
/// writer; asleep in any other call (`poll`, `wait4`), it starts nobody now.
/// "/proc/PID/syscall" says which; its state in "/proc/PID/stat" when that cannot be read.
fn is_busy(pid: u32, target: &str) -> bool {
    if let Ok(sc) = std::fs::read_to_string(format!("/proc/{pid}/syscall")) {
        let mut words = sc.split_whitespace();
        let first = words.next().unwrap_or("");
        if first == "running" {
            return true;
        }
        // "-1": not in a system call, yet not running: in a page fault (asleep on the
        // disk under memory pressure) or stopped. It waits on nothing of its own.
        let Ok(nr) = first.parse::<u64>() else {
            return true;
        };
        // In uninterruptible sleep (the disk, memory reclaim) inside any call: it is on
        // its way, not waiting for another process.
        if state_of(pid) == Some('D') {
            return true;
        }
        if SPAWNING.contains(&nr) || PREPARING.contains(&nr) {
            return true;
        }
        if !FD_IO.contains(&nr) {
            return false;
        }
        let fd = words
            .next()
            .and_then(|a| u32::from_str_radix(a.trim_start_matches("0x"), 16).ok());
        let on = fd.and_then(|fd| readlink_fd(&pid.to_string(), fd));
        return on.is_some_and(|on| on.starts_with("pipe:[") && on != target);
    }
    matches!(state_of(pid), Some('R' | 'D'))
}

/// The state letter of `pid` in "/proc/PID/stat" (R, S, D, T, ...).
fn state_of(pid: u32) -> Option<char> {
    crate::procstat::of(pid).map(|s| s.state)
}

/// This process's parent, its parent's parent, and so on up to init.
fn ancestors() -> Vec<u32> {
    let mut out = Vec::new();
    let mut pid = std::process::id();
    while pid > 1 && out.len() < 4096 {
        let Some(ppid) = parent_of(pid) else { break };
        if ppid == 0 || out.contains(&ppid) {
            break;
        }
        out.push(ppid);
        pid = ppid;
    }
    out
}

/// The parent pid of `pid`, from "/proc/PID/stat".
fn parent_of(pid: u32) -> Option<u32> {
    crate::procstat::of(pid).map(|s| s.ppid)
}

/// Whether descriptor `fd_name` of process `pid` is the other end of a pipe from our fd
/// `our_fd` (0 reads, so the other end writes; 1 writes, so it reads), by the access
/// mode in "/proc/PID/fdinfo/FD".
fn holds_other_end(pid: &str, fd_name: &str, our_fd: u32) -> bool {
    let Ok(info) = std::fs::read_to_string(format!("/proc/{pid}/fdinfo/{fd_name}")) else {
        return false;
    };
    let Some(flags) = info
        .lines()
        .find_map(|l| l.strip_prefix("flags:"))
        .and_then(|f| u32::from_str_radix(f.trim(), 8).ok())
    else {
        return false;
    };
    let access = flags & 3;
    if our_fd == 0 {
        access != 0
    } else {
        access != 1
    }
}

enum PeerKind {
    Proxy,
    /// A shell (a forked child that may still exec a proxy).
    Maybe,
    /// No command line: in the middle of an exec (or a zombie).
    Unknown,
    Other,
}

fn peer_kind(pid: u32, mount: &Path) -> PeerKind {
    let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
        return PeerKind::Other;
    };
    if cmdline.is_empty() {
        return PeerKind::Unknown;
    }
    let args: Vec<String> = cmdline
        .split(|&b| b == 0)
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect();
    let ops_dir = mount.join(".ops");
    let cwd = std::fs::read_link(format!("/proc/{pid}/cwd")).unwrap_or_default();
    let is_op_path = |a: &str| {
        let p = cwd.join(a);
        p.parent()
            .is_some_and(|d| std::fs::canonicalize(d).is_ok_and(|d| d == ops_dir) || d == ops_dir)
    };
    // The proxy itself, or the script before it execs the proxy.
    let proxy = args.windows(2).any(|w| w[0] == "op" && w[1] == "proxy")
        && args
            .windows(2)
            .any(|w| w[0] == "--mount" && Path::new(&w[1]) == mount);
    if proxy
        || args
            .iter()
            .take(2)
            .any(|a| a.contains("/.ops/") && is_op_path(a))
    {
        return PeerKind::Proxy;
    }
    let exe = std::fs::read_link(format!("/proc/{pid}/exe")).unwrap_or_default();
    let base = exe.file_name().map(|n| n.to_string_lossy().into_owned());
    if matches!(
        base.as_deref(),
        Some("sh" | "bash" | "dash" | "zsh" | "ksh" | "busybox")
    ) {
        PeerKind::Maybe
    } else {
        PeerKind::Other
    }
}

// -------------------------------------------------------------------------------------
// The mount side.

struct Agent {
    reg: Registration,
    reader: BufReader<UnixStream>,
    writer: UnixStream,
    since: Instant,
}

/// The mount process's end of the proxies: accepts registrations, links chains, runs
/// them on the device. Stops (and removes its socket) on drop.
#[derive(Debug)]
pub struct OpsServer {
    socket: PathBuf,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl OpsServer {
    /// Listens on `socket` for the proxies of the mount at `mount`.
    pub fn start(fs: Arc<MetalFs>, socket: &Path, log: bool) -> io::Result<OpsServer> {
        let _ = std::fs::remove_file(socket);
        let listener = UnixListener::bind(socket).map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("cannot listen on {}: {e}", socket.display()),
            )
        })?;
        listener.set_nonblocking(true)?;
        let stop = Arc::new(AtomicBool::new(false));
        let stop2 = Arc::clone(&stop);
        let thread = std::thread::Builder::new()
            .name("csx-ops".into())
            .spawn(move || serve(listener, fs, stop2, log))?;
        Ok(OpsServer {
            socket: socket.to_path_buf(),
            stop,
            thread: Some(thread),
        })
    }

    pub fn socket(&self) -> &Path {
        &self.socket
    }
}

impl Drop for OpsServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        let _ = std::fs::remove_file(&self.socket);
    }
}

fn serve(listener: UnixListener, fs: Arc<MetalFs>, stop: Arc<AtomicBool>, log: bool) {
    let pool: Arc<Mutex<HashMap<u32, Agent>>> = Arc::new(Mutex::new(HashMap::new()));
    let mut placed = HashSet::new();
    let registering = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut runners = Vec::new();
    while !stop.load(Ordering::Acquire) {
        match listener.accept() {
            Ok((stream, _)) => {
                // Read on a thread of its own: a proxy slow to register holds up no other.
                if registering.load(Ordering::Acquire) >= REGISTERING_MAX {
                    eprintln!("csx: operator proxy refused: {REGISTERING_MAX} registrations are being read");
                    continue;
                }
                registering.fetch_add(1, Ordering::AcqRel);
                let (pool, registering) = (Arc::clone(&pool), Arc::clone(&registering));
                std::thread::spawn(move || {
                    if let Err(e) = register(stream, &pool) {
                        eprintln!("csx: operator proxy refused: {e}");
                    }
                    registering.fetch_sub(1, Ordering::AcqRel);
                });
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(5));
            }
            Err(e) => {
                eprintln!("csx: operator socket: {e}");
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        placed.retain(|&pid| alive(pid));
        let chains = {
            let mut p = pool.lock().unwrap_or_else(|e| e.into_inner());
            reconcile(&mut p, &placed, log);
            ready_chains(&mut p)
        };
        for chain in chains {
            placed.extend(chain.iter().map(|a| a.reg.pid));
            let fs = Arc::clone(&fs);
            let stop = Arc::clone(&stop);
            runners.push(std::thread::spawn(move || {
                run_chain(&fs, chain, log, &stop)
            }));
        }
        runners.retain(|r| !r.is_finished());
    }
    for r in runners {
        let _ = r.join();
    }
}

/// The pid and uid of the process at the other end of `s` (SO_PEERCRED).
fn peer(s: &UnixStream) -> io::Result<(u32, u32)> {
    use std::os::fd::AsRawFd as _;
    let mut cred = libc::ucred {
        pid: 0,
        uid: 0,
        gid: 0,
    };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: `cred` and `len` are writable and `len` states `cred`'s size.
    let rc = unsafe {
        libc::getsockopt(
            s.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut cred as *mut libc::ucred).cast(),
            &mut len,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok((cred.pid as u32, cred.uid))
}

fn register(stream: UnixStream, pool: &Mutex<HashMap<u32, Agent>>) -> io::Result<()> {
    // Only the mount's user (or root) runs its operators, and a proxy speaks for itself.
    let (peer_pid, peer_uid) = peer(&stream)?;
    // SAFETY: geteuid cannot fail and touches no memory.
    let me = unsafe { libc::geteuid() };
    if peer_uid != me && peer_uid != 0 {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!("uid {peer_uid} may not run operators on a mount of uid {me}"),
        ));
    }
    stream.set_nonblocking(false)?;
    let writer = stream.try_clone()?;
    let mut reader = BufReader::new(stream);
    let line = registration_line(&mut reader)?;
    reader.get_ref().set_read_timeout(None)?;
    let reg: Registration = serde_json::from_slice(&line).map_err(|e| {
        io::Error::new(io::ErrorKind::InvalidData, format!("bad registration: {e}"))
    })?;
    if reg.pid != peer_pid {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!(
                "a registration claims pid {} but comes from pid {peer_pid}",
                reg.pid
            ),
        ));
    }
    let mut p = pool.lock().unwrap_or_else(|e| e.into_inner());
    p.insert(
        reg.pid,
        Agent {
            reg,
            reader,
            writer,
            since: Instant::now(),
        },
    );
    Ok(())
}

/// The most a registration line may hold: a proxy's words and two ends.
const REGISTRATION_SIZE_MAX: usize = 64 << 10;
/// How long a proxy may take to send its registration, all of it (a proxy sends it at
/// once; a peer that trickles it is ended).
const REGISTER_WAIT: Duration = Duration::from_secs(2);
/// Registrations read at once (each on its own thread); more connections are refused.
const REGISTERING_MAX: usize = 64;

/// The first line from a proxy, under one deadline for all of it and a size limit;
/// bytes after it stay in `reader` (a host stdin's first payload).
fn registration_line(reader: &mut BufReader<UnixStream>) -> io::Result<Vec<u8>> {
    let deadline = Instant::now() + REGISTER_WAIT;
    let mut line = Vec::new();
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!(
                    "no whole registration within {} s ({} bytes came)",
                    REGISTER_WAIT.as_secs(),
                    line.len()
                ),
            ));
        }
        reader.get_ref().set_read_timeout(Some(left))?;
        let buf = match reader.fill_buf() {
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
                ) =>
            {
                continue
            }
            other => other?,
        };
        if buf.is_empty() {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "the proxy closed its socket before its registration ended",
            ));
        }
        let (n, done) = match buf.iter().position(|&b| b == b'\n') {
            Some(i) => (i + 1, true),
            None => (buf.len(), false),
        };
        line.extend_from_slice(&buf[..n]);
        reader.consume(n);
        if line.len() > REGISTRATION_SIZE_MAX {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("a registration longer than {REGISTRATION_SIZE_MAX} bytes"),
            ));
        }
        if done {
            return Ok(line);
        }
    }
}

/// Whether process `pid` exists.
fn alive(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

/// Turns every peer claim that cannot become a link into a host end, so that both sides
/// of a pipe agree. Each proxy decides alone, at its own moment, what is at the other
/// end of its pipe (the other side may not have exec'd yet, or may sleep in a fork), so
/// two neighbours can disagree: one saw a proxy, the other did not. A claim is denied
/// when its peer registered claiming something else (now, or earlier: `placed` holds the
/// proxies already taken into a chain), died without registering, or has not come
/// within [`LINK_WAIT`]. A denied stdin claim tells that proxy to stream its stdin; a
/// denied stdout claim needs nothing (the proxy writes what the mount sends it).
fn reconcile(pool: &mut HashMap<u32, Agent>, placed: &HashSet<u32>, log: bool) {
    let denied = |a: &Agent, claim: &End, back: fn(&Registration) -> &End| {
        let End::Peer(p) = *claim else {
            return false;
        };
        match pool.get(&p) {
            Some(b) => *back(&b.reg) != End::Peer(a.reg.pid),
            None => placed.contains(&p) || !alive(p) || a.since.elapsed() > LINK_WAIT,
        }
    };
    let changes: Vec<(u32, bool, bool)> = pool
        .values()
        .map(|a| {
            (
                a.reg.pid,
                denied(a, &a.reg.input, |r| &r.output),
                denied(a, &a.reg.output, |r| &r.input),
            )
        })
        .filter(|&(_, i, o)| i || o)
        .collect();
    for (pid, input, output) in changes {
        let a = pool.get_mut(&pid).expect("in the pool");
        if log {
            eprintln!(
                "csx: operator `{}` (pid {pid}) claimed an operator at its {} that does not claim it back: that pipe goes through the host",
                a.reg.words.join(" "),
                if input { "stdin" } else { "stdout" }
            );
        }
        if input {
            a.reg.input = End::Host;
            // A proxy that is gone is seen when its chain runs.
            let _ = send_frame(&mut a.writer, TAG_FEED, &[]);
        }
        if output {
            a.reg.output = End::Host;
        }
    }
}

/// Removes and returns every chain whose members have all registered: from a head whose
/// input is not a peer, along mutual peer links, to a tail whose output is not a peer. A
/// link one side claims and the other denies is no link: both sides treat it as host.
fn ready_chains(pool: &mut HashMap<u32, Agent>) -> Vec<Vec<Agent>> {
    let mutual_in = |pool: &HashMap<u32, Agent>, a: &Agent| match a.reg.input {
        End::Peer(p) => pool.get(&p).map(|b| b.reg.output == End::Peer(a.reg.pid)),
        _ => Some(false),
    };
    let mut out = Vec::new();
    let heads: Vec<u32> = pool
        .values()
        .filter(|a| mutual_in(pool, a) == Some(false))
        .map(|a| a.reg.pid)
        .collect();
    'heads: for head in heads {
        let mut chain = vec![head];
        loop {
            let a = &pool[chain.last().expect("never empty")];
            match a.reg.output {
                End::Peer(p) => match pool.get(&p) {
                    None => continue 'heads,
                    Some(b) if b.reg.input == End::Peer(a.reg.pid) => chain.push(p),
                    Some(_) => break,
                },
                _ => break,
            }
        }
        out.push(
            chain
                .iter()
                .map(|pid| pool.remove(pid).expect("in the pool"))
                .collect(),
        );
    }
    out
}

/// Frames written to a proxy's stdout.
struct FrameWriter(UnixStream);

impl Write for FrameWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let mut head = [TAG_DATA; 9];
        head[1..].copy_from_slice(&(buf.len() as u64).to_le_bytes());
        self.0.write_all(&head)?;
        self.0.write_all(buf)?;
        Ok(buf.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        self.0.flush()
    }
}

fn send_end(w: &mut UnixStream, o: &Outcome) -> io::Result<()> {
    let body = serde_json::to_vec(o).map_err(io::Error::other)?;
    send_frame(w, TAG_END, &body)
}

fn send_frame(w: &mut UnixStream, tag: u8, body: &[u8]) -> io::Result<()> {
    let mut head = [tag; 9];
    head[1..].copy_from_slice(&(body.len() as u64).to_le_bytes());
    w.write_all(&head)?;
    w.write_all(body)
}

/// Whether the process at the other end of `s` is gone: it closed its socket (at exit,
/// whatever killed it), which the mount sees as a hang-up.
fn hung_up(s: &UnixStream) -> bool {
    use std::os::fd::AsRawFd as _;
    let mut p = libc::pollfd {
        fd: s.as_raw_fd(),
        events: 0,
        revents: 0,
    };
    // SAFETY: `p` is one valid pollfd for the duration of the call; timeout 0.
    let n = unsafe { libc::poll(&mut p, 1, 0) };
    n == 1 && p.revents & (libc::POLLHUP | libc::POLLERR) != 0
}

/// Why a running chain was stopped from outside.
const STOPPED_GONE: &str = "every proxy of the chain is gone (killed, or its shell ended)";
const STOPPED_MOUNT: &str = "the mount is ending";

fn run_chain(fs: &MetalFs, mut chain: Vec<Agent>, log: bool, server_stop: &AtomicBool) {
    let names: Vec<String> = chain.iter().map(|a| a.reg.words.join(" ")).collect();
    let text = names.join(" | ");
    // A chain nobody waits for any more, or a mount that ends, stops the device runs.
    let stop = Arc::new(AtomicBool::new(false));
    let why: Mutex<&str> = Mutex::new("");
    let sockets: Vec<UnixStream> = chain
        .iter()
        .filter_map(|a| a.writer.try_clone().ok())
        .collect();
    let done = AtomicBool::new(false);
    let result = std::thread::scope(|scope| {
        scope.spawn(|| {
            while !done.load(Ordering::Acquire) {
                let reason = if server_stop.load(Ordering::Acquire) {
                    Some(STOPPED_MOUNT)
                } else if !sockets.is_empty() && sockets.iter().all(hung_up) {
                    Some(STOPPED_GONE)
                } else {
                    None
                };
                if let Some(r) = reason {
                    *why.lock().unwrap_or_else(|e| e.into_inner()) = r;
                    stop.store(true, Ordering::Release);
                    return;
                }
                std::thread::sleep(WATCH);
            }
        });
        let r = run_stages(fs, &mut chain, &stop);
        done.store(true, Ordering::Release);
        r
    });
    let result = result.map_err(|e| match e {
        PipeError::Stopped(_) => {
            PipeError::Stopped((*why.lock().unwrap_or_else(|e| e.into_inner())).to_owned())
        }
        e => e,
    });
    finish_chain(chain, &text, result, log);
}

fn run_stages(
    fs: &MetalFs,
    chain: &mut [Agent],
    stop: &Arc<AtomicBool>,
) -> Result<pipe::PipeReport, PipeError> {
    {
        let ends = (
            &chain.first().expect("a head").reg.input,
            &chain.last().expect("a tail").reg.output,
        );
        if matches!(ends.0, End::Peer(_)) || matches!(ends.1, End::Peer(_)) {
            return Err(PipeError::Invalid(
                "two operators disagree about the pipe between them (one saw an operator, the other did not); run the pipeline again".into(),
            ));
        }
        let stages = chain
            .iter()
            .enumerate()
            .map(|(i, a)| {
                let s = Catalogue.parse_stage(&a.reg.words)?;
                if s.source_only && i > 0 {
                    return Err(crate::ops::OpError::SourceNotFirst {
                        op: s.name,
                        index: i + 1,
                    });
                }
                Ok(s)
            })
            .collect::<Result<Vec<_>, _>>()?;
        let head = chain.first_mut().expect("a chain has a head");
        let source = if stages[0].source_only {
            Source::Nothing
        } else {
            match &head.reg.input {
                End::File(p) => Source::DeviceFile(p.clone()),
                End::Null => Source::Host(Box::new(io::empty())),
                _ => {
                    let reader = std::mem::replace(
                        &mut head.reader,
                        BufReader::new(head.writer.try_clone().map_err(|e| PipeError::Io {
                            what: "the proxy's socket".into(),
                            source: e,
                        })?),
                    );
                    Source::Host(Box::new(reader))
                }
            }
        };
        let tail = chain.last().expect("a chain has a tail");
        let sink = match &tail.reg.output {
            End::File(p) => Sink::DeviceFile(p.clone()),
            End::Null => Sink::Discard,
            _ => Sink::Host(Box::new(io::BufWriter::with_capacity(
                1 << 20,
                FrameWriter(tail.writer.try_clone().map_err(|e| PipeError::Io {
                    what: "the proxy's socket".into(),
                    source: e,
                })?),
            ))),
        };
        let opts = PipeOptions {
            stop: Some(Arc::clone(stop)),
            ..PipeOptions::default()
        };
        pipe::run(&fs.device(), &stages, source, sink, &opts)
    }
}

fn finish_chain(
    mut chain: Vec<Agent>,
    text: &str,
    result: Result<pipe::PipeReport, PipeError>,
    log: bool,
) {
    let reader_gone = matches!(&result, Err(PipeError::Io { source, .. }) if source.kind() == io::ErrorKind::BrokenPipe);
    let outcome = match &result {
        Ok(r) => Outcome {
            ok: true,
            status: 0,
            message: String::new(),
            stages: chain.len(),
            host_bytes: r.host_to_device + r.device_to_host,
            quiet: false,
        },
        Err(e) => Outcome {
            ok: false,
            status: if matches!(e, PipeError::Trap { .. }) {
                3
            } else if reader_gone {
                SIGPIPE_STATUS
            } else {
                1
            },
            message: format!("{text}: {e}"),
            stages: chain.len(),
            host_bytes: 0,
            quiet: reader_gone,
        },
    };
    if log {
        match &result {
            Ok(r) => eprintln!(
                "csx: pipe `{text}`: {} stage(s) fused on the device, {} bytes in, {} bytes out, {} payload bytes through the host",
                chain.len(),
                r.bytes_in,
                r.bytes_out,
                r.host_to_device + r.device_to_host
            ),
            Err(_) => eprintln!("csx: pipe failed: {}", outcome.message),
        }
    }
    for a in &mut chain {
        let _ = send_end(&mut a.writer, &outcome);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A holder at its other standard descriptor only, or (`at_std` false) at
    /// descriptor 3 only.
    fn seen(pid: u32, at_std: bool, holder: Holder) -> Seen {
        Seen {
            pid,
            at_std,
            elsewhere: (!at_std).then_some(3),
            holder,
        }
    }

    fn waiting(name: &str) -> Holder {
        Holder::Waiting(name.to_owned(), "61".to_owned())
    }

    #[test]
    fn the_one_proxy_at_the_other_end_is_the_peer() {
        let look = [seen(10, true, Holder::Proxy)];
        assert_eq!(judge(&look, &[], &[1]), Verdict::Peer(10));
        // The parent shell still holds the other end at another descriptor while it
        // starts the next stage: look again (it closes its copy then).
        let look = [
            seen(10, true, Holder::Proxy),
            seen(1, false, Holder::Busy("sh".into())),
        ];
        assert!(matches!(judge(&look, &[], &[1]), Verdict::Wait(_)));
    }

    /// A process holding the pipe at another descriptor only and not about to close it
    /// (`exec 3>&1`, a parent that keeps its copy and waits) may read or write it; so
    /// may the proxy itself through a second copy (`op 2>&1 | op`), and a process whose
    /// descriptors cannot be read: the pipe goes through the host, naming it.
    #[test]
    fn a_copy_of_the_pipe_at_another_descriptor_or_out_of_sight_sends_it_through_the_host() {
        for other in [
            waiting("sh"),
            Holder::Program("sleep".into()),
            Holder::Proxy,
        ] {
            let look = [
                seen(10, true, Holder::Proxy),
                seen(11, false, other.clone()),
            ];
            let Verdict::Host(why) = judge(&look, &[], &[1]) else {
                panic!("{other:?} holds a copy, yet the proxy was taken for the peer")
            };
            assert!(
                why.contains("pid 11") && why.contains("descriptor 3"),
                "{why}"
            );
        }
        let mut both = seen(10, true, Holder::Proxy);
        both.elsewhere = Some(2);
        let Verdict::Host(why) = judge(&[both], &[], &[]) else {
            panic!("a proxy holding a second copy was taken for the peer")
        };
        assert!(
            why.contains("pid 10") && why.contains("descriptor 2"),
            "{why}"
        );
        let look = [seen(10, true, Holder::Proxy)];
        let Verdict::Host(why) = judge(&look, &[77], &[]) else {
            panic!("a process out of sight was taken to hold nothing")
        };
        assert!(
            why.contains("pid 77") && why.contains("cannot be read"),
            "{why}"
        );
    }

    /// Out of sight, a process counts as a possible holder unless it is gone or started
    /// before the session's leader (compared by start time).
    #[test]
    fn a_process_out_of_sight_counts_unless_older_than_the_session() {
        let me = std::process::id();
        assert!(may_hold_our_pipes(me, session_start()));
        assert!(may_hold_our_pipes(me, None));
        assert!(!may_hold_our_pipes(me, Some(u64::MAX)));
        assert!(!may_hold_our_pipes(u32::MAX, None));
    }

    #[test]
    fn a_proxy_sharing_its_end_with_another_reader_or_writer_is_no_peer() {
        // `{ op < f; echo x; } | op`: the subshell waits for the first operator, then
        // writes into the same pipe.
        for other in [waiting("sh"), Holder::Program("cat".into())] {
            let look = [seen(10, true, Holder::Proxy), seen(11, true, other.clone())];
            let Verdict::Host(why) = judge(&look, &[], &[]) else {
                panic!("{other:?} shares the pipe, yet the proxy was taken for the peer")
            };
            assert!(why.contains("pid 10") && why.contains("pid 11"), "{why}");
        }
        // While that other one may still become something else, look again.
        let look = [
            seen(10, true, Holder::Proxy),
            seen(11, true, Holder::Busy("sh".into())),
        ];
        assert!(matches!(judge(&look, &[], &[]), Verdict::Wait(_)));
        // Two proxies at the other end (`op | { op; op; }`) are no one peer either.
        let look = [seen(10, true, Holder::Proxy), seen(11, true, Holder::Proxy)];
        assert!(matches!(judge(&look, &[], &[]), Verdict::Host(_)));
    }

    #[test]
    fn a_process_that_may_still_become_a_proxy_is_waited_for() {
        let look = [seen(10, true, Holder::Busy("sh".into()))];
        assert!(matches!(judge(&look, &[], &[]), Verdict::Wait(_)));
        // A forked child before its dup2: it holds the pipe at another descriptor yet.
        let look = [seen(10, false, Holder::Busy("sh".into()))];
        assert!(matches!(judge(&look, &[], &[]), Verdict::Wait(_)));
        // An ancestor that is a proxy is no peer, and is not waited for beyond the limit.
        let look = [seen(3, true, Holder::Proxy)];
        assert!(matches!(judge(&look, &[], &[3]), Verdict::Wait(_)));
    }

    #[test]
    fn a_settled_reader_or_nobody_sends_the_pipe_through_the_host() {
        let look = [seen(10, true, waiting("bash"))];
        let Verdict::Host(why) = judge(&look, &[], &[]) else {
            panic!("a waiting shell was taken for a proxy to be")
        };
        assert!(
            why.starts_with("peer is not a proxy") && why.contains("system call 61"),
            "{why}"
        );
        assert!(matches!(judge(&[], &[], &[]), Verdict::Host(_)));
        let look = [seen(1, false, waiting("python3"))];
        assert!(matches!(judge(&look, &[], &[1]), Verdict::Host(_)));
    }
}

//! Kill campaign: writers put and delete files on a served device while the writers, the
//! daemon or both are killed with SIGKILL at random moments, half the time with a
//! simulated power loss; after every kill the device is restarted and every acknowledged
//! file is checked byte for byte.
//!
//! What "acknowledged" means: `Device::put_file` returned (it renames a staged temporary
//! over the target and flushes), or `Device::delete_file` then `Device::flush` returned.
//! The writer prints `start` before each operation and `ack` after it, so after a kill
//! each path must hold the last acknowledged state or that of an operation started
//! since, nothing else
//! (no half file, no older version, no resurrected delete). Between operations a writer
//! also writes a scratch file without flushing (never acknowledged), so a power loss has
//! unsynced writes to drop.
//!
//! What the power loss simulates (`csx_device::nvm::UNDO_LOG_ENV`): the daemon's image
//! writes since its last `fdatasync` are logged with the bytes they overwrote; after the
//! SIGKILL each of them is kept or undone at random, newest first, so the image holds
//! what a power cut at that moment could leave on the media (synced bytes, plus any
//! subset of the unsynced writes the kernel had written back). The metadata database is
//! not rolled back: it is redb's, which fsyncs each commit and whose commit protocol is
//! its own; a commit that had not returned may or may not be there, as after a power
//! loss. Not simulated: reordering inside one write, a lying drive.
//!
//! Time: `CSX_CAMPAIGN_POINTS` kill points (default 32, about 30 s; `make soak` runs
//! 1,000). `CSX_CAMPAIGN_SEED` picks the random choices.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use csx_device::nvm::{apply_undo_log, UNDO_LOG_ENV};
use csx_host::Device;

use crate::durability::{fresh_device, DAEMON_KIND_ENV, DAEMON_STATE_ENV};
use csx_testkit::bytes::seeded;

const WRITER_URI_ENV: &str = "CSX_IT_CAMPAIGN_URI";
const WRITER_ID_ENV: &str = "CSX_IT_CAMPAIGN_WRITER";
const WRITER_SEED_ENV: &str = "CSX_IT_CAMPAIGN_SEED_BASE";
const WRITER_DIR_ENV: &str = "CSX_IT_CAMPAIGN_DIR";
const WRITERS: u64 = 2;
const FILES_PER_WRITER: u64 = 6;

pub(crate) struct Rng(pub(crate) u64);

impl Rng {
    pub(crate) fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    pub(crate) fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// The length of the version of a file written with `seed`: 0 to 3 MiB, some exactly
/// a chunk or a block, so puts of one and of several chunks both happen.
pub(crate) fn version_len(seed: u64) -> usize {
    match seed % 7 {
        0 => 0,
        1 => 4096,
        2 => 1 << 20,
        _ => (seed.wrapping_mul(0x2545_F491_4F6C_DD1D) % (3 << 20)) as usize,
    }
}

/// Run by a child process: puts and deletes files under `/c/w<ID>` until killed,
/// printing `start PATH SEED` / `ack PATH SEED` (`SEED` 0: a delete).
#[test]
fn helper_campaign_writer() {
    let Ok(uri) = std::env::var(WRITER_URI_ENV) else {
        return; // An ordinary test run: nothing to do.
    };
    let id: u64 = std::env::var(WRITER_ID_ENV).unwrap().parse().unwrap();
    let base: u64 = std::env::var(WRITER_SEED_ENV).unwrap().parse().unwrap();
    let local = Path::new(&std::env::var(WRITER_DIR_ENV).unwrap()).join(format!("w{id}"));
    let dev = Device::open(&uri).expect("the writer connects");
    let mut rng = Rng(base | 1);
    let mut out = std::io::stdout();
    for i in 1.. {
        if rng.below(4) == 0 {
            // Unacknowledged writes (no flush): a power loss may drop them, and must
            // drop nothing else.
            let scratch = format!("/c/w{id}/scratch");
            let _ = dev.write_file(&scratch, rng.below(8) << 20, &seeded(1 << 20, i));
        }
        let path = format!("/c/w{id}/f{}", rng.below(FILES_PER_WRITER));
        if rng.below(6) == 0 {
            writeln!(out, "start {path} 0").unwrap();
            out.flush().unwrap();
            let gone = match dev.delete_file(&path) {
                Ok(()) => true,
                Err(e) => e.to_string().contains("no such file"),
            };
            if !gone || dev.flush().is_err() {
                return; // The daemon died: the campaign kills this writer next.
            }
            writeln!(out, "ack {path} 0").unwrap();
            out.flush().unwrap();
            continue;
        }
        let seed = base + i;
        std::fs::write(&local, seeded(version_len(seed), seed)).unwrap();
        writeln!(out, "start {path} {seed}").unwrap();
        out.flush().unwrap();
        if dev.put_file(&local, &path, &mut |_| {}).is_err() {
            return; // The daemon died: the campaign kills this writer next.
        }
        writeln!(out, "ack {path} {seed}").unwrap();
        out.flush().unwrap();
    }
}

/// A child process this test started, killed and reaped when dropped.
pub(crate) struct Proc(pub(crate) Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

pub(crate) fn start_daemon(state: &Path, shm: bool, undo_log: Option<&Path>) -> (Proc, String) {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args([
        "--exact",
        "durability::helper_daemon",
        "--nocapture",
        "--test-threads=1",
    ])
    .env(DAEMON_STATE_ENV, state)
    .env(DAEMON_KIND_ENV, if shm { "shm" } else { "tcp" })
    .env_remove(UNDO_LOG_ENV)
    .stdout(Stdio::piped())
    .stderr(Stdio::null());
    if let Some(log) = undo_log {
        cmd.env(UNDO_LOG_ENV, log);
    }
    let mut child = cmd.spawn().expect("the daemon starts");
    let lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let uri = lines
        .map_while(Result::ok)
        .find_map(|l| Some(l.split_once("uri ")?.1.trim().to_owned()))
        .expect("the daemon prints its uri");
    (Proc(child), uri)
}

/// A writer child and the lines it printed (collected by a thread until it dies).
fn start_writer(
    uri: &str,
    id: u64,
    base: u64,
    dir: &Path,
) -> (Proc, std::thread::JoinHandle<Vec<String>>) {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "campaign::helper_campaign_writer",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(WRITER_URI_ENV, uri)
        .env(WRITER_ID_ENV, id.to_string())
        .env(WRITER_SEED_ENV, base.to_string())
        .env(WRITER_DIR_ENV, dir)
        .env_remove(UNDO_LOG_ENV)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("the writer starts");
    let stdout = child.stdout.take().unwrap();
    let lines = std::thread::spawn(move || {
        BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
            .collect()
    });
    (Proc(child), lines)
}

/// What a path may hold: its last acknowledged version (seed 0 for absent), or the
/// outcome of any operation started on it since (an unacknowledged one may have
/// happened, and a later one too).
#[derive(Default, Clone, Debug)]
pub(crate) struct PathState {
    acked: u64,
    in_flight: Vec<u64>,
    /// Seeds in flight whose write goes into the file itself (through a mount, truncate
    /// then write): a flush by anyone may have committed any prefix of that version.
    prefix_ok: Vec<u64>,
}

pub(crate) fn apply_lines(model: &mut BTreeMap<String, PathState>, lines: &[String]) -> usize {
    let mut acks = 0;
    for line in lines {
        // The harness may print "test NAME ... " before the first line.
        let line = line.rsplit_once("... ").map_or(line.as_str(), |(_, l)| l);
        let mut words = line.split_whitespace();
        let (Some(what), Some(path), Some(seed)) = (words.next(), words.next(), words.next())
        else {
            continue;
        };
        let Ok(seed) = seed.parse::<u64>() else {
            continue;
        };
        let st = model.entry(path.to_owned()).or_default();
        match what {
            "start" => st.in_flight.push(seed),
            "startp" => {
                st.in_flight.push(seed);
                st.prefix_ok.push(seed);
            }
            "ack" => {
                st.acked = seed;
                st.in_flight.clear();
                st.prefix_ok.clear();
                acks += 1;
            }
            _ => {}
        }
    }
    acks
}

/// After a restart each path is settled to what it holds, and no temporary of an
/// interrupted put is left (a live daemon keeps a dead client's temporary until it
/// restarts, as documented).
pub(crate) fn check(
    dev: &Device,
    model: &mut BTreeMap<String, PathState>,
    point: u64,
    restarted: bool,
) {
    for (path, st) in model.iter_mut() {
        let got = match dev.read_file(path, 0, u64::MAX) {
            Ok(bytes) => Some(bytes),
            Err(e) if e.to_string().contains("no such file") => None,
            Err(e) => panic!("kill point {point}: reading {path}: {e}"),
        };
        let holds = |seed: u64| match (&got, seed) {
            (None, 0) => true,
            // A path whose last state was a torn write: whatever it holds, it was never
            // acknowledged, and a delete or a truncate may have followed.
            (_, u64::MAX) => true,
            (Some(b), s) if s != 0 => *b == seeded(version_len(s), s),
            _ => false,
        };
        let prefix_of = |seed: u64| match &got {
            Some(b) if st.prefix_ok.contains(&seed) => {
                let whole = seeded(version_len(seed), seed);
                b.len() <= whole.len() && *b == whole[..b.len()]
            }
            _ => false,
        };
        let now = if holds(st.acked) {
            st.acked
        } else if let Some(&s) = st.in_flight.iter().find(|s| holds(**s)) {
            s
        } else if st.in_flight.iter().any(|s| prefix_of(*s)) {
            // A torn in-place write, never acknowledged: settled as absent-or-anything
            // until the next acknowledgement (kept in flight, so any prefix stays legal).
            if restarted {
                st.acked = u64::MAX;
            }
            continue;
        } else {
            let listing: Vec<(String, u64)> = dev
                .list_files("/")
                .map(|l| {
                    l.files
                        .into_iter()
                        .map(|f| (f.path, f.size_bytes))
                        .collect()
                })
                .unwrap_or_default();
            panic!(
                "kill point {point}: {path} holds {:?} bytes, neither its acknowledged version (seed {}) nor one in flight (seeds {:?}); the device holds {listing:?}",
                got.as_ref().map(Vec::len),
                st.acked,
                st.in_flight,
            );
        };
        if !restarted {
            // A live daemon may still run the commands a killed writer had sent (its
            // rename may land after this check): the one in flight stays possible
            // until the daemon restarts.
            continue;
        }
        *st = PathState {
            acked: now,
            ..PathState::default()
        };
    }
    if !restarted {
        return;
    }
    let partials = dev
        .list_files(csx_host::proto::limits::PARTIAL_DIR)
        .unwrap()
        .files;
    assert!(
        partials.is_empty(),
        "kill point {point}: temporaries left: {partials:?}"
    );
}

/// The number in environment variable `name`, else `default`.
pub(crate) fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

#[test]
fn kill_campaign_keeps_every_acknowledged_byte() {
    let points = env_u64("CSX_CAMPAIGN_POINTS", 32);
    let seed = env_u64("CSX_CAMPAIGN_SEED", 0x5EED);
    let dir = fresh_device();
    let state = dir.path().join("dev");
    let log = dir.path().join("undo.log");
    let mut rng = Rng(seed | 1);
    let mut model: BTreeMap<String, PathState> = BTreeMap::new();
    let (mut acks, mut power_points, mut undone_total, mut unsynced_total) = (0, 0, 0, 0);
    let mut kinds = [0u64; 3];
    for point in 0..points {
        let shm = point % 2 == 1;
        let power = rng.below(2) == 0;
        if std::env::var_os("CSX_CAMPAIGN_VERBOSE").is_some() {
            eprintln!(
                "kill point {point}: shm {shm}, power loss {power}, state {}",
                state.display()
            );
        }
        let (daemon, uri) = start_daemon(&state, shm, power.then_some(log.as_path()));
        let writers: Vec<_> = (0..WRITERS)
            .map(|w| start_writer(&uri, w, (point + 1) * 1_000_000 + w * 100_000, dir.path()))
            .collect();
        std::thread::sleep(Duration::from_millis(100 + rng.below(800)));
        // 0: the writers only, 1: the daemon only, 2: both at once.
        let target = rng.below(3);
        if std::env::var_os("CSX_CAMPAIGN_VERBOSE").is_some() {
            eprintln!("kill point {point}: target {target}");
        }
        kinds[target as usize] += 1;
        let mut daemon = Some(daemon);
        if target >= 1 {
            drop(daemon.take()); // SIGKILL
        }
        let mut lines = Vec::new();
        for (proc_, reader) in writers {
            drop(proc_); // SIGKILL (already dead if the daemon's death ended it)
            lines.extend(reader.join().unwrap());
        }
        acks += apply_lines(&mut model, &lines);
        if let Some(d) = daemon.take() {
            // The writers died, the daemon lives: their acknowledged work is visible
            // at once; then the daemon goes too.
            let dev = Device::open(&uri).unwrap();
            check(&dev, &mut model, point, false);
            drop(dev);
            drop(d);
        }
        if power {
            let keep_seed = rng.next();
            let mut keep = Rng(keep_seed | 1);
            let (unsynced, undone) =
                apply_undo_log(&state.join("nvm.img"), &log, |_| keep.below(2) == 0)
                    .expect("the power-loss log applies");
            power_points += 1;
            unsynced_total += unsynced;
            undone_total += undone;
        }
        let (daemon, uri) = start_daemon(&state, shm, None);
        let dev = Device::open(&uri).unwrap();
        check(&dev, &mut model, point, true);
        dev.close().unwrap();
        drop(daemon);
    }
    println!(
        "kill campaign: {points} kill points (writers only {}, daemon only {}, both {}), {power_points} with power loss ({unsynced_total} unsynced image writes, {undone_total} undone), {acks} acknowledged operations, {} paths checked after every point: all held",
        kinds[0],
        kinds[1],
        kinds[2],
        model.len()
    );
    assert!(
        acks > 0,
        "the writers acknowledged nothing: the campaign tested nothing"
    );
}

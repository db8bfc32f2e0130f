//! Random operation sequences against a model, through the mount and through the library
//! (no FUSE), and the mount over daemons (shm, tcp).

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::Arc;

use csx_fs::mount;
use csx_fs::MetalFs;
use csx_host::Device;
use csx_server::{ListenAddr, Server, ServerConfig};
use proptest::prelude::*;

use crate::device;

const FILES: [&str; 4] = ["a", "b", "d/x", "d/e/y"];
const DIRS: [&str; 3] = ["d", "d/e", "z"];

#[derive(Debug, Clone)]
enum Op {
    Write {
        file: usize,
        offset: u64,
        len: usize,
        seed: u8,
    },
    Truncate {
        file: usize,
        len: u64,
    },
    Unlink {
        file: usize,
    },
    Mkdir {
        dir: usize,
    },
    Rmdir {
        dir: usize,
    },
    RenameFile {
        from: usize,
        to: usize,
    },
    RenameDir {
        from: usize,
        to: usize,
    },
    Sync,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0..FILES.len(), 0u64..20_000, 0usize..9000, any::<u8>())
            .prop_map(|(file, offset, len, seed)| Op::Write { file, offset, len, seed }),
        1 => (0..FILES.len(), 0u64..30_000).prop_map(|(file, len)| Op::Truncate { file, len }),
        1 => (0..FILES.len()).prop_map(|file| Op::Unlink { file }),
        2 => (0..DIRS.len()).prop_map(|dir| Op::Mkdir { dir }),
        1 => (0..DIRS.len()).prop_map(|dir| Op::Rmdir { dir }),
        1 => (0..FILES.len(), 0..FILES.len()).prop_map(|(from, to)| Op::RenameFile { from, to }),
        1 => (0..DIRS.len(), 0..DIRS.len()).prop_map(|(from, to)| Op::RenameDir { from, to }),
        1 => Just(Op::Sync),
    ]
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Node {
    File(Vec<u8>),
    Dir,
}

/// POSIX as the mount shows it: a path needs its parent to be a directory.
#[derive(Debug, Default)]
struct Model(BTreeMap<String, Node>);

fn parent(p: &str) -> Option<&str> {
    p.rfind('/').map(|i| &p[..i])
}

impl Model {
    fn parent_ok(&self, p: &str) -> bool {
        parent(p).is_none_or(|d| self.0.get(d) == Some(&Node::Dir))
    }

    fn has_children(&self, d: &str) -> bool {
        let prefix = format!("{d}/");
        self.0.keys().any(|k| k.starts_with(&prefix))
    }

    /// Applies `op`; returns whether it should succeed.
    fn apply(&mut self, op: &Op) -> bool {
        match *op {
            Op::Write {
                file,
                offset,
                len,
                seed,
            } => {
                let p = FILES[file];
                if !self.parent_ok(p) || self.0.get(p) == Some(&Node::Dir) {
                    return false;
                }
                let Node::File(data) = self.0.entry(p.to_owned()).or_insert(Node::File(vec![]))
                else {
                    unreachable!()
                };
                let end = offset as usize + len;
                if data.len() < end && len > 0 {
                    data.resize(end, 0);
                }
                for i in 0..len {
                    data[offset as usize + i] = seed.wrapping_add(i as u8);
                }
                true
            }
            Op::Truncate { file, len } => match self.0.get_mut(FILES[file]) {
                Some(Node::File(data)) => {
                    data.resize(len as usize, 0);
                    true
                }
                _ => false,
            },
            Op::Unlink { file } => match self.0.get(FILES[file]) {
                Some(Node::File(_)) => {
                    self.0.remove(FILES[file]);
                    true
                }
                _ => false,
            },
            Op::Mkdir { dir } => {
                let p = DIRS[dir];
                if !self.parent_ok(p) || self.0.contains_key(p) {
                    return false;
                }
                self.0.insert(p.to_owned(), Node::Dir);
                true
            }
            Op::Rmdir { dir } => {
                let p = DIRS[dir];
                if self.0.get(p) != Some(&Node::Dir) || self.has_children(p) {
                    return false;
                }
                self.0.remove(p);
                true
            }
            Op::RenameFile { from, to } => {
                let (f, t) = (FILES[from], FILES[to]);
                if !matches!(self.0.get(f), Some(Node::File(_)))
                    || !self.parent_ok(t)
                    || self.0.get(t) == Some(&Node::Dir)
                {
                    return false;
                }
                let node = self.0.remove(f).unwrap();
                self.0.insert(t.to_owned(), node);
                true
            }
            Op::RenameDir { from, to } => {
                let (f, t) = (DIRS[from], DIRS[to]);
                if self.0.get(f) != Some(&Node::Dir) || !self.parent_ok(t) {
                    return false;
                }
                if f == t {
                    return true;
                }
                if t.starts_with(&format!("{f}/")) {
                    return false;
                }
                match self.0.get(t) {
                    Some(Node::File(_)) => return false,
                    Some(Node::Dir) if self.has_children(t) => return false,
                    _ => {}
                }
                let prefix = format!("{f}/");
                let moved: Vec<String> = self
                    .0
                    .keys()
                    .filter(|k| k.as_str() == f || k.starts_with(&prefix))
                    .cloned()
                    .collect();
                self.0.remove(t);
                for k in moved {
                    let node = self.0.remove(&k).unwrap();
                    self.0.insert(format!("{t}{}", &k[f.len()..]), node);
                }
                true
            }
            Op::Sync => true,
        }
    }
}

/// Runs `op` through the mount at `mnt`; whether it succeeded.
fn through_mount(mnt: &Path, op: &Op) -> bool {
    let at = |p: &str| mnt.join(p);
    match *op {
        Op::Write {
            file,
            offset,
            len,
            seed,
        } => {
            let data: Vec<u8> = (0..len).map(|i| seed.wrapping_add(i as u8)).collect();
            fs::OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(false)
                .open(at(FILES[file]))
                .and_then(|f| {
                    if len == 0 {
                        Ok(())
                    } else {
                        f.write_all_at(&data, offset)
                    }
                })
                .is_ok()
        }
        Op::Truncate { file, len } => fs::OpenOptions::new()
            .write(true)
            .open(at(FILES[file]))
            .and_then(|f| f.set_len(len))
            .is_ok(),
        Op::Unlink { file } => fs::remove_file(at(FILES[file])).is_ok(),
        Op::Mkdir { dir } => fs::create_dir(at(DIRS[dir])).is_ok(),
        Op::Rmdir { dir } => fs::remove_dir(at(DIRS[dir])).is_ok(),
        Op::RenameFile { from, to } => {
            // rename(2) would also move a directory at FILES[from]: the model's files
            // are never directories, so ask only of files.
            fs::metadata(at(FILES[from])).is_ok_and(|m| m.is_file())
                && fs::rename(at(FILES[from]), at(FILES[to])).is_ok()
        }
        Op::RenameDir { from, to } => {
            fs::metadata(at(DIRS[from])).is_ok_and(|m| m.is_dir())
                && fs::rename(at(DIRS[from]), at(DIRS[to])).is_ok()
        }
        Op::Sync => fs::File::open(mnt).and_then(|f| f.sync_all()).is_ok(),
    }
}

/// What the mount shows, walked with std::fs.
fn walk(mnt: &Path) -> BTreeMap<String, Node> {
    fn go(root: &Path, rel: &str, out: &mut BTreeMap<String, Node>) {
        for e in fs::read_dir(root.join(rel)).unwrap() {
            let e = e.unwrap();
            let name = e.file_name().into_string().unwrap();
            let p = if rel.is_empty() {
                name
            } else {
                format!("{rel}/{name}")
            };
            if e.file_type().unwrap().is_dir() {
                out.insert(p.clone(), Node::Dir);
                go(root, &p, out);
            } else {
                out.insert(p.clone(), Node::File(fs::read(root.join(&p)).unwrap()));
            }
        }
    }
    let mut out = BTreeMap::new();
    go(mnt, "", &mut out);
    out
}

/// The same through the library: the kernel's checks (parent is a directory, kinds of a
/// rename) done here, the operation by `MetalFs`.
fn through_library(fs: &MetalFs, op: &Op) -> bool {
    use csx_proto::EntryKind::{Dir, File};
    let abs = |p: &str| format!("/{p}");
    let kind = |p: &str| fs.stat(&abs(p)).ok().map(|a| a.kind);
    let parent_dir = |p: &str| parent(p).is_none_or(|d| kind(d) == Some(Dir));
    match *op {
        Op::Write {
            file,
            offset,
            len,
            seed,
        } => {
            let p = FILES[file];
            let data: Vec<u8> = (0..len).map(|i| seed.wrapping_add(i as u8)).collect();
            parent_dir(p)
                && kind(p) != Some(Dir)
                && fs.create(&abs(p), false).is_ok()
                && (len == 0 || fs.write(&abs(p), offset, &data).is_ok())
        }
        Op::Truncate { file, len } => {
            kind(FILES[file]) == Some(File) && fs.truncate(&abs(FILES[file]), len).is_ok()
        }
        Op::Unlink { file } => {
            kind(FILES[file]) == Some(File) && fs.unlink(&abs(FILES[file])).is_ok()
        }
        Op::Mkdir { dir } => parent_dir(DIRS[dir]) && fs.mkdir(&abs(DIRS[dir])).is_ok(),
        Op::Rmdir { dir } => kind(DIRS[dir]) == Some(Dir) && fs.rmdir(&abs(DIRS[dir])).is_ok(),
        Op::RenameFile { from, to } => {
            let (f, t) = (FILES[from], FILES[to]);
            kind(f) == Some(File)
                && parent_dir(t)
                && kind(t) != Some(Dir)
                && fs.rename(&abs(f), &abs(t)).is_ok()
        }
        Op::RenameDir { from, to } => {
            let (f, t) = (DIRS[from], DIRS[to]);
            kind(f) == Some(Dir) && parent_dir(t) && fs.rename(&abs(f), &abs(t)).is_ok()
        }
        Op::Sync => fs.sync().is_ok(),
    }
}

fn library_tree(fs: &MetalFs) -> BTreeMap<String, Node> {
    fn go(fs: &MetalFs, rel: &str, out: &mut BTreeMap<String, Node>) {
        for e in fs.list(&format!("/{rel}")).unwrap() {
            let p = if rel.is_empty() {
                e.name.clone()
            } else {
                format!("{rel}/{}", e.name)
            };
            if e.attr.kind == csx_proto::EntryKind::Dir {
                out.insert(p.clone(), Node::Dir);
                go(fs, &p, out);
            } else {
                let data = fs.read(&format!("/{p}"), 0, e.attr.size).unwrap();
                assert_eq!(data.len() as u64, e.attr.size);
                out.insert(p, Node::File(data));
            }
        }
    }
    let mut out = BTreeMap::new();
    go(fs, "", &mut out);
    out
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 12, ..ProptestConfig::default() })]

    #[test]
    fn mount_matches_the_model(ops in proptest::collection::vec(op(), 1..40)) {
        let fx = crate::Fixture::mount();
        let mut model = Model::default();
        for (i, op) in ops.iter().enumerate() {
            let want = model.apply(op);
            let got = through_mount(&fx.mnt(), op);
            prop_assert_eq!(got, want, "step {}: {:?}", i, op);
        }
        prop_assert_eq!(walk(&fx.mnt()), model.0.clone());
        // And the library reads the same tree.
        prop_assert_eq!(library_tree(&fx.fs), model.0);
    }

    #[test]
    fn library_matches_the_model(ops in proptest::collection::vec(op(), 1..40)) {
        let (_dir, dev) = device(64);
        let fs = MetalFs::new(dev);
        let mut model = Model::default();
        for (i, op) in ops.iter().enumerate() {
            let want = model.apply(op);
            let got = through_library(&fs, op);
            prop_assert_eq!(got, want, "step {}: {:?}", i, op);
        }
        prop_assert_eq!(library_tree(&fs), model.0);
    }
}

fn served_mount(listen: ListenAddr) {
    let (dir, dev) = device(64);
    let state = dir.path().join("dev");
    dev.close().unwrap();
    let server = Server::open(
        &state,
        ServerConfig {
            listen: vec![listen],
            token: None,
        },
    )
    .expect("serves");
    let uri = server.uris()[0].clone();
    let fs = Arc::new(MetalFs::new(Device::open(&uri).expect("connects")));
    let mnt = dir.path().join("mnt");
    fs::create_dir(&mnt).unwrap();
    let m = mount::spawn(fs.clone(), &mnt).expect("mounts over a daemon");
    fs::create_dir(mnt.join("d")).unwrap();
    let data: Vec<u8> = (0..2_500_000u32).map(|i| (i % 253) as u8).collect();
    fs::write(mnt.join("d/f"), &data).unwrap();
    assert!(fs::read(mnt.join("d/f")).unwrap() == data);
    // Another client of the daemon sees the files at once.
    let other = Device::open(&uri).unwrap();
    assert_eq!(other.stat("/d/f").unwrap().size_bytes, data.len() as u64);
    other.put_bytes("/from-outside", b"hi").unwrap();
    assert_eq!(fs::read(mnt.join("from-outside")).unwrap(), b"hi");
    m.unmount().unwrap();
    drop(other);
    Arc::try_unwrap(fs).unwrap().close().unwrap();
    server.shutdown().unwrap();
}

#[test]
fn mount_over_a_shm_daemon() {
    served_mount(ListenAddr::Shm(format!("csx-fs-{}", std::process::id())));
}

#[test]
fn mount_over_a_tcp_daemon() {
    served_mount(ListenAddr::Tcp("127.0.0.1:0".parse().unwrap()));
}

#[test]
fn a_mount_reconnects_when_its_daemon_comes_back() {
    let (dir, dev) = device(64);
    let state = dir.path().join("dev");
    dev.close().unwrap();
    let name = format!("csx-fs-reconnect-{}", std::process::id());
    let serve = || {
        Server::open(
            &state,
            ServerConfig {
                listen: vec![ListenAddr::Shm(name.clone())],
                token: None,
            },
        )
        .expect("serves")
    };
    let server = serve();
    let uri = server.uris()[0].clone();
    let fs = Arc::new(MetalFs::new(Device::open(&uri).expect("connects")));
    let mnt = dir.path().join("mnt");
    fs::create_dir(&mnt).unwrap();
    let m = mount::spawn(fs.clone(), &mnt).expect("mounts over a daemon");
    fs::write(mnt.join("before"), b"written before the restart").unwrap();
    server.shutdown().unwrap();
    // The daemon is gone: an error, not a hang.
    assert!(fs::read(mnt.join("before")).is_err());
    let server = serve();
    // Back: the mount connects again (a call may still fail while it does).
    let start = std::time::Instant::now();
    let got = loop {
        match fs::read(mnt.join("before")) {
            Ok(b) => break b,
            Err(e) => assert!(
                start.elapsed() < std::time::Duration::from_secs(10),
                "still failing after the daemon came back: {e}"
            ),
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    assert_eq!(got, b"written before the restart");
    fs::write(mnt.join("after"), b"and after").unwrap();
    assert_eq!(fs::read(mnt.join("after")).unwrap(), b"and after");
    m.unmount().unwrap();
    Arc::try_unwrap(fs).unwrap().close().unwrap();
    server.shutdown().unwrap();
}

//! Another local user against shm: it cannot answer in a device's place (the client
//! checks who serves the socket), cannot take a user's names (the sockets live in a
//! per-user directory the daemon makes and checks), and is not served by another
//! user's daemon unless that daemon serves other users.
//!
//! The other user is uid 65534 (nobody): the tests run as root and start helpers with
//! `setpriv`. One test, run in order, because the cases set `CSX_SHM_DIR`.

use std::io::Read;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use csx_device::{DeviceConfig, DeviceRuntime};
use csx_host::transport::shm::framing::{Hello, Welcome, WelcomeStatus};
use csx_host::transport::shm::{socket_path, ShmOptions, ShmTransport, SHM_DIR_ENV};
use csx_host::transport::Transport;
use csx_server::{ListenAddr, Server, ServerConfig, ServerOptions};

const NOBODY: u32 = 65534;

fn python() -> &'static str {
    // A system interpreter: user nobody cannot read root's version managers.
    if Path::new("/usr/bin/python3").exists() {
        "/usr/bin/python3"
    } else {
        "python3"
    }
}

/// Runs `script` with python as user nobody (or, with `as_root`, as root: the script
/// drops to nobody itself).
fn python_as_nobody(script: &str, args: &[&str], as_root: bool) -> Child {
    let mut cmd = if as_root {
        Command::new(python())
    } else {
        let mut c = Command::new("setpriv");
        c.args(["--reuid=65534", "--regid=65534", "--clear-groups", python()]);
        c
    };
    cmd.arg("-c")
        .arg(script)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("python3 and setpriv run (scripts/setup.sh installs them)")
}

fn serve(name: &str, options: ServerOptions) -> Result<(tempfile::TempDir, Server), String> {
    let dir = tempfile::tempdir().unwrap();
    let config = DeviceConfig {
        nvm_size_bytes: 4 << 20,
        slm_size_bytes: 4 << 20,
        state_size_bytes: 4096,
        engines: Some(1),
        ..DeviceConfig::default()
    };
    let device = DeviceRuntime::init(dir.path(), config).unwrap();
    let config = ServerConfig {
        listen: vec![ListenAddr::Shm(name.to_string())],
        token: None,
    };
    match Server::start_with(device, config, options) {
        Ok(s) => Ok((dir, s)),
        Err(e) => Err(e.to_string()),
    }
}

fn options() -> ShmOptions {
    ShmOptions {
        queue_depth: 4,
        host_memory_bytes: csx_host::transport::shm::HOST_MEMORY_MIN,
    }
}

fn set_dir(dir: Option<&Path>) {
    match dir {
        Some(d) => std::env::set_var(SHM_DIR_ENV, d),
        None => std::env::remove_var(SHM_DIR_ENV),
    }
}

fn line_of(child: &mut Child) -> String {
    let mut out = String::new();
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut out)
        .unwrap();
    out.trim().to_string()
}

#[test]
fn another_user_cannot_impersonate_squat_or_use_a_device() {
    assert_eq!(
        csx_host::transport::shm::my_uid(),
        0,
        "these cases need root (to act as user nobody too)"
    );
    let base = tempfile::tempdir().unwrap();

    // 1. A socket in this user's directory served by user nobody (bound by root, then
    //    listened on as nobody, which is whom SO_PEERCRED names): the client refuses
    //    it before it sends a byte.
    let dir = base.path().join("mine");
    std::fs::create_dir(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
    set_dir(Some(&dir));
    let sock = socket_path("squat");
    let mut squatter = python_as_nobody(
        "import os,socket,sys\n\
         s=socket.socket(socket.AF_UNIX); s.bind(sys.argv[1]); os.chmod(sys.argv[1],0o777)\n\
         os.setgroups([]); os.setgid(65534); os.setuid(65534)\n\
         s.listen(); print('ready', flush=True)\n\
         c,_=s.accept(); c.settimeout(10); print(len(c.recv(4096)), flush=True)",
        &[sock.to_str().unwrap()],
        true,
    );
    let mut ready = [0u8; 6];
    squatter
        .stdout
        .as_mut()
        .unwrap()
        .read_exact(&mut ready)
        .unwrap();
    let e = ShmTransport::connect("squat", &options()).expect_err("an impostor is refused");
    let text = e.to_string();
    assert!(
        text.contains(&format!(
            "served by user {NOBODY}, not by you (user 0) or root"
        )),
        "{text}"
    );
    assert_eq!(line_of(&mut squatter), "0", "the impostor received bytes");
    squatter.wait().unwrap();

    // 2. A directory user nobody made first, in place of this user's: neither the
    //    daemon nor a client uses it, and both say whose it is.
    let theirs = base.path().join("theirs");
    std::fs::set_permissions(base.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let mut mk = python_as_nobody(
        "import os,sys; os.mkdir(sys.argv[1], 0o700)",
        &[theirs.to_str().unwrap()],
        false,
    );
    assert!(mk.wait().unwrap().success());
    set_dir(Some(&theirs));
    let e = serve("owner", ServerOptions::new()).expect_err("a foreign directory is refused");
    assert!(
        e.contains(&format!("belongs to user {NOBODY}, not to you (user 0)")),
        "{e}"
    );
    let e = ShmTransport::connect("owner", &options()).expect_err("refused");
    assert!(
        e.to_string().contains(&format!("belongs to user {NOBODY}")),
        "{e}"
    );

    // 3. A directory others may write (as /dev/shm itself): refused.
    let open = base.path().join("open");
    std::fs::create_dir(&open).unwrap();
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o1777)).unwrap();
    set_dir(Some(&open));
    let e = serve("owner", ServerOptions::new()).expect_err("a shared directory is refused");
    assert!(e.contains("writable by other users (mode 1777)"), "{e}");

    // 4. The old shared place: nobody binds /dev/shm/csx-NAME.sock first; this user's
    //    daemon and clients use their own directory and never meet it.
    set_dir(None);
    let name = format!("squat-{}", std::process::id());
    let old = Path::new("/dev/shm").join(format!("csx-{name}.sock"));
    let mut old_squatter = python_as_nobody(
        "import socket,sys,time\n\
         s=socket.socket(socket.AF_UNIX); s.bind(sys.argv[1]); s.listen()\n\
         print('ready', flush=True); time.sleep(30)",
        &[old.to_str().unwrap()],
        false,
    );
    old_squatter
        .stdout
        .as_mut()
        .unwrap()
        .read_exact(&mut ready)
        .unwrap();
    let (_state, server) = serve(&name, ServerOptions::new()).expect("the owner serves its name");
    let dir_meta = std::fs::metadata(socket_path(&name).parent().unwrap()).unwrap();
    // This user's own directory: 0700, or 0711 if a daemon serving other users opened
    // it to them (search only); never listable or writable by others.
    let mode = dir_meta.permissions().mode() & 0o777;
    assert!(mode == 0o700 || mode == 0o711, "mode {mode:o}");
    let t = ShmTransport::connect(&name, &options()).expect("the owner's client reaches it");
    Box::new(t).close().unwrap();
    server.shutdown().unwrap();
    let _ = old_squatter.kill();
    let _ = old_squatter.wait();
    let _ = std::fs::remove_file(&old);

    // 5. A client of another user reaching the socket (the owner loosened the modes) is
    //    refused by the daemon, with the reason; served once the daemon serves others.
    let shared = base.path().join("shared");
    std::fs::create_dir(&shared).unwrap();
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o711)).unwrap();
    set_dir(Some(&shared));
    let hello = Hello {
        queue_depth: 4,
        host_memory_bytes: csx_host::transport::shm::HOST_MEMORY_MIN,
    }
    .encode();
    let hex: String = hello.iter().map(|b| format!("{b:02x}")).collect();
    let knock = |path: &Path| -> Welcome {
        let mut c = python_as_nobody(
            "import socket,sys\n\
             s=socket.socket(socket.AF_UNIX); s.settimeout(10); s.connect(sys.argv[1])\n\
             try: s.sendall(bytes.fromhex(sys.argv[2]))\n\
             except OSError: pass\n\
             print(s.recv(4096).hex(), flush=True)",
            &[path.to_str().unwrap(), &hex],
            false,
        );
        let out = line_of(&mut c);
        c.wait().unwrap();
        let bytes: Vec<u8> = (0..out.len() / 2)
            .map(|i| u8::from_str_radix(&out[2 * i..2 * i + 2], 16).unwrap())
            .collect();
        Welcome::decode(&bytes).unwrap_or_else(|e| panic!("welcome {out:?}: {e}"))
    };
    for other_users in [false, true] {
        let (_state, server) =
            serve("guarded", ServerOptions::new().shm_other_users(other_users)).unwrap();
        let sock = socket_path("guarded");
        std::fs::set_permissions(&sock, std::fs::Permissions::from_mode(0o666)).unwrap();
        let w = knock(&sock);
        if other_users {
            assert_eq!(w.status, WelcomeStatus::Accepted, "{}", w.message);
        } else {
            assert_eq!(w.status, WelcomeStatus::PermissionDenied);
            assert!(
                w.message
                    .contains(&format!("serves user 0 only, not user {NOBODY}")),
                "{}",
                w.message
            );
        }
        // The owner is served either way.
        let t = ShmTransport::connect("guarded", &options()).unwrap();
        Box::new(t).close().unwrap();
        std::thread::sleep(Duration::from_millis(50));
        server.shutdown().unwrap();
    }
    set_dir(None);
}

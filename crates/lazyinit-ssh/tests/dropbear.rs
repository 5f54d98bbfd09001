//! Against a real dropbear server on 127.0.0.1, serving the project's host
//! key (or a foreign one). dropbear authenticates root against root's home
//! from /etc/passwd; it runs in a private mount namespace with /etc/passwd
//! bound over, so root's "home" is the test's temporary directory and the
//! real ~/.ssh is never touched.

use std::net::{TcpListener, TcpStream};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use lazyinit_ssh::{wait_until_ready, HostKeyPin, Keys, Session, SshError, UploadSource};

/// A dropbear process group, killed on drop (also when a test panics).
struct Dropbear {
    child: Child,
    port: u16,
    log: PathBuf,
}

impl Drop for Dropbear {
    fn drop(&mut self) {
        // dropbear puts each connection's process in its own session, out of
        // our process group: end those first (by parent pid) and let the
        // server reap them, so none outlives the test as an orphan.
        let pid = self.child.id().to_string();
        let _ = Command::new("pkill").args(["-KILL", "-P", &pid]).status();
        let deadline = Instant::now() + Duration::from_secs(2);
        while Instant::now() < deadline
            && Command::new("pgrep")
                .args(["-P", &pid])
                .stdout(Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
        {
            std::thread::sleep(Duration::from_millis(20));
        }
        // Negative pid: the server's whole process group.
        let _ = Command::new("kill")
            .args(["-KILL", "--", &format!("-{pid}")])
            .status();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn start_dropbear(dir: &Path, host_key: &Path, client_public: &str) -> Dropbear {
    start_dropbear_on(free_port(), dir, host_key, client_public)
}

fn start_dropbear_on(port: u16, dir: &Path, host_key: &Path, client_public: &str) -> Dropbear {
    let home = dir.join("home");
    std::fs::create_dir_all(home.join(".ssh")).unwrap();
    std::fs::set_permissions(&home, std::fs::Permissions::from_mode(0o700)).unwrap();
    std::fs::set_permissions(home.join(".ssh"), std::fs::Permissions::from_mode(0o700)).unwrap();
    std::fs::write(
        home.join(".ssh/authorized_keys"),
        format!("{client_public}\n"),
    )
    .unwrap();
    let passwd = dir.join("passwd");
    std::fs::write(
        &passwd,
        format!("root:x:0:0:root:{}:/bin/sh\n", home.display()),
    )
    .unwrap();
    let log = dir.join("dropbear.log");
    let script = format!(
        "mount --bind {} /etc/passwd && exec dropbear -F -E -s -p 127.0.0.1:{port} -r {} -P {}",
        passwd.display(),
        host_key.display(),
        dir.join("dropbear.pid").display()
    );
    let child = Command::new("unshare")
        .args(["--mount", "--propagation", "private", "sh", "-c", &script])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .process_group(0)
        .spawn()
        .expect("unshare and dropbear must be installed (dropbear-bin)");
    let mut server = Dropbear { child, port, log };
    let deadline = Instant::now() + Duration::from_secs(10);
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        if let Some(status) = server.child.try_wait().unwrap() {
            panic!(
                "dropbear exited with {status}: {}",
                std::fs::read_to_string(&server.log).unwrap_or_default()
            );
        }
        assert!(
            Instant::now() < deadline,
            "dropbear did not listen on {port}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    server
}

fn setup() -> (tempfile::TempDir, Keys, Dropbear) {
    let dir = tempfile::tempdir().unwrap();
    let keys = Keys::load_or_create(&dir.path().join("state")).unwrap();
    let server = start_dropbear(dir.path(), &keys.host_private, &keys.client_public);
    (dir, keys, server)
}

const T: Duration = Duration::from_secs(20);

#[test]
fn keys_are_private_and_stable() {
    let dir = tempfile::tempdir().unwrap();
    let a = Keys::load_or_create(dir.path()).unwrap();
    let b = Keys::load_or_create(dir.path()).unwrap();
    assert_eq!(a.host_public, b.host_public);
    assert_eq!(a.client_public, b.client_public);
    for f in [&a.client_private, &a.host_private] {
        let mode = std::fs::metadata(f).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "{}", f.display());
    }
    let dir_mode = std::fs::metadata(&a.dir).unwrap().permissions().mode() & 0o777;
    assert_eq!(dir_mode, 0o700);
    // A key readable by others is refused, not silently used.
    std::fs::set_permissions(&a.host_private, std::fs::Permissions::from_mode(0o644)).unwrap();
    assert!(matches!(
        Keys::load_or_create(dir.path()),
        Err(SshError::BadKeyFile { .. })
    ));
}

#[test]
fn exec_reports_output_and_status() {
    let (_dir, keys, server) = setup();
    let s = Session::connect("127.0.0.1", server.port, "root", &keys, T).unwrap();
    let out = s.exec("echo out; echo err >&2; exit 3").unwrap();
    assert_eq!(out.status, 3);
    assert_eq!(out.stdout, "out\n");
    assert_eq!(out.stderr, "err\n");
    assert_eq!(s.exec_checked("printf ok").unwrap().stdout, "ok");
    match s.exec_checked("echo nope >&2; false") {
        Err(SshError::ExitStatus { status, stderr, .. }) => {
            assert_eq!(status, 1);
            assert_eq!(stderr, "nope\n");
        }
        other => panic!("expected ExitStatus, got {other:?}"),
    }
    // More than one channel window on both streams at once must not stall.
    let big = s
        .exec_checked(
            "head -c 3000000 /dev/zero | tr '\\0' a; head -c 3000000 /dev/zero | tr '\\0' b >&2",
        )
        .unwrap();
    assert_eq!(big.stdout.len(), 3_000_000);
    assert_eq!(big.stderr.len(), 3_000_000);
}

#[test]
fn exec_times_out() {
    let (_dir, keys, server) = setup();
    let s = Session::connect("127.0.0.1", server.port, "root", &keys, T).unwrap();
    let err = s
        .exec_with_timeout("sleep 30", Duration::from_millis(500))
        .unwrap_err();
    assert!(matches!(err, SshError::Timeout { .. }), "{err:?}");
}

/// A long command (an mkfs of 3 TiB) gives way to a cancel within a few
/// milliseconds, not at its end or timeout.
#[test]
fn a_running_command_gives_way_to_a_cancel() {
    let (_dir, keys, server) = setup();
    let mut s = Session::connect("127.0.0.1", server.port, "root", &keys, T).unwrap();
    let cancel = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    s.set_cancel(cancel.clone());
    let c = cancel.clone();
    let setter = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(500));
        c.store(true, std::sync::atomic::Ordering::SeqCst);
    });
    let started = Instant::now();
    let err = s
        .exec_with_timeout("sleep 60", Duration::from_secs(120))
        .unwrap_err();
    let took = started.elapsed();
    setter.join().unwrap();
    assert!(matches!(err, SshError::Cancelled { .. }), "{err:?}");
    assert!(took < Duration::from_secs(3), "took {took:?}");
    // Dropping the session (its guest is torn down next) does not wait
    // for the command either.
    let started = Instant::now();
    drop(s);
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
}

#[test]
fn upload_writes_bytes_and_files_with_mode() {
    let (dir, keys, server) = setup();
    let s = Session::connect("127.0.0.1", server.port, "root", &keys, T).unwrap();
    let target = dir.path().join("up loaded");
    let payload: Vec<u8> = (0..1_000_000u32).map(|i| (i % 251) as u8).collect();
    s.upload(
        UploadSource::Bytes(&payload),
        target.to_str().unwrap(),
        0o751,
    )
    .unwrap();
    assert_eq!(std::fs::read(&target).unwrap(), payload);
    let mode = std::fs::metadata(&target).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o751);

    let local = dir.path().join("local.bin");
    std::fs::write(&local, b"from a file\n").unwrap();
    let target2 = dir.path().join("second");
    s.upload(UploadSource::File(&local), target2.to_str().unwrap(), 0o600)
        .unwrap();
    assert_eq!(std::fs::read(&target2).unwrap(), b"from a file\n");

    let err = s
        .upload(UploadSource::Bytes(b"x"), "/nonexistent-dir/f", 0o600)
        .unwrap_err();
    assert!(matches!(err, SshError::ExitStatus { .. }), "{err:?}");
}

#[test]
fn foreign_host_key_is_refused_with_both_fingerprints() {
    let dir = tempfile::tempdir().unwrap();
    let keys = Keys::load_or_create(&dir.path().join("state")).unwrap();
    let other = dir.path().join("other_host_key");
    let gen = Command::new("dropbearkey")
        .args(["-t", "ed25519", "-f"])
        .arg(&other)
        .output()
        .unwrap();
    assert!(gen.status.success());
    let other_pin = String::from_utf8_lossy(&gen.stdout)
        .lines()
        .find_map(HostKeyPin::parse_public_line)
        .unwrap();
    let server = start_dropbear(dir.path(), &other, &keys.client_public);
    let err = Session::connect("127.0.0.1", server.port, "root", &keys, T).unwrap_err();
    match &err {
        SshError::HostKeyMismatch { expected, seen, .. } => {
            assert_eq!(expected, &keys.host_public.fingerprint());
            assert_eq!(seen, &other_pin.fingerprint());
        }
        other => panic!("expected HostKeyMismatch, got {other:?}"),
    }
    let msg = err.to_string();
    assert!(
        msg.contains(&keys.host_public.fingerprint()) && msg.contains(&other_pin.fingerprint())
    );
    // Retrying cannot fix a wrong key: wait_until_ready gives up at once.
    let start = Instant::now();
    let err = wait_until_ready(
        "127.0.0.1",
        server.port,
        "root",
        &keys,
        Instant::now() + Duration::from_secs(30),
        || true,
    )
    .unwrap_err();
    assert!(matches!(err, SshError::HostKeyMismatch { .. }));
    assert!(start.elapsed() < Duration::from_secs(20));
}

#[test]
fn wrong_client_key_is_an_auth_error() {
    let dir = tempfile::tempdir().unwrap();
    let keys = Keys::load_or_create(&dir.path().join("state")).unwrap();
    let stranger = Keys::load_or_create(&dir.path().join("stranger")).unwrap();
    let server = start_dropbear(dir.path(), &keys.host_private, &stranger.client_public);
    let err = Session::connect("127.0.0.1", server.port, "root", &keys, T).unwrap_err();
    assert!(matches!(err, SshError::Auth { .. }), "{err:?}");
}

#[test]
fn wait_until_ready_waits_for_a_late_server_and_stops_on_death() {
    let dir = tempfile::tempdir().unwrap();
    let keys = Keys::load_or_create(&dir.path().join("state")).unwrap();
    // Nobody listens: a dead machine ends the wait at once...
    let port = free_port();
    let err = wait_until_ready(
        "127.0.0.1",
        port,
        "root",
        &keys,
        Instant::now() + Duration::from_secs(60),
        || false,
    )
    .unwrap_err();
    assert!(matches!(err, SshError::MachineDied { .. }), "{err:?}");
    // ...and a live one that never answers runs into the deadline.
    let err = wait_until_ready(
        "127.0.0.1",
        port,
        "root",
        &keys,
        Instant::now() + Duration::from_secs(1),
        || true,
    )
    .unwrap_err();
    match err {
        SshError::NotReady { last, .. } => assert!(matches!(*last, SshError::Connect { .. })),
        other => panic!("expected NotReady, got {other:?}"),
    }
    // A server that comes up while we wait is found.
    let keys2 = keys.clone();
    let dirp = dir.path().to_path_buf();
    let late_port = free_port();
    let starter = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(1500));
        start_dropbear_on(late_port, &dirp, &keys2.host_private, &keys2.client_public)
    });
    let s = wait_until_ready(
        "127.0.0.1",
        late_port,
        "root",
        &keys,
        Instant::now() + Duration::from_secs(20),
        || true,
    )
    .unwrap();
    assert_eq!(s.exec_checked("echo hi").unwrap().stdout, "hi\n");
    drop(starter.join().unwrap());
}

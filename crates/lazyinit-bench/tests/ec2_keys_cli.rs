//! The per-run EC2 key folder (the host key's private half travels in
//! every instance's user data) goes on every way a run ends: a second
//! Ctrl-C (`process::exit`), and SIGKILL, after which the next run or
//! `cleanup` sweeps it. The runs hang on an endpoint that takes TCP and
//! never answers, so they are alive with their keys made when signalled.

use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

fn silent_endpoint() -> String {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", l.local_addr().unwrap());
    std::thread::spawn(move || {
        let mut held: Vec<TcpStream> = Vec::new();
        for c in l.incoming().flatten() {
            held.push(c);
        }
    });
    url
}

fn command(home: &Path, args: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_lazyinit-bench"));
    c.args(args)
        .current_dir(home)
        .env("HOME", home)
        .env("LAZYINIT_STATE_DIR", home.join("state"))
        .env("AWS_ACCESS_KEY_ID", "AKIDKEYSTEST")
        .env("AWS_SECRET_ACCESS_KEY", "keys")
        .env("AWS_EC2_METADATA_DISABLED", "true")
        .env_remove("AWS_PROFILE")
        .env_remove("AWS_CONFIG_FILE")
        .env_remove("AWS_SHARED_CREDENTIALS_FILE")
        .env_remove("RUST_LOG");
    c
}

fn spec(home: &Path, url: &str, api_timeout: &str) -> String {
    let p = home.join(format!("ec2-{api_timeout}.toml"));
    std::fs::write(
        &p,
        format!(
            "name = \"keys\"\nprovider = \"ec2\"\narches = [\"x86_64\"]\nhz = [250]\n\
             variants = [\"fix\"]\nsizes = [\"64GiB\"]\n\n[provider-config.ec2]\n\
             region = \"us-east-1\"\nendpoint-url = \"{url}\"\napi-timeout = \"{api_timeout}\"\n"
        ),
    )
    .unwrap();
    p.display().to_string()
}

/// The run key folders under the state directory; an unreadable state
/// directory fails the test rather than reading as "none".
fn key_folders(home: &Path) -> Vec<PathBuf> {
    let state = home.join("state");
    let mut out: Vec<PathBuf> = std::fs::read_dir(&state)
        .unwrap_or_else(|e| panic!("cannot list {}: {e}", state.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| {
            p.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("ec2-run-")
        })
        .collect();
    out.sort();
    out
}

/// Starts a run that hangs in its preflight, and waits until its keys
/// exist and its banner (printed once the signal handler is in) is out.
fn hanging_run(home: &Path, url: &str) -> (Child, PathBuf) {
    let spec = spec(home, url, "120s");
    let log = home.join(format!("run-{}.stderr", key_folders_or_none(home)));
    let out = home.join("results");
    let child = command(
        home,
        &["run", &spec, "--out", out.to_str().unwrap(), "--no-report"],
    )
    .stdin(Stdio::null())
    .stdout(Stdio::null())
    .stderr(std::fs::File::create(&log).unwrap())
    .spawn()
    .unwrap();
    let start = Instant::now();
    loop {
        let said = std::fs::read_to_string(&log).unwrap_or_default();
        if said.contains("results in") && home.join("state").exists() {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "the run never started: {said}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_millis(300));
    (child, log)
}

fn key_folders_or_none(home: &Path) -> usize {
    std::fs::read_dir(home).map_or(0, |d| d.count())
}

#[test]
fn a_second_ctrl_c_takes_the_key_folder_with_it() {
    let home = tempfile::tempdir().unwrap();
    let url = silent_endpoint();
    let (mut child, log) = hanging_run(home.path(), &url);
    let folders = key_folders(home.path());
    assert_eq!(folders.len(), 1, "one key folder while the run lives");
    let pid = Pid::from_raw(child.id() as i32);
    kill(pid, Signal::SIGINT).unwrap();
    std::thread::sleep(Duration::from_millis(300));
    kill(pid, Signal::SIGINT).unwrap();
    let status = child.wait().unwrap();
    let said = std::fs::read_to_string(&log).unwrap();
    assert_eq!(status.code(), Some(130), "{said}");
    assert!(said.contains("forced: exiting now"), "{said}");
    assert_eq!(key_folders(home.path()), Vec::<PathBuf>::new(), "{said}");
}

#[test]
fn a_killed_runs_key_folder_is_swept_by_cleanup_and_by_the_next_run() {
    let home = tempfile::tempdir().unwrap();
    let url = silent_endpoint();
    for sweeper in ["cleanup", "run"] {
        let (mut child, _log) = hanging_run(home.path(), &url);
        let folders = key_folders(home.path());
        assert_eq!(folders.len(), 1);
        child.kill().unwrap(); // SIGKILL: no handler, no drop
        child.wait().unwrap();
        assert_eq!(key_folders(home.path()), folders, "SIGKILL leaves it");
        let short = spec(home.path(), &url, "2s");
        let out = home.path().join("results2");
        let args: Vec<&str> = match sweeper {
            "cleanup" => vec!["cleanup", "--expired", "--config", &short],
            _ => vec!["run", &short, "--out", out.to_str().unwrap(), "--no-report"],
        };
        let o = command(home.path(), &args).output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(3), "{sweeper}: {err}");
        assert!(
            err.contains(&format!(
                "removed the key folder of a run that was killed: {}",
                folders[0].display()
            )),
            "{sweeper}: {err}"
        );
        assert_eq!(
            key_folders(home.path()),
            Vec::<PathBuf>::new(),
            "{sweeper}: {err}"
        );
    }
}

//! The EC2 path against endpoints that do not behave: one that takes TCP
//! and never answers (written here: a listener that accepts and holds),
//! and a machine without credentials. Each must end, within a stated time,
//! with one line that says what to do; none may hang.

use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

/// Accepts every connection and holds it open, answering nothing, for as
/// long as the test runs.
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

/// The binary with no AWS configuration of the user's (an empty HOME,
/// no instance metadata) and, if `creds`, dummy static credentials.
fn bench(home: &Path, creds: bool, args: &[&str]) -> (Output, Duration) {
    let mut c = Command::new(env!("CARGO_BIN_EXE_lazyinit-bench"));
    c.args(args)
        .current_dir(home)
        .env("HOME", home)
        .env_remove("AWS_CONFIG_FILE")
        .env_remove("AWS_SHARED_CREDENTIALS_FILE")
        .env("AWS_EC2_METADATA_DISABLED", "true")
        .env("LAZYINIT_STATE_DIR", home.join("state"))
        .env_remove("AWS_PROFILE")
        .env_remove("AWS_SESSION_TOKEN")
        .env_remove("RUST_LOG");
    if creds {
        c.env("AWS_ACCESS_KEY_ID", "AKIDSILENTTEST")
            .env("AWS_SECRET_ACCESS_KEY", "silent");
    } else {
        c.env_remove("AWS_ACCESS_KEY_ID")
            .env_remove("AWS_SECRET_ACCESS_KEY");
    }
    let start = Instant::now();
    let out = c.output().unwrap();
    (out, start.elapsed())
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// A spec whose EC2 calls get `api_timeout` each.
fn spec(dir: &Path, url: &str, api_timeout: &str) -> String {
    let p = dir.join("ec2.toml");
    std::fs::write(
        &p,
        format!(
            "name = \"silent\"\nprovider = \"ec2\"\narches = [\"x86_64\"]\nhz = [250]\n\
             variants = [\"fix\"]\nsizes = [\"64GiB\"]\n\n[provider-config.ec2]\n\
             region = \"us-east-1\"\nendpoint-url = \"{url}\"\napi-timeout = \"{api_timeout}\"\n"
        ),
    )
    .unwrap();
    p.display().to_string()
}

#[test]
fn cleanup_against_a_silent_endpoint_ends_with_one_line() {
    let home = tempfile::tempdir().unwrap();
    let url = silent_endpoint();
    let spec = spec(home.path(), &url, "4s");
    let (out, took) = bench(
        home.path(),
        true,
        &["cleanup", "--expired", "--config", &spec],
    );
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert_eq!(err.lines().count(), 1, "one line, not a dump:\n{err}");
    assert!(
        err.contains("EC2 DescribeInstances: no answer within 4s per call (3 attempts"),
        "{err}"
    );
    // The budget and a margin for the process itself; it hung before.
    assert!(took < Duration::from_secs(15), "took {took:?}");
    eprintln!("cleanup against a silent endpoint ended after {took:?}");
}

#[test]
fn cleanup_endpoint_url_flag_gets_the_default_budget() {
    let home = tempfile::tempdir().unwrap();
    let url = silent_endpoint();
    let (out, took) = bench(
        home.path(),
        true,
        &[
            "cleanup",
            "--expired",
            "--endpoint-url",
            &url,
            "--region",
            "us-east-1",
        ],
    );
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert!(err.contains("no answer within 40s per call"), "{err}");
    assert!(took < Duration::from_secs(60), "took {took:?}");
    eprintln!("cleanup --endpoint-url (default budget) ended after {took:?}");
}

#[test]
fn run_on_ec2_against_a_silent_endpoint_ends_with_one_line() {
    let home = tempfile::tempdir().unwrap();
    let url = silent_endpoint();
    let spec = spec(home.path(), &url, "4s");
    let out_dir = home.path().join("results");
    let (out, took) = bench(
        home.path(),
        true,
        &[
            "run",
            &spec,
            "--out",
            out_dir.to_str().unwrap(),
            "--no-report",
        ],
    );
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert!(
        err.contains("EC2 DescribeInstanceTypes: no answer within 4s per call"),
        "{err}"
    );
    assert!(
        !err.contains("DispatchFailure") && !err.contains("ConnectorError"),
        "no SDK dump:\n{err}"
    );
    assert!(took < Duration::from_secs(30), "took {took:?}");
    eprintln!("run on EC2 against a silent endpoint ended after {took:?}");
}

#[test]
fn cleanup_without_credentials_says_configure_them() {
    let home = tempfile::tempdir().unwrap();
    let url = silent_endpoint();
    let (out, _) = bench(
        home.path(),
        false,
        &[
            "cleanup",
            "--expired",
            "--endpoint-url",
            &url,
            "--region",
            "us-east-1",
        ],
    );
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert_eq!(
        err.trim_end(),
        "error: no AWS credentials: configure them (`aws configure`, AWS_PROFILE, \
         or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY) and rerun"
    );
    assert!(!err.contains('\x1b'), "no colour codes: {err:?}");
}

//! Shared by the emulator tests: an owned moto_server on a free loopback
//! port, a provider pointed at it, and the cells and keys they launch.

#![allow(dead_code)]

use std::net::{TcpListener, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use aws_sdk_ec2::config::Credentials;
use lazyinit_core::provider::LaunchRequest;
use lazyinit_core::{Arch, Cell, Hz, KernelSource, Variant};
use lazyinit_ec2::{Ec2Config, Ec2Provider, GuestKeys};

/// moto's EC2 emulator, started by the test and killed (with its process
/// group) when dropped, on every path including a failed assertion.
pub struct Moto {
    child: Child,
    pub url: String,
    log: PathBuf,
    _dir: tempfile::TempDir,
}

pub fn moto_binary() -> PathBuf {
    lazyinit_core::paths::cache_dir().join("venv-moto/bin/moto_server")
}

impl Moto {
    pub fn start() -> Moto {
        let bin = moto_binary();
        assert!(
            bin.exists(),
            "the EC2 emulator is not installed ({} is missing): run scripts/ec2-emulator.sh",
            bin.display()
        );
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("moto.log");
        // Ask the kernel for a free port; the tiny race with another
        // process taking it shows up as a start failure, not a wrong pass.
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let out = std::fs::File::create(&log).unwrap();
        let child = Command::new(&bin)
            .args(["-H", "127.0.0.1", "-p", &port.to_string()])
            // Refuse unknown AMIs and instance types as EC2 does.
            .env("MOTO_ENABLE_AMI_VALIDATION", "true")
            .env("MOTO_EC2_ENABLE_INSTANCE_TYPE_VALIDATION", "true")
            .stdin(Stdio::null())
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .process_group(0)
            .spawn()
            .unwrap();
        let mut moto = Moto {
            child,
            url: format!("http://127.0.0.1:{port}"),
            log,
            _dir: dir,
        };
        let start = Instant::now();
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            if let Ok(Some(st)) = moto.child.try_wait() {
                panic!("moto_server exited with {st}:\n{}", moto.log_text());
            }
            if start.elapsed() > Duration::from_secs(60) {
                panic!(
                    "moto_server did not listen within 60 s:\n{}",
                    moto.log_text()
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        moto
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Test config: the emulator's endpoint, its Amazon Linux images (it has
    /// both arches), fast polling.
    pub fn config(&self) -> Ec2Config {
        Ec2Config::from_toml(&format!(
            r#"
            region = "us-east-1"
            endpoint-url = "{}"
            owner = "lazyinit-test"
            poll-interval = "50ms"
            state-timeout = "30s"
            ami = {{ lookup = {{ owner = "137112412989", name = "al2022-ami-*" }} }}
            "#,
            self.url
        ))
        .unwrap()
    }

    pub async fn provider(&self, cfg: Ec2Config) -> Ec2Provider {
        Ec2Provider::with_credentials(cfg, keys(), creds()).unwrap()
    }
}

impl Drop for Moto {
    fn drop(&mut self) {
        let pid = self.child.id() as i32;
        let _ = nix::sys::signal::killpg(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGKILL,
        );
        let _ = self.child.wait();
    }
}

pub fn creds() -> Credentials {
    Credentials::new("testing", "testing", None, None, "lazyinit-test")
}

pub fn keys() -> GuestKeys {
    GuestKeys {
        host_private: "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\n-----END OPENSSH PRIVATE KEY-----\n".into(),
        host_public: "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAITestHost lazyinit-host".into(),
        client_public: "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAITestClient lazyinit-harness".into(),
    }
}

pub fn cell(arch: Arch, hz: u32, variant: Variant, size: &str) -> Cell {
    Cell {
        provider: "ec2".into(),
        axes: lazyinit_core::Axes::new(
            arch,
            KernelSource::Debian61,
            Hz::new(hz).unwrap(),
            variant,
            size.parse().unwrap(),
        ),
        repetition: 1,
    }
}

pub fn request(run_id: &str, cell: Cell, log_dir: PathBuf) -> LaunchRequest {
    LaunchRequest {
        run_id: run_id.into(),
        cell,
        // The EC2 provider does not boot these: the guest protocol installs
        // them over SSH after launch.
        kernel_image: "/nonexistent/bzImage".into(),
        kernel_release: "6.1.0-test".into(),
        initramfs: "/nonexistent/initramfs.cpio.gz".into(),
        folder: writer_of(&log_dir),
        extra_cmdline: vec![],
        storage_profile: lazyinit_core::StorageProfile::None,
    }
}

/// The writer of the cell folder `log_dir` (claimed as a folder of its
/// own: requests of one test share no lock).
pub fn writer_of(log_dir: &std::path::Path) -> lazyinit_core::CellWriter {
    lazyinit_core::RunWriter::claim(&lazyinit_core::RunFolder::new(log_dir))
        .expect("the folder is free")
        .cell(".")
}

/// Reads the launch record the provider wrote into the cell's log folder.
pub fn record(log_dir: &std::path::Path) -> serde_json::Value {
    let path = lazyinit_core::CellFolder::at(log_dir).ec2_json();
    let text = path.read_to_string().expect("ec2.json written at launch");
    serde_json::from_str(&text).unwrap()
}

pub fn tag<'a>(tags: &'a [aws_sdk_ec2::types::Tag], key: &str) -> Option<&'a str> {
    lazyinit_ec2::tags::tag_value(tags, key)
}

//! The API half of the twin: moto's EC2 emulator (`scripts/ec2-emulator.sh`
//! installs it), an owned process on a free loopback port, killed with its
//! process group when dropped, on every path.

use std::net::{TcpListener, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub struct Emulator {
    child: Child,
    pub url: String,
    log: PathBuf,
}

/// Where `scripts/ec2-emulator.sh` puts the emulator.
pub fn moto_binary() -> PathBuf {
    lazyinit_core::paths::cache_dir().join("venv-moto/bin/moto_server")
}

impl Emulator {
    /// Starts the emulator, its log in `dir`. A missing emulator is an
    /// error that names the install script: a twin test must fail, not
    /// skip, without it.
    pub fn start(dir: &std::path::Path) -> anyhow::Result<Emulator> {
        let bin = moto_binary();
        anyhow::ensure!(
            bin.exists(),
            "the EC2 emulator is not installed ({} is missing): run scripts/ec2-emulator.sh",
            bin.display()
        );
        let log = dir.join("moto.log");
        // A free port from the kernel; the tiny race with another process
        // taking it shows up as a start failure, not a wrong pass.
        let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        let out = std::fs::File::create(&log)?;
        let mut cmd = Command::new(&bin);
        cmd.args(["-H", "127.0.0.1", "-p", &port.to_string()])
            // Refuse unknown AMIs and instance types as EC2 does.
            .env("MOTO_ENABLE_AMI_VALIDATION", "true")
            .env("MOTO_EC2_ENABLE_INSTANCE_TYPE_VALIDATION", "true")
            .stdin(Stdio::null())
            .stdout(out.try_clone()?)
            .stderr(out)
            .process_group(0);
        // A test killed outright runs no Drop: the emulator goes with it.
        // SAFETY: prctl is async-signal-safe; nothing else runs in the child.
        #[allow(unsafe_code)]
        unsafe {
            cmd.pre_exec(|| {
                nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL)
                    .map_err(std::io::Error::from)
            });
        }
        let child = cmd.spawn()?;
        let mut e = Emulator {
            child,
            url: format!("http://127.0.0.1:{port}"),
            log,
        };
        let start = Instant::now();
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            if let Ok(Some(st)) = e.child.try_wait() {
                anyhow::bail!("moto_server exited with {st}:\n{}", e.log_text());
            }
            if start.elapsed() > Duration::from_secs(60) {
                anyhow::bail!("moto_server did not listen within 60 s:\n{}", e.log_text());
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        Ok(e)
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Emulator {
    fn drop(&mut self) {
        let pid = self.child.id() as i32;
        let _ = nix::sys::signal::killpg(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGKILL,
        );
        let _ = self.child.wait();
    }
}

//! The machine half of the twin: watches the emulator and plays EC2's part
//! for each instance it runs.
//!
//! - an instance running with a data volume attached gets a QEMU guest
//!   (`guest`): the AMI's stand-in, every attached volume as an NVMe
//!   controller with Nitro's serial, SSH behind a relay (`relay`), its
//!   endpoint published for the harness (`endpoints`). The guest starts at
//!   the attach, not at RunInstances: a running kernel would not see a disk
//!   plugged in later, and the harness does nothing with an instance before
//!   its volume is attached;
//! - an instance that is terminated or stopped through the API loses its
//!   guest (QEMU stopped, volume files removed);
//! - a guest that powers itself off is an instance-initiated shutdown: the
//!   instance's shutdown behaviour is applied through the API (terminate:
//!   TerminateInstances, which deletes its delete-on-termination volumes).
//!
//! It uses the emulator directly, never the harness's API proxy, so the
//! harness's call counts are its own.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aws_sdk_ec2::types::{ArchitectureValues, Filter, InstanceAttributeName, ShutdownBehavior};
use aws_sdk_ec2::Client;
use chrono::{DateTime, Utc};
use lazyinit_core::{Arch, ByteSize, CellFolder, RunWriter};
use lazyinit_qemu::process::QemuProcess;
use lazyinit_qemu::volume::SparseVolume;

use crate::guest::{self, NvmeVolume};
use crate::relay::SshRelay;
use crate::{endpoints, userdata};

/// The AMI a guest boots instead of the instance's: a kernel and the
/// key-free guest image, per arch.
#[derive(Debug, Clone)]
pub struct StandIn {
    pub kernel: PathBuf,
    pub image: lazyinit_image::ImageArtifact,
}

#[derive(Debug, Clone)]
pub struct ControllerOptions {
    /// The emulator itself (not the harness's proxy).
    pub api_url: String,
    /// Guests' folders (`guests/<id>/`) and the endpoint files (`endpoints/`).
    pub dir: PathBuf,
    pub stand_ins: BTreeMap<Arch, StandIn>,
    pub memory_mib: u32,
    /// Host TSC rate for x86 guests (docs/design.md §3).
    pub tsc_khz: Option<u64>,
    pub tick: Duration,
}

/// What happened to an instance's guest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Happening {
    /// The guest started (its arch, the volumes it was given).
    Started {
        arch: Arch,
        volumes: Vec<String>,
    },
    StartFailed(String),
    /// Stopped because the instance left `running` through the API.
    Stopped {
        instance_state: String,
    },
    /// The guest ended on its own (`poweroff`, a panic's reboot).
    PoweredOff,
    /// The instance's shutdown behaviour, applied after a power-off.
    ShutdownApplied(String),
}

#[derive(Debug, Clone)]
pub struct TwinEvent {
    pub at: DateTime<Utc>,
    pub instance: String,
    pub what: Happening,
}

/// A live guest, as tests see it.
#[derive(Clone)]
pub struct GuestView {
    pub instance: String,
    pub arch: Arch,
    pub dir: PathBuf,
    pub qemu_pid: Option<u32>,
    pub relay: Arc<SshRelay>,
}

#[derive(Default)]
struct Shared {
    events: Vec<TwinEvent>,
    live: BTreeMap<String, GuestView>,
    /// Every guest folder ever made, by instance (consoles outlive guests).
    dirs: BTreeMap<String, PathBuf>,
}

struct Running {
    process: QemuProcess,
    _volumes: Vec<SparseVolume>,
}

pub struct Controller {
    shared: Arc<Mutex<Shared>>,
    stop: Arc<AtomicBool>,
    task: Option<tokio::task::JoinHandle<()>>,
    endpoints_dir: PathBuf,
}

struct Ctx {
    opts: ControllerOptions,
    /// The writer of `guests/`: each guest's folder holds what a QEMU
    /// cell's does, under the same names.
    guests: RunWriter,
    client: Client,
    shared: Arc<Mutex<Shared>>,
}

impl Controller {
    pub async fn start(opts: ControllerOptions) -> anyhow::Result<Controller> {
        let cfg = lazyinit_ec2::Ec2Config {
            region: Some("us-east-1".into()),
            endpoint_url: Some(opts.api_url.clone()),
            ..Default::default()
        };
        let client =
            lazyinit_ec2::client::build(&cfg, Some(crate::dummy_credentials()), Default::default())
                .await;
        let guests = RunWriter::claim(&lazyinit_core::RunFolder::new(opts.dir.join("guests")))?;
        let shared: Arc<Mutex<Shared>> = Arc::default();
        let stop = Arc::new(AtomicBool::new(false));
        let endpoints_dir = opts.dir.join("endpoints");
        let ctx = Ctx {
            opts,
            guests,
            client,
            shared: shared.clone(),
        };
        let s = stop.clone();
        let task = tokio::spawn(async move {
            let mut running: HashMap<String, Running> = HashMap::new();
            let mut done: HashSet<String> = HashSet::new();
            while !s.load(Ordering::SeqCst) {
                if let Err(e) = ctx.tick(&mut running, &mut done).await {
                    tracing::warn!("twin controller: {e:#}");
                }
                tokio::time::sleep(ctx.opts.tick).await;
            }
            for (id, r) in running.drain() {
                ctx.stop_guest(&id, r, "the twin shut down").await;
            }
        });
        Ok(Controller {
            shared,
            stop,
            task: Some(task),
            endpoints_dir,
        })
    }

    /// Where the endpoint files are (for [`endpoints::TwinEndpoints`]).
    pub fn endpoints_dir(&self) -> &Path {
        &self.endpoints_dir
    }

    pub fn events(&self) -> Vec<TwinEvent> {
        self.shared.lock().unwrap().events.clone()
    }

    pub fn events_of(&self, instance: &str) -> Vec<TwinEvent> {
        self.events()
            .into_iter()
            .filter(|e| e.instance == instance)
            .collect()
    }

    pub fn live(&self) -> Vec<GuestView> {
        self.shared.lock().unwrap().live.values().cloned().collect()
    }

    /// The console of an instance's guest, live or gone.
    pub fn console(&self, instance: &str) -> String {
        let dir = self.shared.lock().unwrap().dirs.get(instance).cloned();
        dir.map(|d| CellFolder::at(d).console_log().text().unwrap_or_default())
            .unwrap_or_default()
    }

    /// Every guest console, for a failing test's message.
    pub fn consoles(&self) -> String {
        let dirs = self.shared.lock().unwrap().dirs.clone();
        dirs.iter()
            .map(|(id, d)| {
                let text = CellFolder::at(d.as_path())
                    .console_log()
                    .text()
                    .unwrap_or_default();
                let tail: Vec<&str> = text.lines().rev().take(40).collect();
                let tail: Vec<&str> = tail.into_iter().rev().collect();
                format!("--- {id} console (tail) ---\n{}\n", tail.join("\n"))
            })
            .collect()
    }

    /// Drops every open SSH connection to the instance's guest.
    pub fn sever_ssh(&self, instance: &str) -> Option<usize> {
        let relay = self
            .shared
            .lock()
            .unwrap()
            .live
            .get(instance)
            .map(|g| g.relay.clone());
        relay.map(|r| r.sever())
    }

    /// Stops every guest and the watch.
    pub async fn shutdown(mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.task.take() {
            let _ = t.await;
        }
    }
}

impl Drop for Controller {
    fn drop(&mut self) {
        // Aborting drops the loop's guests: each QemuProcess kills its group.
        if let Some(t) = self.task.take() {
            t.abort();
        }
    }
}

fn arch_of(a: Option<&ArchitectureValues>) -> Option<Arch> {
    match a? {
        ArchitectureValues::X8664 => Some(Arch::X86_64),
        ArchitectureValues::Arm64 => Some(Arch::Arm64),
        _ => None,
    }
}

fn free_port() -> std::io::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

impl Ctx {
    fn event(&self, instance: &str, what: Happening) {
        tracing::info!(instance, ?what, "twin");
        self.shared.lock().unwrap().events.push(TwinEvent {
            at: Utc::now(),
            instance: instance.into(),
            what,
        });
    }

    // Long: one pass over every instance state the emulator can be in, each case a few lines.
    async fn tick(
        &self,
        running: &mut HashMap<String, Running>,
        done: &mut HashSet<String>,
    ) -> anyhow::Result<()> {
        let out = self.client.describe_instances().send().await?;
        let instances: Vec<aws_sdk_ec2::types::Instance> = out
            .reservations()
            .iter()
            .flat_map(|r| r.instances().iter().cloned())
            .collect();
        let state_of = |id: &str| {
            instances
                .iter()
                .find(|i| i.instance_id() == Some(id))
                .and_then(|i| i.state())
                .and_then(|s| s.name())
                .map(|n| n.as_str().to_string())
                .unwrap_or_else(|| "gone".into())
        };

        // Guests of instances that left `running` through the API.
        let ids: Vec<String> = running.keys().cloned().collect();
        for id in ids {
            let st = state_of(&id);
            if st != "running" && st != "pending" {
                let r = running.remove(&id).expect("listed");
                self.stop_guest(&id, r, &format!("instance {st}")).await;
                done.insert(id);
            }
        }

        // Guests that ended on their own: the instance shut itself down.
        let exited: Vec<String> = running
            .iter_mut()
            .filter_map(|(id, r)| r.process.try_exited().map(|_| id.clone()))
            .collect();
        for id in exited {
            let r = running.remove(&id).expect("listed");
            drop(r);
            done.insert(id.clone());
            self.event(&id, Happening::PoweredOff);
            self.forget(&id);
            let behaviour = self.shutdown_behaviour(&id).await;
            let applied = match behaviour.as_str() {
                "terminate" => self
                    .client
                    .terminate_instances()
                    .instance_ids(&id)
                    .send()
                    .await
                    .map(|_| ())
                    .map_err(|e| e.to_string()),
                _ => self
                    .client
                    .stop_instances()
                    .instance_ids(&id)
                    .send()
                    .await
                    .map(|_| ())
                    .map_err(|e| e.to_string()),
            };
            self.event(
                &id,
                Happening::ShutdownApplied(match applied {
                    Ok(()) => behaviour,
                    Err(e) => format!("{behaviour} failed: {e}"),
                }),
            );
        }

        // Instances running with a data volume attached and no guest yet.
        for inst in &instances {
            let Some(id) = inst.instance_id() else {
                continue;
            };
            let is_running =
                inst.state().and_then(|s| s.name()).map(|n| n.as_str()) == Some("running");
            if !is_running || running.contains_key(id) || done.contains(id) {
                continue;
            }
            let Some(vols) = self.attached_volumes(inst).await? else {
                continue;
            };
            done.insert(id.to_string());
            match self.start_guest(inst, &vols).await {
                Ok(r) => {
                    running.insert(id.to_string(), r);
                }
                Err(e) => self.event(id, Happening::StartFailed(format!("{e:#}"))),
            }
        }
        Ok(())
    }

    /// The instance's attached volumes, root first, once a data volume is
    /// among them; `None` before. The root is the attachment at the AMI's
    /// `RootDeviceName` or at `/dev/sda1`, where the emulator attaches
    /// every instance's root volume whatever its AMI says.
    async fn attached_volumes(
        &self,
        inst: &aws_sdk_ec2::types::Instance,
    ) -> anyhow::Result<Option<Vec<(String, i32)>>> {
        let id = inst.instance_id().unwrap_or_default();
        let root = |dev: &str| dev == "/dev/sda1" || Some(dev) == inst.root_device_name();
        let out = self
            .client
            .describe_volumes()
            .filters(
                Filter::builder()
                    .name("attachment.instance-id")
                    .values(id)
                    .build(),
            )
            .send()
            .await?;
        let mut vols: Vec<(bool, String, String, i32)> = out
            .volumes()
            .iter()
            .filter_map(|v| {
                let a = v
                    .attachments()
                    .iter()
                    .find(|a| a.instance_id() == Some(id))?;
                let dev = a.device().unwrap_or_default();
                (a.state().map(|s| s.as_str()) == Some("attached")).then(|| {
                    (
                        !root(dev),
                        dev.to_string(),
                        v.volume_id().unwrap_or_default().to_string(),
                        v.size().unwrap_or(1),
                    )
                })
            })
            .collect();
        if !vols.iter().any(|(data, ..)| *data) {
            return Ok(None);
        }
        vols.sort();
        Ok(Some(vols.into_iter().map(|(_, _, v, g)| (v, g)).collect()))
    }

    async fn shutdown_behaviour(&self, id: &str) -> String {
        let out = self
            .client
            .describe_instance_attribute()
            .instance_id(id)
            .attribute(InstanceAttributeName::InstanceInitiatedShutdownBehavior)
            .send()
            .await;
        out.ok()
            .and_then(|o| {
                o.instance_initiated_shutdown_behavior()
                    .and_then(|b| b.value())
                    .map(str::to_string)
            })
            .unwrap_or_else(|| ShutdownBehavior::Stop.as_str().to_string())
    }

    // Long: a cloud-init boot in the order it happens (folder, keys, volumes, QEMU), as the twin plays it.
    async fn start_guest(
        &self,
        inst: &aws_sdk_ec2::types::Instance,
        vols: &[(String, i32)],
    ) -> anyhow::Result<Running> {
        let id = inst.instance_id().unwrap_or_default();
        let arch = arch_of(inst.architecture())
            .ok_or_else(|| anyhow::anyhow!("instance {id} has no architecture the twin plays"))?;
        let stand_in = self
            .opts
            .stand_ins
            .get(&arch)
            .ok_or_else(|| anyhow::anyhow!("the twin has no {arch} stand-in AMI"))?;
        // A guest's folder holds what a QEMU cell's does (console, QMP
        // socket, command line), under the same names.
        let folder = self.guests.cell(id);
        folder.create()?;
        let dir = folder.path().to_path_buf();
        self.shared
            .lock()
            .unwrap()
            .dirs
            .insert(id.to_string(), dir.clone());

        // cloud-init's part: the keys of the user data.
        let ud = self
            .client
            .describe_instance_attribute()
            .instance_id(id)
            .attribute(InstanceAttributeName::UserData)
            .send()
            .await?;
        let ud = ud
            .user_data()
            .and_then(|u| u.value())
            .ok_or_else(|| anyhow::anyhow!("instance {id} has no user data"))?;
        let ud = {
            use base64::Engine;
            String::from_utf8(base64::engine::general_purpose::STANDARD.decode(ud)?)?
        };
        let installed = userdata::keys(&ud).map_err(anyhow::Error::msg)?;
        let initrd = keyed_initramfs(&stand_in.image, &installed, &dir)?;

        let mut files = Vec::new();
        let mut nvme = Vec::new();
        for (vol, gib) in vols {
            let path = dir.join(format!("{vol}.raw"));
            let _ = std::fs::remove_file(&path);
            files.push(SparseVolume::create(
                path.clone(),
                ByteSize((*gib as u64) << 30),
            )?);
            nvme.push(NvmeVolume {
                volume_id: vol.clone(),
                file: path,
            });
        }
        let port = free_port()?;
        let cmdline = guest::cmdline(arch, self.opts.tsc_khz, id);
        let console_log = folder.hand_over(CellFolder::CONSOLE_LOG);
        let qmp = folder.qmp_sock()?;
        let argv = guest::qemu_args(&guest::GuestArgs {
            arch,
            memory_mib: self.opts.memory_mib,
            kernel: &stand_in.kernel,
            initrd: &initrd,
            cmdline: &cmdline,
            console_log: &console_log,
            qmp_socket: &qmp,
            ssh_port: port,
            volumes: &nvme,
        });
        let line: Vec<String> = std::iter::once(arch.qemu_binary().to_string())
            .chain(argv.iter().map(|a| a.to_string_lossy().into_owned()))
            .collect();
        folder.put(CellFolder::QEMU_CMDLINE, line.join(" ") + "\n")?;
        let (stderr, stderr_log) = folder.create_file(CellFolder::QEMU_STDERR)?;
        let mut process = QemuProcess::spawn(arch.qemu_binary(), &argv, stderr, &stderr_log)?;
        tokio::time::sleep(Duration::from_millis(300)).await;
        if let Some(st) = process.try_exited() {
            anyhow::bail!(
                "{} exited at start ({st}): {}",
                arch.qemu_binary(),
                process.stderr_tail(2000)
            );
        }
        let relay = Arc::new(SshRelay::start(port).await?);
        endpoints::write(&self.opts.dir.join("endpoints"), id, relay.port)?;
        self.shared.lock().unwrap().live.insert(
            id.to_string(),
            GuestView {
                instance: id.to_string(),
                arch,
                dir: dir.clone(),
                qemu_pid: process.pid(),
                relay,
            },
        );
        self.event(
            id,
            Happening::Started {
                arch,
                volumes: vols.iter().map(|(v, _)| v.clone()).collect(),
            },
        );
        Ok(Running {
            process,
            _volumes: files,
        })
    }

    fn forget(&self, id: &str) {
        self.shared.lock().unwrap().live.remove(id);
        endpoints::remove(&self.opts.dir.join("endpoints"), id);
    }

    /// Stops the guest; it leaves the live list last, so a test that sees
    /// it gone sees why too.
    async fn stop_guest(&self, id: &str, mut r: Running, why: &str) {
        r.process.stop(Duration::ZERO).await;
        drop(r);
        self.event(
            id,
            Happening::Stopped {
                instance_state: why.to_string(),
            },
        );
        self.forget(id);
    }
}

/// The stand-in's initramfs with the keys the user data installs: the host
/// key converted to dropbear's format, root's authorized keys.
fn keyed_initramfs(
    image: &lazyinit_image::ImageArtifact,
    k: &userdata::InstalledKeys,
    dir: &Path,
) -> anyhow::Result<PathBuf> {
    use std::os::unix::fs::OpenOptionsExt;
    let openssh = dir.join("host_key.openssh");
    let dropbear = dir.join("host_key.dropbear");
    let _ = std::fs::remove_file(&openssh);
    let _ = std::fs::remove_file(&dropbear);
    std::io::Write::write_all(
        &mut std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&openssh)?,
        k.host_private.as_bytes(),
    )?;
    lazyinit_core::command::run(
        std::process::Command::new("dropbearconvert")
            .args(["openssh", "dropbear"])
            .arg(&openssh)
            .arg(&dropbear),
    )
    .map_err(|e| match e {
        e if e.not_found() => {
            anyhow::anyhow!("dropbearconvert: {e} (apt-get install dropbear-bin)")
        }
        e => anyhow::anyhow!("dropbearconvert: {}", e.detail()),
    })?;
    let pin = lazyinit_ssh::HostKeyPin::parse_public_line(&k.host_public)
        .ok_or_else(|| anyhow::anyhow!("user data host key `{}` is not a key", k.host_public))?;
    let keys = lazyinit_ssh::Keys {
        dir: dir.to_path_buf(),
        client_private: dir.join("unused"),
        client_public: k.authorized.join("\n"),
        host_private: dropbear,
        host_public: pin,
        known_hosts: dir.join("unused"),
    };
    Ok(lazyinit_image::initramfs_for_launch(image, &keys, dir)?)
}

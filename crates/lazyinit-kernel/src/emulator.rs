//! The QEMU of the virtual clock (docs/virtual-clock.md): Debian's QEMU
//! 10.0.2 source (the orig tarball, sha256-pinned), the project's
//! patches (`qemu-patches/`: the zero-hold filter and the warp held while
//! a block request is pending; the guests' devices), built for the two
//! guest targets and the devices their boards use only, and
//! kept in the content-keyed cache like kernels:
//! `<cache>/qemu/<version>-<key>/qemu-system-{x86_64,aarch64}`, the key
//! the sha256 of the tarball's hash, the patches, the configure line, the
//! compiler and the recipe. One builder at a time (a lock); a build is
//! made in a folder of its own and renamed into place whole, so a killed
//! build leaves nothing a later one trusts.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use lazyinit_core::aside::Aside;
use lazyinit_core::Arch;
use serde::{Deserialize, Serialize};

use crate::error::KernelError;
use crate::fetch::FetchOptions;
use crate::{BuildEvent, ProgressFn};

pub const QEMU_VERSION: &str = "10.0.2";
const TARBALL: &str = "qemu_10.0.2+ds.orig.tar.xz";
/// From bookworm-backports' Sources (qemu 1:10.0.2+ds-2+deb13u1~bpo12+1).
const TARBALL_SHA256: &str = "0901da33844a331bf8b3602b9c1fbd178e60b737c8e3ade678255bd090c9b9f1";
const POOL_PATH: &str = "pool/main/q/qemu";
/// Debian's archive; `LAZYINIT_DEBIAN_MIRROR` names another.
pub const DEFAULT_DEBIAN_MIRROR: &str = "http://deb.debian.org/debian";
/// The meson QEMU 10 asks for (its wheels are stripped from the +ds
/// tarball), and the TAP module of its test runner, from PyPI.
const PY_PACKAGES: [&str; 2] = ["meson==1.5.0", "pycotap==1.3.1"];
/// Bumped when the recipe changes what is built.
const RECIPE: &str = "1";

/// The patches, in order: (file name, text).
pub const PATCHES: [(&str, &str); 4] = [
    (
        "0001-build-from-the-orig-tarball.patch",
        include_str!("../qemu-patches/0001-build-from-the-orig-tarball.patch"),
    ),
    (
        "0002-zero-hold-on-the-virtual-clock.patch",
        include_str!("../qemu-patches/0002-zero-hold-on-the-virtual-clock.patch"),
    ),
    (
        "0003-the-guests-devices-only.patch",
        include_str!("../qemu-patches/0003-the-guests-devices-only.patch"),
    ),
    (
        "0004-pace-the-clock-while-the-guest-converses.patch",
        include_str!("../qemu-patches/0004-pace-the-clock-while-the-guest-converses.patch"),
    ),
];

/// What is configured: the two guest targets, TCG, user networking and
/// the device tree, and of the devices only those the guests' boards
/// create (patch 0003's `lazyinit.mak`: 1,160 compile units instead of
/// 2,080, about 300 CPU-s instead of 540), nothing else the guests do not
/// use.
pub const CONFIGURE: [&str; 14] = [
    "--target-list=x86_64-softmmu,aarch64-softmmu",
    "--without-default-features",
    "--enable-tcg",
    "--enable-slirp",
    "--enable-fdt=system",
    "--disable-docs",
    "--disable-tools",
    "--disable-guest-agent",
    "--disable-user",
    "--disable-install-blobs",
    "--disable-werror",
    "--without-default-devices",
    "--with-devices-x86_64=lazyinit",
    "--with-devices-aarch64=lazyinit",
];

const BINARIES: [&str; 2] = ["qemu-system-x86_64", "qemu-system-aarch64"];

/// Host packages the build needs (Debian's names), for the message of a
/// missing one.
pub const INSTALL: &str = "apt-get install ninja-build libglib2.0-dev libfdt-dev libslirp-dev libpixman-1-dev flex bison python3-venv patch xz-utils";

/// A built QEMU of the virtual clock.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VirtualQemu {
    pub dir: PathBuf,
    pub key: String,
}

impl VirtualQemu {
    pub fn binary(&self, arch: Arch) -> PathBuf {
        self.dir.join(match arch {
            Arch::X86_64 => BINARIES[0],
            Arch::Arm64 => BINARIES[1],
        })
    }

    /// Firmware folders for `-L` (the build installs no blobs): Debian's
    /// qemu-system-data and SeaBIOS, which the x86_64 guest's direct
    /// kernel boot needs.
    pub fn data_dirs() -> Vec<PathBuf> {
        vec!["/usr/share/qemu".into(), "/usr/share/seabios".into()]
    }
}

/// What a build recorded beside its binaries.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct QemuManifest {
    pub version: String,
    pub key: String,
    pub tarball_sha256: String,
    pub patches: Vec<String>,
    pub configure: Vec<String>,
    pub compiler: String,
    pub build_seconds: f64,
    pub built_at: String,
    /// The sha256 of each binary as the build published it: checked
    /// before every use ([`find`]), so an edited or truncated binary is
    /// never run. A manifest without them (an older harness's build) is
    /// rebuilt.
    #[serde(default)]
    pub binaries: std::collections::BTreeMap<String, String>,
}

fn root(cache_dir: &Path) -> PathBuf {
    cache_dir.join("qemu")
}

/// The text the key is the hash of.
pub fn key_material(compiler: &str) -> String {
    let mut m = format!("recipe {RECIPE}\nqemu {QEMU_VERSION} {TARBALL_SHA256}\n");
    for (name, text) in PATCHES {
        m.push_str(&format!(
            "patch {name} {}\n",
            lazyinit_core::paths::sha256_hex(text)
        ));
    }
    m.push_str(&format!("configure {}\n", CONFIGURE.join(" ")));
    m.push_str(&format!("compiler {compiler}\n"));
    m
}

fn key_of(material: &str) -> String {
    lazyinit_core::paths::sha256_hex(material)[..16].to_string()
}

fn compiler() -> Result<String, KernelError> {
    let out = lazyinit_core::command::run_text(Command::new("cc").arg("--version"))
        .map_err(|e| missing_or(e, "cc"))?;
    Ok(out.lines().next().unwrap_or_default().trim().to_string())
}

fn missing_or(e: lazyinit_core::command::CommandError, tool: &str) -> KernelError {
    if e.not_found() {
        KernelError::MissingTool {
            tool: tool.into(),
            install: INSTALL.into(),
        }
    } else {
        KernelError::Step(format!("{tool}: {}", e.tail(5)))
    }
}

/// The build's host tools and libraries: the first one missing is exit 4
/// with the install command.
pub fn check_tools() -> Result<(), KernelError> {
    for tool in [
        "cc",
        "ninja",
        "pkg-config",
        "flex",
        "bison",
        "python3",
        "patch",
        "tar",
        "xz",
    ] {
        if crate::tools::find_in_path(tool).is_none() {
            return Err(KernelError::MissingTool {
                tool: tool.into(),
                install: INSTALL.into(),
            });
        }
    }
    for lib in ["glib-2.0", "pixman-1", "slirp"] {
        let ok = Command::new("pkg-config")
            .args(["--exists", lib])
            .status()
            .map(|s| s.success())
            .unwrap_or(false);
        if !ok {
            return Err(KernelError::MissingTool {
                tool: format!("{lib} (pkg-config)"),
                install: INSTALL.into(),
            });
        }
    }
    // Debian's libfdt-dev has no pkg-config file: its header.
    if !Path::new("/usr/include/libfdt.h").is_file() {
        return Err(KernelError::MissingTool {
            tool: "libfdt (/usr/include/libfdt.h)".into(),
            install: INSTALL.into(),
        });
    }
    let venv = Command::new("python3")
        .args(["-c", "import venv, ensurepip"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    if !venv {
        return Err(KernelError::MissingTool {
            tool: "python3-venv".into(),
            install: INSTALL.into(),
        });
    }
    Ok(())
}

/// The built QEMU for this host's compiler, when the cache has it.
pub fn cached(cache_dir: &Path) -> Result<Option<VirtualQemu>, KernelError> {
    let key = key_of(&key_material(&compiler()?));
    Ok(cached_at(cache_dir, &key))
}

/// The cached build of `key`, when it is there and every binary has the
/// sha256 its manifest recorded. One that is there but fails the check
/// is said, with why, and not used (`Err` carries the reason).
fn find(cache_dir: &Path, key: &str) -> Result<Option<VirtualQemu>, String> {
    let dir = root(cache_dir).join(format!("{QEMU_VERSION}-{key}"));
    if !whole(&dir) {
        return Ok(None);
    }
    verify(&dir)?;
    Ok(Some(VirtualQemu {
        dir,
        key: key.to_string(),
    }))
}

/// [`find`], a build that fails its check logged and left alone: what
/// asks only whether one is cached (it is not).
fn cached_at(cache_dir: &Path, key: &str) -> Option<VirtualQemu> {
    find(cache_dir, key)
        .map_err(|why| tracing::warn!("{why}"))
        .ok()
        .flatten()
}

/// Checks each binary of the build in `dir` against its manifest's
/// sha256; the error says which file, what was found and what to do.
fn verify(dir: &Path) -> Result<(), String> {
    let path = dir.join("manifest.json");
    let manifest: QemuManifest = std::fs::read(&path)
        .map_err(|e| e.to_string())
        .and_then(|b| serde_json::from_slice(&b).map_err(|e| e.to_string()))
        .map_err(|e| {
            format!(
                "the cached QEMU's manifest {} cannot be read ({e}): it is built again",
                path.display()
            )
        })?;
    for b in BINARIES {
        let file = dir.join(b);
        let Some(want) = manifest.binaries.get(b) else {
            return Err(format!(
                "the cached QEMU {} records no sha256 for {b} (built by an older harness): it is built again",
                dir.display()
            ));
        };
        let got = lazyinit_core::paths::sha256_file(&file).map_err(|e| {
            format!(
                "the cached QEMU binary {} cannot be read ({e}): it is built again",
                file.display()
            )
        })?;
        if &got != want {
            return Err(format!(
                "the cached QEMU binary {} has sha256 {got}, its manifest says {want} (edited or truncated since it was built): it is built again",
                file.display()
            ));
        }
    }
    Ok(())
}

/// Whether a built QEMU's folder has its manifest and both binaries.
fn whole(dir: &Path) -> bool {
    dir.join("manifest.json").is_file() && BINARIES.iter().all(|b| dir.join(b).is_file())
}

fn say(progress: &Option<ProgressFn>, what: String) {
    tracing::info!("{what}");
    if let Some(p) = progress {
        p(BuildEvent::Step(what));
    }
}

/// The QEMU of the virtual clock, built into the cache when it is not
/// there (about 6 minutes and 700 CPU-seconds on 2 cores).
pub async fn ensure(
    cache_dir: &Path,
    progress: Option<ProgressFn>,
) -> Result<VirtualQemu, KernelError> {
    let compiler = compiler()?;
    let material = key_material(&compiler);
    let key = key_of(&material);
    if let Ok(Some(q)) = find(cache_dir, &key) {
        return Ok(q);
    }
    check_tools()?;
    let root = root(cache_dir);
    std::fs::create_dir_all(&root).map_err(|e| KernelError::io(&root, e))?;
    // One builder: the others wait here and find it built.
    let lock_path = root.join("build.lock");
    let lock = {
        let p = lock_path.clone();
        tokio::task::spawn_blocking(move || crate::build::lock_file(&p))
            .await
            .map_err(|e| KernelError::Step(format!("the QEMU build lock: {e}")))??
    };
    match find(cache_dir, &key) {
        Ok(Some(q)) => return Ok(q),
        Ok(None) => {}
        Err(why) => {
            // Under the lock, so no one is using it while it goes.
            say(&progress, why);
            let dir = root.join(format!("{QEMU_VERSION}-{key}"));
            std::fs::remove_dir_all(&dir).map_err(|e| KernelError::io(&dir, e))?;
        }
    }
    let tarball = fetch_tarball(&root, &progress).await?;
    let (root2, key2, progress2) = (root.clone(), key.clone(), progress.clone());
    let built = tokio::task::spawn_blocking(move || {
        build_blocking(&root2, &tarball, &key2, &compiler, &progress2)
    })
    .await
    .map_err(|e| KernelError::Step(format!("the QEMU build: {e}")))?;
    drop(lock);
    built?;
    find(cache_dir, &key)
        .map_err(KernelError::Step)?
        .ok_or_else(|| KernelError::Step("the QEMU build published nothing".into()))
}

/// The orig tarball, verified, in `<cache>/qemu/src/`.
async fn fetch_tarball(root: &Path, progress: &Option<ProgressFn>) -> Result<PathBuf, KernelError> {
    let dir = root.join("src");
    let dest = dir.join(TARBALL);
    if dest.is_file() {
        return Ok(dest);
    }
    std::fs::create_dir_all(&dir).map_err(|e| KernelError::io(&dir, e))?;
    let mirror =
        std::env::var("LAZYINIT_DEBIAN_MIRROR").unwrap_or_else(|_| DEFAULT_DEBIAN_MIRROR.into());
    let url = format!("{}/{POOL_PATH}/{TARBALL}", mirror.trim_end_matches('/'));
    say(progress, format!("fetch {url}"));
    let opts = FetchOptions {
        mirror: mirror.clone(),
        progress: progress.clone(),
        ..FetchOptions::default()
    };
    let partial = dir.join(format!(".partial-{TARBALL}"));
    let client = crate::fetch::client(&opts)?;
    crate::fetch::download(&client, &url, &partial, &opts)
        .await
        .map_err(|e| match e {
            KernelError::Download { url, detail, .. } => KernelError::Download {
                url,
                mirror: format!("{mirror} (LAZYINIT_DEBIAN_MIRROR)"),
                detail,
            },
            e => e,
        })?;
    let p = partial.clone();
    let got = tokio::task::spawn_blocking(move || lazyinit_core::paths::sha256_file(&p))
        .await
        .map_err(|e| KernelError::Step(format!("hashing {TARBALL}: {e}")))?
        .map_err(|e| KernelError::io(&partial, e))?;
    if got != TARBALL_SHA256 {
        let _ = std::fs::remove_file(&partial);
        return Err(KernelError::Checksum {
            file: url,
            expected: TARBALL_SHA256.into(),
            got,
        });
    }
    std::fs::rename(&partial, &dest).map_err(|e| KernelError::io(&dest, e))?;
    Ok(dest)
}

/// Runs `cmd` with its output appended to `log`; a failure names the
/// step and ends with the log's tail.
fn step(cmd: &mut Command, log: &Path, what: &str) -> Result<(), KernelError> {
    let out = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .map_err(|e| KernelError::io(log, e))?;
    let err = out.try_clone().map_err(|e| KernelError::io(log, e))?;
    let program = cmd.get_program().to_string_lossy().into_owned();
    let status = cmd
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .status()
        .map_err(|e| {
            if e.kind() == std::io::ErrorKind::NotFound {
                KernelError::MissingTool {
                    tool: program.clone(),
                    install: INSTALL.into(),
                }
            } else {
                KernelError::Step(format!("{what}: cannot run {program}: {e}"))
            }
        })?;
    if status.success() {
        return Ok(());
    }
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    let tail = lines[lines.len().saturating_sub(30)..].join("\n");
    Err(KernelError::Step(format!(
        "{what} failed ({status}; log {}):\n{tail}",
        log.display()
    )))
}

/// meson and pycotap in a virtual environment of the cache, which
/// configure's own (non-isolated) one then sees.
fn python(root: &Path, log: &Path, progress: &Option<ProgressFn>) -> Result<PathBuf, KernelError> {
    let name = format!(
        "pyvenv-{}",
        &lazyinit_core::paths::sha256_hex(PY_PACKAGES.join(" "))[..12]
    );
    let venv = root.join(&name);
    let py = venv.join("bin/python3");
    if venv.join(".complete").is_file() {
        return Ok(py);
    }
    say(
        progress,
        format!("python packages for configure: {}", PY_PACKAGES.join(", ")),
    );
    let tmp = Aside::new(&venv, "pyvenv-").map_err(|e| KernelError::io(root, e))?;
    step(
        Command::new("python3").args(["-m", "venv"]).arg(tmp.path()),
        log,
        "python3 -m venv",
    )?;
    step(
        Command::new(tmp.path().join("bin/pip"))
            .args(["install", "-q", "--disable-pip-version-check"])
            .args(PY_PACKAGES),
        log,
        "pip install meson",
    )?;
    // Its python finds its packages from where it is (pyvenv.cfg beside
    // it), so the folder moves into place whole; pip's own scripts, which
    // name the old path, are not used again.
    std::fs::write(tmp.path().join(".complete"), "").map_err(|e| KernelError::io(tmp.path(), e))?;
    tmp.publish(|d| d.join(".complete").is_file())
        .map_err(|e| KernelError::io(&venv, e))?;
    Ok(py)
}

/// The two binaries, the build's log and its manifest, moved into the
/// cache whole (`.new-<key>-…` renamed to `<version>-<key>`).
fn publish(
    root: &Path,
    build: &Path,
    log: &Path,
    key: &str,
    compiler: &str,
    t0: std::time::Instant,
) -> Result<PathBuf, KernelError> {
    let dest = root.join(format!("{QEMU_VERSION}-{key}"));
    let aside = Aside::new(&dest, &format!("new-{key}-")).map_err(|e| KernelError::io(root, e))?;
    let new = aside.path();
    for b in BINARIES {
        std::fs::copy(build.join(b), new.join(b)).map_err(|e| KernelError::io(&new.join(b), e))?;
    }
    std::fs::copy(log, new.join("build.log")).map_err(|e| KernelError::io(new, e))?;
    let manifest = QemuManifest {
        version: QEMU_VERSION.into(),
        key: key.into(),
        tarball_sha256: TARBALL_SHA256.into(),
        patches: PATCHES.iter().map(|(n, _)| n.to_string()).collect(),
        configure: CONFIGURE.iter().map(|s| s.to_string()).collect(),
        compiler: compiler.into(),
        build_seconds: t0.elapsed().as_secs_f64(),
        built_at: chrono::Utc::now().to_rfc3339(),
        binaries: BINARIES
            .iter()
            .map(|b| {
                let f = new.join(b);
                lazyinit_core::paths::sha256_file(&f)
                    .map(|h| (b.to_string(), h))
                    .map_err(|e| KernelError::io(&f, e))
            })
            .collect::<Result<_, _>>()?,
    };
    let text = serde_json::to_string_pretty(&manifest)
        .map_err(|e| KernelError::Step(format!("the QEMU manifest: {e}")))?;
    std::fs::write(new.join("manifest.json"), text).map_err(|e| KernelError::io(new, e))?;
    aside
        .publish(whole)
        .map_err(|e| KernelError::io(&dest, e))?;
    Ok(dest)
}

fn build_blocking(
    root: &Path,
    tarball: &Path,
    key: &str,
    compiler: &str,
    progress: &Option<ProgressFn>,
) -> Result<(), KernelError> {
    let t0 = std::time::Instant::now();
    remove_stale_work(root)?;
    let work = tempfile::Builder::new()
        .prefix(".build-")
        .tempdir_in(root)
        .map_err(|e| KernelError::io(root, e))?;
    let log = work.path().join("build.log");
    let py = python(root, &log, progress)?;
    say(progress, format!("unpack {TARBALL}"));
    step(
        Command::new("tar")
            .arg("-xf")
            .arg(tarball)
            .arg("-C")
            .arg(work.path()),
        &log,
        "unpacking the QEMU source",
    )?;
    let src = work.path().join(format!("qemu-{QEMU_VERSION}"));
    apply_patches(work.path(), &src, &log, progress)?;
    let build = src.join("build");
    std::fs::create_dir_all(&build).map_err(|e| KernelError::io(&build, e))?;
    say(progress, "configure QEMU".into());
    step(
        Command::new("../configure")
            .arg(format!("--python={}", py.display()))
            .args(CONFIGURE)
            .current_dir(&build),
        &log,
        "configuring QEMU",
    )?;
    let jobs = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    say(progress, format!("ninja {} (-j{jobs})", BINARIES.join(" ")));
    step(
        Command::new("ninja")
            .arg(format!("-j{jobs}"))
            .args(BINARIES)
            .current_dir(&build),
        &log,
        "building QEMU",
    )?;
    let dest = publish(root, &build, &log, key, compiler, t0)?;
    say(
        progress,
        format!(
            "QEMU {QEMU_VERSION} ({key}) built in {:.0} s: {}",
            t0.elapsed().as_secs_f64(),
            dest.display()
        ),
    );
    Ok(())
}

/// Stale work of a builder killed before us (the caller holds the lock).
fn remove_stale_work(root: &Path) -> Result<(), KernelError> {
    for e in std::fs::read_dir(root)
        .map_err(|e| KernelError::io(root, e))?
        .flatten()
    {
        let n = e.file_name().to_string_lossy().into_owned();
        if n.starts_with(".build-") || n.starts_with(".pyvenv-") || n.starts_with(".new-") {
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
    Ok(())
}

/// The harness's patches on the unpacked source `src`, in order.
fn apply_patches(
    work: &Path,
    src: &Path,
    log: &Path,
    progress: &Option<ProgressFn>,
) -> Result<(), KernelError> {
    for (name, text) in PATCHES {
        say(progress, format!("apply {name}"));
        let patch = work.join(name);
        std::fs::write(&patch, text).map_err(|e| KernelError::io(&patch, e))?;
        step(
            Command::new("patch")
                .args(["-p1", "--batch", "--forward", "-i"])
                .arg(&patch)
                .current_dir(src),
            log,
            &format!("applying {name}"),
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_key_follows_patches_configure_and_compiler() {
        let a = key_of(&key_material("gcc 12.2.0"));
        assert_eq!(a.len(), 16);
        assert_eq!(a, key_of(&key_material("gcc 12.2.0")));
        assert_ne!(a, key_of(&key_material("gcc 13.1.0")));
        let m = key_material("gcc");
        assert!(m.contains(TARBALL_SHA256));
        assert!(m.contains("0002-zero-hold-on-the-virtual-clock.patch"));
        assert!(m.contains("--target-list=x86_64-softmmu,aarch64-softmmu"));
    }

    #[test]
    fn the_patches_touch_what_the_design_says() {
        let (_, zero) = PATCHES[1];
        assert!(zero.contains("+++ b/block/zero-hold.c"));
        assert!(zero.contains("qemu_virtual_clock_held()"));
        assert!(zero.contains("timer_init_ns(&t, QEMU_CLOCK_VIRTUAL, zero_hold_wake"));
    }

    /// The build folder of key `k` under `cache`, its manifest recording
    /// `binaries` (name, content) as a build writes it.
    fn built(cache: &Path, binaries: &[(&str, &str)]) -> PathBuf {
        let dir = root(cache).join(format!("{QEMU_VERSION}-k"));
        std::fs::create_dir_all(&dir).unwrap();
        let manifest = serde_json::to_string(&QemuManifest {
            version: QEMU_VERSION.into(),
            key: "k".into(),
            tarball_sha256: TARBALL_SHA256.into(),
            patches: vec![],
            configure: vec![],
            compiler: "cc".into(),
            build_seconds: 1.0,
            built_at: "2026-01-01T00:00:00Z".into(),
            binaries: binaries
                .iter()
                .map(|(b, c)| (b.to_string(), lazyinit_core::paths::sha256_hex(c)))
                .collect(),
        })
        .unwrap();
        std::fs::write(dir.join("manifest.json"), manifest).unwrap();
        dir
    }

    #[test]
    fn a_cache_without_the_binaries_is_not_a_hit() {
        let d = tempfile::tempdir().unwrap();
        let dir = built(d.path(), &[(BINARIES[0], "x86"), (BINARIES[1], "arm")]);
        std::fs::write(dir.join(BINARIES[0]), "x86").unwrap();
        assert!(find(d.path(), "k").unwrap().is_none(), "half a build");
        std::fs::write(dir.join(BINARIES[1]), "arm").unwrap();
        let q = find(d.path(), "k").unwrap().unwrap();
        assert_eq!(q.binary(Arch::Arm64), dir.join("qemu-system-aarch64"));
    }

    /// Every binary is checked against the manifest before it is used: an
    /// edited one, a truncated one and a manifest that records no sha256
    /// (an older harness's) are each refused, naming the file and that it
    /// is built again.
    #[test]
    fn a_binary_that_is_not_the_one_built_is_never_used() {
        let d = tempfile::tempdir().unwrap();
        let dir = built(
            d.path(),
            &[(BINARIES[0], "x86 binary"), (BINARIES[1], "arm binary")],
        );
        std::fs::write(dir.join(BINARIES[0]), "x86 binary").unwrap();
        std::fs::write(dir.join(BINARIES[1]), "arm binary").unwrap();
        assert!(find(d.path(), "k").unwrap().is_some());
        std::fs::write(dir.join(BINARIES[0]), "#!/bin/sh\nid\n").unwrap();
        let why = find(d.path(), "k").unwrap_err();
        assert!(why.contains("qemu-system-x86_64 has sha256"), "{why}");
        assert!(why.contains("it is built again"), "{why}");
        std::fs::write(dir.join(BINARIES[0]), "x86 bin").unwrap();
        let why = find(d.path(), "k").unwrap_err();
        assert!(why.contains("edited or truncated"), "{why}");
        std::fs::write(dir.join(BINARIES[0]), "x86 binary").unwrap();
        built(d.path(), &[]);
        let why = find(d.path(), "k").unwrap_err();
        assert!(why.contains("records no sha256"), "{why}");
        assert!(cached_at(d.path(), "k").is_none());
    }
}

//! What a run folder says about where its rows come from. Each fact is
//! read from a file the run left (or the kernel cache's manifest of the
//! image it booted); a fact no file holds is `None`, stored as NULL.

use std::path::Path;

use lazyinit_core::layout::{CellFolder, RunFolder};

/// The run's own files.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RunFacts {
    pub spec_toml: Option<String>,
    pub command_txt: Option<String>,
    pub host: HostFacts,
}

/// The host that ran the guests. A folder does not record it: only a live
/// import (`run --history`, on the host itself) fills it in.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct HostFacts {
    pub cpu: Option<String>,
    pub cores: Option<u64>,
    pub memory_bytes: Option<u64>,
    pub qemu_version: Option<String>,
}

/// One cell's folder and the kernel it booted.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CellFacts {
    /// The kernel cache directory's name, e.g. `debian-6.1-arm64-hz100-fix-qemu-7065…`.
    pub kernel_build: Option<String>,
    pub source_identity: Option<String>,
    pub source_version: Option<String>,
    pub config_sha256: Option<String>,
    pub patch_sha256: Option<String>,
    pub guest_facts: Option<String>,
    pub storage_calibration: Option<String>,
    pub qemu_cmdline: Option<String>,
}

impl RunFacts {
    pub fn of(folder: &RunFolder) -> RunFacts {
        RunFacts {
            spec_toml: folder.spec_toml().text(),
            command_txt: folder.command_txt().text(),
            host: HostFacts::default(),
        }
    }
}

impl HostFacts {
    /// This host, as `/proc` and `qemu-system-<arch> --version` tell.
    pub fn this_host(qemu_binary: &str) -> HostFacts {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
        let qemu_version = std::process::Command::new(qemu_binary)
            .arg("--version")
            .output()
            .ok()
            .filter(|o| o.status.success())
            .and_then(|o| {
                String::from_utf8_lossy(&o.stdout)
                    .lines()
                    .next()
                    .map(str::to_string)
            });
        HostFacts {
            cpu: cpu_model(&cpuinfo),
            cores: std::thread::available_parallelism()
                .ok()
                .map(|n| n.get() as u64),
            memory_bytes: mem_total(&meminfo),
            qemu_version,
        }
    }
}

/// `model name` of /proc/cpuinfo (x86), else its `CPU part` line (arm).
fn cpu_model(cpuinfo: &str) -> Option<String> {
    ["model name", "CPU part"].iter().find_map(|key| {
        cpuinfo.lines().find_map(|l| {
            let (k, v) = l.split_once(':')?;
            (k.trim() == *key).then(|| v.trim().to_string())
        })
    })
}

fn mem_total(meminfo: &str) -> Option<u64> {
    let line = meminfo.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// The image path after `-kernel` in a QEMU command line.
fn kernel_path(cmdline: &str) -> Option<&str> {
    let mut words = cmdline.split_whitespace();
    words.find(|w| *w == "-kernel")?;
    words.next()
}

impl CellFacts {
    pub fn of(cell: &CellFolder) -> CellFacts {
        let qemu_cmdline = cell.qemu_cmdline().text();
        let build_dir = qemu_cmdline
            .as_deref()
            .and_then(kernel_path)
            .and_then(|k| Path::new(k).parent())
            .map(Path::to_path_buf);
        let manifest = build_dir
            .as_deref()
            .and_then(lazyinit_kernel::cache::load)
            .map(|(m, _)| m);
        CellFacts {
            kernel_build: build_dir
                .as_deref()
                .and_then(Path::file_name)
                .map(|n| n.to_string_lossy().into_owned()),
            source_identity: manifest.as_ref().map(|m| m.source_identity.clone()),
            source_version: manifest.as_ref().map(|m| m.source_version.clone()),
            config_sha256: manifest.as_ref().map(|m| m.config_sha256.clone()),
            patch_sha256: manifest.as_ref().and_then(|m| m.patch_sha256.clone()),
            guest_facts: cell.facts_txt().text(),
            storage_calibration: cell.storage_txt().text(),
            qemu_cmdline,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_lines_parse() {
        let x86 = "processor\t: 0\nmodel name\t: AMD EPYC 7B13\n";
        assert_eq!(cpu_model(x86).as_deref(), Some("AMD EPYC 7B13"));
        assert_eq!(cpu_model("CPU part\t: 0xd0c\n").as_deref(), Some("0xd0c"));
        assert_eq!(cpu_model(""), None);
        assert_eq!(mem_total("MemTotal:       8000 kB\n"), Some(8_192_000));
        assert_eq!(
            kernel_path("qemu -m 512 -kernel /c/builds/k-1/Image -initrd x"),
            Some("/c/builds/k-1/Image")
        );
    }

    /// A committed cell folder: what it has is read, what it lacks (the
    /// kernel cache's manifest is not on this machine) is None.
    #[test]
    fn a_committed_cell_reads_what_it_has() {
        let root =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../../results/l-stability-timer/matrix-1");
        let f =
            CellFacts::of(&RunFolder::new(&root).cell("qemu-arm64-debian-6.1-hz100-fix-64GiB-r1"));
        assert_eq!(
            f.kernel_build.as_deref(),
            Some("debian-6.1-arm64-hz100-fix-qemu-70654637c24aae84")
        );
        assert!(f.guest_facts.unwrap().contains("hz=100"));
        assert!(f.storage_calibration.unwrap().contains("hold_us=2794"));
        assert!(f.qemu_cmdline.is_some());
    }
}

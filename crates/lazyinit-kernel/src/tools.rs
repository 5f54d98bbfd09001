//! Host tools a kernel build needs, found before any work starts.

use std::path::{Path, PathBuf};

use lazyinit_core::Arch;

use crate::error::KernelError;

/// `CROSS_COMPILE` for building `arch` on this host ("" when native).
pub fn cross_prefix(arch: Arch) -> String {
    if Arch::host() == Some(arch) {
        String::new()
    } else {
        format!("{}-", arch.gnu_triplet())
    }
}

/// The C compiler a build of `arch` uses.
pub fn compiler(arch: Arch) -> String {
    format!("{}gcc", cross_prefix(arch))
}

/// (program, Debian package) pairs a build of `arch` needs.
pub fn required(arch: Arch) -> Vec<(String, String)> {
    let cc = compiler(arch);
    let cc_pkg = if cross_prefix(arch).is_empty() {
        "gcc".to_string()
    } else {
        format!("gcc-{}", arch.gnu_triplet())
    };
    let mut v = vec![(cc, cc_pkg)];
    for (p, pkg) in [
        ("make", "make"),
        ("flex", "flex"),
        ("bison", "bison"),
        ("bc", "bc"),
        ("perl", "perl"),
        ("patch", "patch"),
        ("tar", "tar"),
        ("xz", "xz-utils"),
        ("nice", "coreutils"),
    ] {
        v.push((p.to_string(), pkg.to_string()));
    }
    v
}

pub fn find_in_path(program: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(program))
        .find(|p| p.is_file())
}

/// Fail with one error naming every missing tool and the apt command.
pub fn check(arch: Arch) -> Result<(), KernelError> {
    let mut missing: Vec<(String, String)> = required(arch)
        .into_iter()
        .filter(|(p, _)| find_in_path(p).is_none())
        .collect();
    // objtool (x86) and resolve_btfids need libelf's headers.
    if !Path::new("/usr/include/libelf.h").exists()
        && !Path::new("/usr/include/libelf/libelf.h").exists()
    {
        missing.push(("libelf headers".into(), "libelf-dev".into()));
    }
    if missing.is_empty() {
        return Ok(());
    }
    let tools: Vec<&str> = missing.iter().map(|(t, _)| t.as_str()).collect();
    let mut pkgs: Vec<&str> = missing.iter().map(|(_, p)| p.as_str()).collect();
    pkgs.dedup();
    Err(KernelError::MissingTool {
        tool: tools.join(", "),
        install: format!("apt-get install {}", pkgs.join(" ")),
    })
}

/// Tools a resolved config needs beyond the compiler (option, program,
/// Debian package): a distro config's BTF needs pahole, its module signing
/// generates a key with openssl while building the image.
const CONFIG_TOOLS: [(&str, &str, &str); 2] = [
    ("CONFIG_DEBUG_INFO_BTF", "pahole", "dwarves"),
    ("CONFIG_MODULE_SIG", "openssl", "openssl"),
];

/// The tools `config` needs that are missing, before the long build that
/// would fail on them at the end.
pub fn missing_for_config(
    config: &crate::fragments::Options,
    have: impl Fn(&str) -> bool,
) -> Vec<(String, String)> {
    CONFIG_TOOLS
        .iter()
        .filter(|(opt, prog, _)| {
            config.get(*opt).and_then(|v| v.as_deref()) == Some("y") && !have(prog)
        })
        .map(|(opt, prog, pkg)| (format!("{prog} (for {opt}=y)"), pkg.to_string()))
        .collect()
}

pub fn check_config(config: &crate::fragments::Options) -> Result<(), KernelError> {
    let missing = missing_for_config(config, |p| find_in_path(p).is_some());
    if missing.is_empty() {
        return Ok(());
    }
    Err(KernelError::MissingTool {
        tool: missing
            .iter()
            .map(|(t, _)| t.as_str())
            .collect::<Vec<_>>()
            .join(", "),
        install: format!(
            "apt-get install {}",
            missing
                .iter()
                .map(|(_, p)| p.as_str())
                .collect::<Vec<_>>()
                .join(" ")
        ),
    })
}

/// First line of `<cc> --version`, recorded and part of the cache key.
pub fn compiler_version(arch: Arch) -> Result<String, KernelError> {
    let cc = compiler(arch);
    let out = std::process::Command::new(&cc)
        .arg("--version")
        .output()
        .map_err(|_| KernelError::MissingTool {
            tool: cc.clone(),
            install: "apt-get install gcc gcc-aarch64-linux-gnu".into(),
        })?;
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .next()
        .unwrap_or_default()
        .trim()
        .to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn foreign_arch_uses_the_cross_compiler() {
        let foreign = if Arch::host() == Some(Arch::X86_64) {
            Arch::Arm64
        } else {
            Arch::X86_64
        };
        assert!(compiler(foreign).ends_with("-linux-gnu-gcc"));
        let req = required(foreign);
        assert!(req[0].1.starts_with("gcc-"), "{req:?}");
        if let Some(h) = Arch::host() {
            assert_eq!(compiler(h), "gcc");
        }
    }

    #[test]
    fn a_btf_config_needs_pahole() {
        let cfg = crate::fragments::parse("CONFIG_DEBUG_INFO_BTF=y\nCONFIG_MODULE_SIG=y\n");
        let m = missing_for_config(&cfg, |p| p == "openssl");
        assert_eq!(
            m,
            [(
                "pahole (for CONFIG_DEBUG_INFO_BTF=y)".to_string(),
                "dwarves".to_string()
            )]
        );
        assert!(missing_for_config(&cfg, |_| true).is_empty());
        let off = crate::fragments::parse("# CONFIG_DEBUG_INFO_BTF is not set\n");
        assert!(missing_for_config(&off, |_| false).is_empty());
    }
}

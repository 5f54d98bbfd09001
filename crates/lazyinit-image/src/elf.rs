//! What an ELF file needs to run, read with `readelf`, which reads any
//! architecture's ELF on the host without running it.

use std::path::Path;
use std::process::Command;

use lazyinit_core::Arch;

use crate::error::ImageError;

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ElfInfo {
    /// readelf's `Machine:` text, e.g. `AArch64`.
    pub machine: String,
    /// Program interpreter (dynamic loader), if dynamically linked.
    pub interpreter: Option<String>,
    /// `DT_NEEDED` sonames.
    pub needed: Vec<String>,
}

/// Parses `readelf -hdlW` output.
pub fn parse_readelf(text: &str) -> ElfInfo {
    let mut info = ElfInfo::default();
    for line in text.lines() {
        let line = line.trim();
        if let Some(m) = line.strip_prefix("Machine:") {
            info.machine = m.trim().to_string();
        } else if let Some(rest) = line.split("[Requesting program interpreter:").nth(1) {
            info.interpreter = Some(rest.trim().trim_end_matches(']').trim().to_string());
        } else if line.contains("(NEEDED)") {
            if let Some(lib) = line.split('[').nth(1) {
                info.needed.push(lib.trim_end_matches(']').to_string());
            }
        }
    }
    info
}

/// readelf's name for the machine of each arch.
pub fn machine_name(arch: Arch) -> &'static str {
    match arch {
        Arch::X86_64 => "Advanced Micro Devices X86-64",
        Arch::Arm64 => "AArch64",
    }
}

pub fn is_elf(bytes: &[u8]) -> bool {
    bytes.starts_with(b"\x7fELF")
}

/// Runs `readelf -hdlW` on one file.
pub fn readelf(path: &Path) -> Result<ElfInfo, ImageError> {
    let out = crate::apt::run(
        Command::new("readelf").arg("-hdlW").arg(path),
        &format!("readelf {}", path.display()),
    )?;
    Ok(parse_readelf(&out))
}

#[cfg(test)]
mod tests {
    use super::*;

    const DROPBEAR: &str = "\
ELF Header:
  Class:                             ELF64
  Machine:                           AArch64
Program Headers:
  INTERP         0x000238 0x0000000000000238 0x0000000000000238 0x00001b 0x00001b R   0x1
      [Requesting program interpreter: /lib/ld-linux-aarch64.so.1]
Dynamic section at offset 0x4fd58 contains 31 entries:
  Tag        Type                         Name/Value
 0x0000000000000001 (NEEDED)             Shared library: [libtomcrypt.so.1]
 0x0000000000000001 (NEEDED)             Shared library: [libc.so.6]
 0x000000000000000e (SONAME)             Library soname: [libfoo.so.1]
";

    #[test]
    fn reads_machine_interpreter_and_needed() {
        let info = parse_readelf(DROPBEAR);
        assert_eq!(info.machine, machine_name(Arch::Arm64));
        assert_eq!(
            info.interpreter.as_deref(),
            Some("/lib/ld-linux-aarch64.so.1")
        );
        assert_eq!(info.needed, ["libtomcrypt.so.1", "libc.so.6"]);
    }

    #[test]
    fn static_binary_needs_nothing() {
        let info = parse_readelf("ELF Header:\n  Machine:                           Advanced Micro Devices X86-64\n\nThere is no dynamic section in this file.\n");
        assert_eq!(info.machine, machine_name(Arch::X86_64));
        assert!(info.interpreter.is_none() && info.needed.is_empty());
    }
}

//! The host's TSC frequency, passed to x86 guests as `tsc_early_khz`.
//!
//! A TCG guest's TSC runs at the host's rate, so telling the guest that rate
//! spares it a calibration that fails on a busy host (docs/design.md §3).

/// Parses the kernel log for the host's TSC rate in kHz. The refined
/// calibration wins over the early detection when both are present.
pub fn parse_dmesg(log: &str) -> Option<u64> {
    let find = |needle: &str| {
        log.lines().rev().find_map(|l| {
            let rest = &l[l.find(needle)? + needle.len()..];
            let mhz: f64 = rest.split_whitespace().next()?.parse().ok()?;
            Some((mhz * 1000.0).round() as u64)
        })
    };
    find("Refined TSC clocksource calibration:").or_else(|| find("tsc: Detected"))
}

/// Falls back to `/proc/cpuinfo`'s `cpu MHz`, trusted only with a constant TSC.
pub fn parse_cpuinfo(cpuinfo: &str) -> Option<u64> {
    if !cpuinfo.contains("constant_tsc") {
        return None;
    }
    let line = cpuinfo.lines().find(|l| l.starts_with("cpu MHz"))?;
    let mhz: f64 = line.split(':').nth(1)?.trim().parse().ok()?;
    Some((mhz * 1000.0).round() as u64)
}

/// Best effort: `LAZYINIT_TSC_KHZ`, the kernel log, then cpuinfo.
pub fn host_tsc_khz() -> Option<u64> {
    if let Some(v) = std::env::var("LAZYINIT_TSC_KHZ")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        return Some(v);
    }
    if std::env::consts::ARCH != "x86_64" {
        return None;
    }
    if let Ok(out) = std::process::Command::new("dmesg").output() {
        if let Some(k) = parse_dmesg(&String::from_utf8_lossy(&out.stdout)) {
            return Some(k);
        }
    }
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|c| parse_cpuinfo(&c))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dmesg_detected_and_refined() {
        let log = "[0.000062] tsc: Detected 2596.130 MHz processor\n[1.2] clocksource: tsc: mask";
        assert_eq!(parse_dmesg(log), Some(2_596_130));
        let refined =
            format!("{log}\n[2.0] tsc: Refined TSC clocksource calibration: 2596.001 MHz");
        assert_eq!(parse_dmesg(&refined), Some(2_596_001));
        assert_eq!(parse_dmesg("nothing here"), None);
    }

    #[test]
    fn cpuinfo_needs_constant_tsc() {
        let c = "model name: AMD\ncpu MHz\t\t: 2596.130\nflags: fpu tsc constant_tsc\n";
        assert_eq!(parse_cpuinfo(c), Some(2_596_130));
        assert_eq!(parse_cpuinfo("cpu MHz : 2596.130\nflags: fpu tsc\n"), None);
    }
}

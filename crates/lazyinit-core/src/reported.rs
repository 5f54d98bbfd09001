//! The figures of the 2021 report (seeds/000): ext4lazyinit run time after
//! mount, kernel 5.10, Amazon Linux 2, EBS. Shipped as `results/reported-2021.csv`
//! too, so that tools other than this one can read them.

use serde::Serialize;

use crate::cell::{Arch, Hz, Variant};
use crate::size::TIB;

#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct ReportedCell {
    pub instance: &'static str,
    pub arch: Arch,
    pub hz: u32,
    pub variant: Variant,
    pub volume_bytes: u64,
    pub seconds: f64,
}

const fn cell(
    instance: &'static str,
    arch: Arch,
    hz: u32,
    variant: Variant,
    tib: u64,
    seconds: f64,
) -> ReportedCell {
    ReportedCell {
        instance,
        arch,
        hz,
        variant,
        volume_bytes: tib * TIB,
        seconds,
    }
}

pub const REPORTED_2021: [ReportedCell; 8] = [
    cell("c6g.2xlarge", Arch::Arm64, 100, Variant::NoFix, 2, 1842.0),
    cell("c5.2xlarge", Arch::X86_64, 250, Variant::NoFix, 2, 743.0),
    cell("c6g.2xlarge", Arch::Arm64, 100, Variant::NoFix, 3, 2690.0),
    cell("c5.2xlarge", Arch::X86_64, 250, Variant::NoFix, 3, 1110.0),
    cell("c6g.2xlarge", Arch::Arm64, 100, Variant::Fix, 2, 660.0),
    cell("c5.2xlarge", Arch::X86_64, 250, Variant::Fix, 2, 544.0),
    cell("c6g.2xlarge", Arch::Arm64, 100, Variant::Fix, 3, 1053.0),
    cell("c5.2xlarge", Arch::X86_64, 250, Variant::Fix, 3, 932.0),
];

/// The reported figure for a cell, if the report measured one like it.
pub fn lookup(
    arch: Arch,
    hz: Hz,
    variant: Variant,
    volume_bytes: u64,
) -> Option<&'static ReportedCell> {
    REPORTED_2021.iter().find(|c| {
        c.arch == arch && c.hz == hz.get() && c.variant == variant && c.volume_bytes == volume_bytes
    })
}

/// The same figures as CSV (what `results/reported-2021.csv` holds).
pub fn to_csv() -> String {
    let mut s =
        String::from("source,instance,arch,hz,variant,volume_bytes,volume,kernel,lazyinit_s\n");
    for c in REPORTED_2021 {
        s.push_str(&format!(
            "linux-ext4 2021-09-20,{},{},{},{},{},{}TiB,5.10,{}\n",
            c.instance,
            c.arch,
            c.hz,
            c.variant,
            c.volume_bytes,
            c.volume_bytes / TIB,
            c.seconds
        ));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shipped_csv_matches_constants() {
        let shipped = include_str!("../../../results/reported-2021.csv");
        assert_eq!(shipped, to_csv());
    }

    #[test]
    fn lookup_finds_only_reported_cells() {
        let hz = |n| Hz::new(n).unwrap();
        assert_eq!(
            lookup(Arch::Arm64, hz(100), Variant::NoFix, 2 * TIB)
                .unwrap()
                .seconds,
            1842.0
        );
        assert!(lookup(Arch::Arm64, hz(250), Variant::NoFix, 2 * TIB).is_none());
    }
}

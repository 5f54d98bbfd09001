//! The ratios users ask about: no-fix / fix, arm64 / x86_64, HZ100 / HZ250,
//! measured (with intervals), from the model, and from the 2021 report.

use std::cmp::Ordering;

use lazyinit_core::identity::FIELDS;
use lazyinit_core::reported;
use lazyinit_core::size::TIB;
use lazyinit_core::{Arch, Variant};
use serde::Serialize;

use crate::cells::{CellKey, CellStats};
use crate::stats::{self, RatioEstimate};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RatioKind {
    /// Same arch, HZ and volume: how much the fix saves.
    NofixOverFix,
    /// Same variant and volume; same HZ, or arm64 HZ100 over x86_64 HZ250
    /// as in the report's instances.
    Arm64OverX86_64,
    /// Same arch, variant and volume.
    Hz100OverHz250,
}

impl RatioKind {
    pub const ALL: [RatioKind; 3] = [
        RatioKind::NofixOverFix,
        RatioKind::Arm64OverX86_64,
        RatioKind::Hz100OverHz250,
    ];

    pub fn title(self) -> &'static str {
        match self {
            RatioKind::NofixOverFix => "nofix / fix",
            RatioKind::Arm64OverX86_64 => "arm64 / x86_64",
            RatioKind::Hz100OverHz250 => "HZ100 / HZ250",
        }
    }

    /// The key's fields (columns of [`lazyinit_core::identity::FIELDS`])
    /// in which the two cells of this kind's ratio may differ; they agree
    /// on every other field of the table, the knobs' included.
    fn free_fields(self) -> &'static [&'static str] {
        match self {
            RatioKind::NofixOverFix => &["variant"],
            // Machines differ between arches, and the report's instances
            // ran arm64 at HZ=100 and x86_64 at HZ=250.
            RatioKind::Arm64OverX86_64 => &["arch", "machine", "hz"],
            RatioKind::Hz100OverHz250 => &["hz"],
        }
    }

    /// Whether `num` / `den` is a ratio of this kind: they differ in the
    /// kind's axis as it says and agree on every other field of the key's
    /// table (so two values of a knob are never one pair) and on whether
    /// they are estimates.
    pub fn pairs(self, num: &CellKey, den: &CellKey) -> bool {
        let free = self.free_fields();
        let same = FIELDS
            .iter()
            .filter(|f| !free.contains(&f.column))
            .all(|f| (f.cmp)(num, den) == Ordering::Equal);
        if !same || num.estimated != den.estimated {
            return false;
        }
        let (n, d) = (num.axes.hz.get(), den.axes.hz.get());
        match self {
            RatioKind::NofixOverFix => {
                num.axes.variant == Variant::NoFix && den.axes.variant == Variant::Fix
            }
            RatioKind::Arm64OverX86_64 => {
                num.axes.arch == Arch::Arm64
                    && den.axes.arch == Arch::X86_64
                    && (n == d || (n == 100 && d == 250))
            }
            RatioKind::Hz100OverHz250 => n == 100 && d == 250,
        }
    }
}

/// The 2021 report's ratio for the same pair, at one of its volumes.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ReportedRatio {
    pub volume_bytes: u64,
    pub value: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct RatioRow {
    pub kind: RatioKind,
    pub numerator: CellKey,
    pub denominator: CellKey,
    /// `None` when a side has no measurement.
    pub measured: Option<RatioEstimate>,
    pub model: f64,
    /// At the cells' volume if the report has it, else at 2 and 3 TiB
    /// (the ratios barely depend on volume).
    pub reported: Vec<ReportedRatio>,
}

fn reported_ratio(num: &CellKey, den: &CellKey) -> Vec<ReportedRatio> {
    let at = |v: u64| {
        let a = reported::lookup(num.axes.arch, num.axes.hz, num.axes.variant, v)?;
        let b = reported::lookup(den.axes.arch, den.axes.hz, den.axes.variant, v)?;
        Some(ReportedRatio {
            volume_bytes: v,
            value: a.seconds / b.seconds,
        })
    };
    match at(num.axes.volume.0) {
        Some(r) => vec![r],
        None => [2 * TIB, 3 * TIB].into_iter().filter_map(at).collect(),
    }
}

/// Every ratio the cells allow, in cell order.
pub fn ratios(cells: &[CellStats]) -> Vec<RatioRow> {
    let mut out = Vec::new();
    for kind in RatioKind::ALL {
        for num in cells {
            for den in cells.iter().filter(|d| kind.pairs(&num.key, &d.key)) {
                let measured = match (&num.summary, &den.summary) {
                    (Some(a), Some(b)) => stats::ratio(a, b),
                    _ => None,
                };
                out.push(RatioRow {
                    kind,
                    numerator: num.key.clone(),
                    denominator: den.key.clone(),
                    measured,
                    model: num.model.value / den.model.value,
                    reported: reported_ratio(&num.key, &den.key),
                });
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A 64 GiB cell key on the default testbed.
    fn key(arch: Arch, hz: u32, variant: Variant) -> CellKey {
        crate::cells::tests_support::key(arch, hz, variant, 64 << 30)
    }

    #[test]
    fn pairs_only_within_one_environment() {
        let a = key(Arch::Arm64, 100, Variant::NoFix);
        let f = key(Arch::Arm64, 100, Variant::Fix);
        assert!(RatioKind::NofixOverFix.pairs(&a, &f));
        assert!(!RatioKind::NofixOverFix.pairs(&f, &a));
        let mut kvm = f.clone();
        kvm.testbed.accel = "kvm".into();
        assert!(!RatioKind::NofixOverFix.pairs(&a, &kvm));
        // An estimate is never divided by a measurement.
        let mut est = f.clone();
        est.estimated = true;
        assert!(!RatioKind::NofixOverFix.pairs(&a, &est));
        let x = key(Arch::X86_64, 250, Variant::NoFix);
        assert!(RatioKind::Arm64OverX86_64.pairs(&a, &x));
        assert!(!RatioKind::Arm64OverX86_64.pairs(&a, &key(Arch::X86_64, 1000, Variant::NoFix)));
        assert!(!RatioKind::Hz100OverHz250.pairs(&a, &x), "different arch");
        assert!(RatioKind::Hz100OverHz250.pairs(&a, &key(Arch::Arm64, 250, Variant::NoFix)));
    }

    /// The pairing reads the key's table: cells at two values of a knob
    /// are never one ratio's two cells; at one value they pair as always.
    #[test]
    fn two_values_of_a_knob_are_never_one_pair() {
        use lazyinit_core::identity::knobs::InodeSize;
        let sets = [
            lazyinit_core::identity::Knobs {
                inode_size: InodeSize(128),
            },
            lazyinit_core::identity::Knobs::default(),
        ];
        let at = |arch, hz, v, k: &lazyinit_core::identity::Knobs| {
            let mut c = key(arch, hz, v);
            c.axes.knobs = k.clone();
            c
        };
        let (small, plain) = (&sets[0], &sets[1]);
        for kind in RatioKind::ALL {
            let (num, den) = match kind {
                RatioKind::NofixOverFix => (
                    (Arch::Arm64, 100, Variant::NoFix),
                    (Arch::Arm64, 100, Variant::Fix),
                ),
                RatioKind::Arm64OverX86_64 => (
                    (Arch::Arm64, 100, Variant::Fix),
                    (Arch::X86_64, 250, Variant::Fix),
                ),
                RatioKind::Hz100OverHz250 => (
                    (Arch::Arm64, 100, Variant::Fix),
                    (Arch::Arm64, 250, Variant::Fix),
                ),
            };
            for k in [small, plain] {
                assert!(
                    kind.pairs(&at(num.0, num.1, num.2, k), &at(den.0, den.1, den.2, k)),
                    "{kind:?} at {k:?}"
                );
            }
            assert!(
                !kind.pairs(
                    &at(num.0, num.1, num.2, small),
                    &at(den.0, den.1, den.2, plain)
                ),
                "{kind:?}"
            );
            assert!(
                !kind.pairs(
                    &at(num.0, num.1, num.2, plain),
                    &at(den.0, den.1, den.2, small)
                ),
                "{kind:?}"
            );
        }
    }

    #[test]
    fn reported_ratio_falls_back_to_reported_volumes() {
        let r = reported_ratio(
            &key(Arch::Arm64, 100, Variant::NoFix),
            &key(Arch::X86_64, 250, Variant::NoFix),
        );
        assert_eq!(r.len(), 2);
        assert!((r[0].value - 1842.0 / 743.0).abs() < 1e-12);
        assert!((r[1].value - 2690.0 / 1110.0).abs() < 1e-12);
        assert!(reported_ratio(
            &key(Arch::Arm64, 250, Variant::NoFix),
            &key(Arch::X86_64, 250, Variant::NoFix)
        )
        .is_empty());
    }
}

//! Which clock a QEMU guest runs on (docs/virtual-clock.md).
//!
//! - `real`: the guest's clock follows the host's (KVM, or TCG at the
//!   host's pace): what the host does reaches what the kernel measures.
//! - `virtual` / `virtual:N`: TCG with `-icount shift=N,sleep=off` on the
//!   QEMU this project builds (`lazyinit_kernel::emulator`): the guest's
//!   clock advances 2^N ns per instruction and, when the guest is idle,
//!   jumps to its next timer; zero requests are held on that clock by the
//!   zero-hold filter. The same cell gives the same microseconds on any
//!   host under any load.
//! - `auto`: per arch, the real clock where KVM works (the guest then runs
//!   at the host's pace and its clock is the host's), the virtual clock
//!   where the guest would run under TCG (an arm64 guest on an x86_64
//!   host, a host without a working KVM): TCG on the real clock is both
//!   slower and at the mercy of the host's load.

use serde::{Deserialize, Serialize};

/// The largest shift: 2^10 ns an instruction is a 1 MHz guest.
pub const MAX_SHIFT: u8 = 10;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub enum Clock {
    #[default]
    Real,
    Virtual {
        shift: u8,
    },
    /// Resolved per arch at launch: real under KVM, `virtual` under TCG.
    Auto,
}

impl Clock {
    pub fn is_real(&self) -> bool {
        *self == Clock::Real
    }

    /// The clock a guest runs on once its accelerator is known: `auto`
    /// is the real clock under KVM and the virtual clock (shift 0) under
    /// TCG.
    pub fn resolve(&self, accel: crate::Accel) -> Clock {
        match (self, accel) {
            (Clock::Auto, crate::Accel::Kvm) => Clock::Real,
            (Clock::Auto, crate::Accel::Tcg) => Clock::Virtual { shift: 0 },
            (c, _) => *c,
        }
    }

    /// The accel text of a row: `tcg-icount<N>` on the virtual clock (its
    /// series never meet the real clock's `tcg` or `kvm`).
    pub fn accel_text(&self, real: crate::Accel) -> String {
        match self.resolve(real) {
            Clock::Virtual { shift } => lazyinit_core::Accel::Icount(shift).to_string(),
            _ => real.as_str().to_string(),
        }
    }
}

impl std::fmt::Display for Clock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Clock::Real => f.write_str("real"),
            Clock::Virtual { shift: 0 } => f.write_str("virtual"),
            Clock::Virtual { shift } => write!(f, "virtual:{shift}"),
            Clock::Auto => f.write_str("auto"),
        }
    }
}

impl std::str::FromStr for Clock {
    type Err = lazyinit_core::exit::ExitError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || {
            lazyinit_core::exit::bad_input(format!(
                "unknown clock `{s}`: use real, virtual, virtual:N (N, the icount shift, 0 to {MAX_SHIFT}) or auto (real under KVM, virtual under TCG)"
            ))
        };
        match s {
            "real" => Ok(Clock::Real),
            "virtual" => Ok(Clock::Virtual { shift: 0 }),
            "auto" => Ok(Clock::Auto),
            _ => {
                let n = s.strip_prefix("virtual:").ok_or_else(bad)?;
                let shift: u8 = n.parse().map_err(|_| bad())?;
                if shift > MAX_SHIFT {
                    return Err(bad());
                }
                Ok(Clock::Virtual { shift })
            }
        }
    }
}

impl Serialize for Clock {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Clock {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(|e: lazyinit_core::exit::ExitError| {
            serde::de::Error::custom(lazyinit_core::exit::chain_text(&e))
        })
    }
}

/// The ebs target's distance from a step of L = floor(W * z1 * HZ) that
/// the virtual clock refuses: its z1 is the target within a microsecond
/// or two, every run, so a target this close sits on the step.
pub const BOUNDARY_MARGIN: std::time::Duration = std::time::Duration::from_micros(20);

/// When `z1` is within [`BOUNDARY_MARGIN`] of a step of L at this HZ and
/// wait multiplier: the step, in seconds.
pub fn near_step(z1: std::time::Duration, hz: u32, wait_mult: u32) -> Option<f64> {
    let per = 1.0 / (f64::from(wait_mult) * f64::from(hz));
    let z = z1.as_secs_f64();
    let step = (z / per).round() * per;
    ((z - step).abs() < BOUNDARY_MARGIN.as_secs_f64()).then_some(step)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn parses_and_prints() {
        assert_eq!("real".parse::<Clock>().unwrap(), Clock::Real);
        assert_eq!(
            "virtual".parse::<Clock>().unwrap(),
            Clock::Virtual { shift: 0 }
        );
        assert_eq!(
            "virtual:3".parse::<Clock>().unwrap(),
            Clock::Virtual { shift: 3 }
        );
        for bad in [
            "virtual:11",
            "virtual:",
            "virtual:-1",
            "icount",
            "Virtual",
            "virtual:1x",
        ] {
            let e = bad.parse::<Clock>().unwrap_err();
            assert!(
                lazyinit_core::exit::chain_text(&e).contains("use real, virtual"),
                "{bad}"
            );
        }
        for c in [
            Clock::Real,
            Clock::Virtual { shift: 0 },
            Clock::Virtual { shift: 7 },
            Clock::Auto,
        ] {
            assert_eq!(c.to_string().parse::<Clock>().unwrap(), c);
        }
        assert_eq!(
            Clock::Virtual { shift: 0 }.accel_text(crate::Accel::Tcg),
            "tcg-icount0"
        );
        assert_eq!(Clock::Real.accel_text(crate::Accel::Kvm), "kvm");
        // auto: the real clock under KVM, the virtual one under TCG.
        assert_eq!(Clock::Auto.accel_text(crate::Accel::Kvm), "kvm");
        assert_eq!(Clock::Auto.accel_text(crate::Accel::Tcg), "tcg-icount0");
        assert_eq!(Clock::Auto.resolve(crate::Accel::Kvm), Clock::Real);
        assert_eq!(
            Clock::Auto.resolve(crate::Accel::Tcg),
            Clock::Virtual { shift: 0 }
        );
        assert_eq!(
            Clock::Virtual { shift: 2 }.resolve(crate::Accel::Tcg),
            Clock::Virtual { shift: 2 }
        );
    }

    #[test]
    fn steps_of_l_are_found() {
        // HZ=250, W=10: L steps every 0.4 ms.
        let s = near_step(Duration::from_micros(3600), 250, 10).unwrap();
        assert!((s - 0.0036).abs() < 1e-12, "{s}");
        assert!(near_step(Duration::from_micros(3590), 250, 10).is_some());
        assert_eq!(near_step(Duration::from_micros(3400), 250, 10), None);
        // HZ=100: every 1 ms.
        assert_eq!(near_step(Duration::from_micros(3500), 100, 10), None);
        assert!(near_step(Duration::from_micros(2995), 100, 10).is_some());
    }
}

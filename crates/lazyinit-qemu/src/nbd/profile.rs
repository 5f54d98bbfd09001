//! Latency profiles as asked for, and the priors a calibration starts
//! from.

use std::time::Duration;

/// A latency profile as asked for: a fixed hold, or a target for the whole
/// first zeroing (z1), from which the guest's own part is taken off.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LatencyProfile {
    /// `latency:D`: every zero request takes D more.
    Fixed(Duration),
    /// `ebs`: z1 should come to this much. The hold starts at the target
    /// minus a prior for the guest's own part (below) and is calibrated on
    /// the guest before the measured mount.
    Z1Target(Duration),
}

/// A prior for the guest's own part of a first zeroing on this NBD path
/// (the guest's block and ext4 code, virtio, QEMU's NBD client), from the
/// `calibrate-z1` preset on one builder under TCG. Only the starting hold
/// of a calibration: each guest measures its own (hosts differ by 0.2 ms
/// and more, which at HZ=250 is half a tick of L).
pub fn guest_part_prior(arch: lazyinit_core::Arch, accel: crate::Accel) -> Duration {
    use crate::Accel;
    use lazyinit_core::Arch;
    match (arch, accel) {
        (Arch::X86_64, Accel::Tcg) => Duration::from_micros(GUEST_PART_TCG_X86_US),
        (Arch::Arm64, Accel::Tcg) => Duration::from_micros(GUEST_PART_TCG_ARM64_US),
        (_, Accel::Kvm) => Duration::from_micros(50),
    }
}

const GUEST_PART_TCG_X86_US: u64 = 1100;
const GUEST_PART_TCG_ARM64_US: u64 = 1000;

impl LatencyProfile {
    /// The starting hold for a guest of this arch under this accelerator.
    pub fn initial_hold(self, arch: lazyinit_core::Arch, accel: crate::Accel) -> Duration {
        match self {
            LatencyProfile::Fixed(d) => d,
            LatencyProfile::Z1Target(t) => {
                lazyinit_core::storage::hold_for(t, guest_part_prior(arch, accel))
            }
        }
    }
}

pub use lazyinit_core::storage::parse_delay;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nbd::Hold;

    #[test]
    fn ebs_starts_from_the_prior_and_the_hold_can_be_set() {
        use crate::Accel;
        use lazyinit_core::Arch;
        let ebs = LatencyProfile::Z1Target(Duration::from_micros(3400));
        assert_eq!(
            ebs.initial_hold(Arch::X86_64, Accel::Tcg),
            Duration::from_micros(3400 - GUEST_PART_TCG_X86_US)
        );
        assert_eq!(
            ebs.initial_hold(Arch::Arm64, Accel::Tcg),
            Duration::from_micros(3400 - GUEST_PART_TCG_ARM64_US)
        );
        let fixed = LatencyProfile::Fixed(Duration::from_micros(700));
        assert_eq!(
            fixed.initial_hold(Arch::Arm64, Accel::Kvm),
            Duration::from_micros(700)
        );
        // Never zero or negative, whatever the target.
        let tiny = LatencyProfile::Z1Target(Duration::from_micros(10));
        assert_eq!(
            tiny.initial_hold(Arch::X86_64, Accel::Tcg),
            Duration::from_micros(1)
        );
        let h = Hold::new(Duration::from_micros(2300));
        let shared = h.clone();
        shared.set(Duration::from_micros(2412));
        assert_eq!(h.get(), Duration::from_micros(2412));
    }

    #[test]
    fn delays_parse_in_ms_and_us() {
        assert_eq!(parse_delay("2.4ms"), Some(Duration::from_micros(2400)));
        assert_eq!(parse_delay("2400us"), Some(Duration::from_micros(2400)));
        assert_eq!(parse_delay("3ms"), Some(Duration::from_millis(3)));
        for bad in ["3", "0ms", "2s", "-1ms", "1001ms", "x ms", "NaNms"] {
            assert_eq!(parse_delay(bad), None, "{bad}");
        }
    }
}

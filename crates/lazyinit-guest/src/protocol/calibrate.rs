//! The calibration: time the first zeroing of a few lazy-init requests on
//! the scratch disk and set the volume's hold so that the measured first
//! zeroing comes to the target (`ebs`).

use std::time::Duration;

use lazyinit_core::storage::{self, Calibration};
use lazyinit_core::writer::{CalibrationNote, Evidence};

use super::steps::{check, script_with_args};
use super::{ProtocolOptions, CALIBRATE_SH};
use crate::{parse, GuestError, Remote};

/// Mounts of the scratch disk before the measured one: the first
/// [`COLD_MOUNTS`] pay for TCG translating the zeroing code (measured: 5.9,
/// 4.2, then 3.1-3.7 ms at a 2.3 ms hold) and are left out; the smallest
/// of the others gives the guest's own part of a first zeroing (see
/// `storage::guest_part`).
pub const CALIBRATION_MOUNTS: u32 = 6;
pub const COLD_MOUNTS: usize = 2;

/// The marker calibrate.sh writes before each mount.
pub(crate) const CALIBRATION_MARKER: &str = "lazyinit-cal-mount";

/// Times the first zeroing of [`CALIBRATION_MOUNTS`] lazy-init requests on
/// the scratch disk and, with a hold and a target, sets the hold so that
/// the measured first zeroing comes to the target. Keeps every sample
/// (`calibration.csv`) and what was set (`storage.txt`) in `ev`.
pub(super) fn calibrate(
    remote: &mut dyn Remote,
    opts: &ProtocolOptions,
    dev: &str,
    mount_opts: &str,
    ev: &mut Evidence,
) -> Result<Option<Calibration>, GuestError> {
    let hold = opts.hold.as_ref().map(|h| h.get());
    let args = [
        dev.to_string(),
        CALIBRATION_MOUNTS.to_string(),
        mount_opts.to_string(),
    ];
    let out = check(
        remote.exec(
            &script_with_args(CALIBRATE_SH, &args),
            Duration::from_secs(60 * (CALIBRATION_MOUNTS as u64 + 1)),
        )?,
        "calibration",
    )?;
    let zeroings: Vec<Duration> = parse::first_zeroings_after(&out, CALIBRATION_MARKER)
        .into_iter()
        .flatten()
        .map(Duration::from_secs_f64)
        .collect();
    ev.calibration_csv = Some(samples_csv(hold, &zeroings));
    if zeroings.len() < CALIBRATION_MOUNTS as usize {
        return Err(GuestError::Parse {
            step: "calibration",
            what: format!(
                "timed {} of {CALIBRATION_MOUNTS} first zeroings (no journal start traced before a group event?)",
                zeroings.len()
            ),
        });
    }
    let (Some(h), Some(target), Some(handle)) = (hold, opts.z1_target, &opts.hold) else {
        return Ok(None);
    };
    let samples: Vec<(Duration, Duration)> =
        zeroings.iter().skip(COLD_MOUNTS).map(|z| (h, *z)).collect();
    let guest_part = storage::guest_part(&samples).expect("samples checked above");
    let set = storage::hold_for(target, guest_part);
    handle.set(set);
    ev.storage.calibration = Some(CalibrationNote {
        z1_target: target,
        calibration_hold: h,
        guest_part,
        hold: set,
        samples: zeroings,
    });
    Ok(Some(Calibration {
        z1_target: target,
        guest_part,
        hold: set,
    }))
}

/// `calibration.csv`: each mount's hold (when there is one) and first
/// zeroing, microseconds (the zeroing to the nanosecond, as read).
fn samples_csv(hold: Option<Duration>, zeroings: &[Duration]) -> String {
    let hold = hold.map(|h| h.as_micros().to_string()).unwrap_or_default();
    let mut csv = String::from("mount,hold_us,zero_us\n");
    for (i, z) in zeroings.iter().enumerate() {
        let z = z.as_nanos() as f64 / 1000.0;
        csv.push_str(&format!("{},{hold},{z:.3}\n", i + 1));
    }
    csv
}

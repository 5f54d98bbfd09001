//! What the guest protocol keeps beside a cell's row, as data: the guest
//! protocol fills an [`Evidence`], the cell writes it into its folder
//! ([`crate::CellFolder::write_evidence`]) whatever the protocol's outcome.

use std::fmt::Write as _;
use std::time::Duration;

use crate::layout::CellFolder;

/// The protocol's files of one cell, each `None` until it has one.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Evidence {
    /// What the guest said it is (`facts.txt`).
    pub facts: Option<String>,
    /// Each calibration mount's hold and first zeroing (`calibration.csv`).
    pub calibration_csv: Option<String>,
    /// The volume's hold and how it was set (`storage.txt`).
    pub storage: StorageNote,
    /// The raw ftrace buffer (`trace.txt`).
    pub trace: Option<String>,
    /// Per traced group (`groups.csv`).
    pub groups_csv: Option<String>,
    /// Each lock check of an early stop (`estimate.txt`).
    pub estimate_log: Option<String>,
}

impl Evidence {
    /// Each file there is to write, by its name in the cell's folder.
    pub fn files(&self) -> Vec<(crate::layout::FileName, String)> {
        let mut out = Vec::new();
        let mut add = |name, text: &Option<String>| {
            if let Some(t) = text {
                out.push((name, t.clone()));
            }
        };
        add(CellFolder::FACTS_TXT, &self.facts);
        add(CellFolder::CALIBRATION_CSV, &self.calibration_csv);
        add(CellFolder::STORAGE_TXT, &self.storage.render());
        add(CellFolder::TRACE_TXT, &self.trace);
        add(CellFolder::GROUPS_CSV, &self.groups_csv);
        add(CellFolder::ESTIMATE_TXT, &self.estimate_log);
        out
    }
}

/// `storage.txt`: the hold the provider started with, then what the
/// calibration found and set (in place of the start), then each measured
/// mount retried and the hold set for the next one.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StorageNote {
    /// The storage profile and the hold the volume started with (a
    /// provider that holds zero requests).
    pub initial: Option<(String, Duration)>,
    pub calibration: Option<CalibrationNote>,
    pub attempts: Vec<Attempt>,
}

/// What the calibration found and set.
#[derive(Debug, Clone, PartialEq)]
pub struct CalibrationNote {
    pub z1_target: Duration,
    /// The hold the calibration mounts ran at.
    pub calibration_hold: Duration,
    pub guest_part: Duration,
    /// The hold set for the measured mount.
    pub hold: Duration,
    /// Every calibration mount's first zeroing.
    pub samples: Vec<Duration>,
}

/// A measured mount whose first zeroing missed the target's L, and the
/// hold set for the next attempt.
#[derive(Debug, Clone, PartialEq)]
pub struct Attempt {
    /// The attempt that missed (1 = the first measured mount).
    pub n: u32,
    pub z1_us: u64,
    pub guest_part: Duration,
    /// The guest part the next attempt's hold aims at.
    pub aimed_part: Duration,
    pub next_hold: Duration,
}

impl StorageNote {
    /// The file's text; `None` when there is nothing to say (no hold).
    pub fn render(&self) -> Option<String> {
        let mut s = String::new();
        match (&self.calibration, &self.initial) {
            (Some(c), _) => {
                let samples: Vec<String> = c
                    .samples
                    .iter()
                    .map(|z| z.as_micros().to_string())
                    .collect();
                let _ = write!(
                    s,
                    "z1_target_us={}\ncalibration_hold_us={}\nguest_part_us={}\nhold_us={}\nsamples_us={}\n",
                    c.z1_target.as_micros(),
                    c.calibration_hold.as_micros(),
                    c.guest_part.as_micros(),
                    c.hold.as_micros(),
                    samples.join(" ")
                );
            }
            (None, Some((profile, hold))) => {
                let _ = write!(
                    s,
                    "profile={profile}\ninitial_hold_us={}\n",
                    hold.as_micros()
                );
            }
            // Retries set a hold only where the provider has one.
            (None, None) => return None,
        }
        for a in &self.attempts {
            let (n, next) = (a.n, a.n + 1);
            let _ = write!(
                s,
                "attempt_{n}_z1_us={}\nattempt_{n}_guest_part_us={}\nattempt_{next}_aimed_part_us={}\nattempt_{next}_hold_us={}\n",
                a.z1_us,
                a.guest_part.as_micros(),
                a.aimed_part.as_micros(),
                a.next_hold.as_micros()
            );
        }
        Some(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn us(n: u64) -> Duration {
        Duration::from_micros(n)
    }

    #[test]
    fn storage_txt_as_the_provider_and_the_calibration_wrote_it() {
        let mut n = StorageNote::default();
        assert_eq!(n.render(), None, "no hold, no file");
        n.initial = Some(("ebs".into(), us(2300)));
        assert_eq!(n.render().unwrap(), "profile=ebs\ninitial_hold_us=2300\n");
        n.calibration = Some(CalibrationNote {
            z1_target: us(3500),
            calibration_hold: us(2300),
            guest_part: us(1100),
            hold: us(2400),
            samples: vec![us(5900), us(3300)],
        });
        n.attempts.push(Attempt {
            n: 1,
            z1_us: 3620,
            guest_part: us(1220),
            aimed_part: us(1160),
            next_hold: us(2340),
        });
        assert_eq!(
            n.render().unwrap(),
            "z1_target_us=3500\ncalibration_hold_us=2300\nguest_part_us=1100\nhold_us=2400\nsamples_us=5900 3300\n\
             attempt_1_z1_us=3620\nattempt_1_guest_part_us=1220\nattempt_2_aimed_part_us=1160\nattempt_2_hold_us=2340\n"
        );
    }

    #[test]
    fn files_are_named_by_the_layout() {
        let ev = Evidence {
            trace: Some("t".into()),
            estimate_log: Some("e".into()),
            ..Default::default()
        };
        let names: Vec<_> = ev.files().into_iter().map(|f| f.0).collect();
        assert_eq!(names, [CellFolder::TRACE_TXT, CellFolder::ESTIMATE_TXT]);
    }
}

//! What a set of cells costs on EC2, for `plan`: instance-hours and
//! volume GB-hours from predicted durations, priced from the config, and
//! the API calls a run makes.

use std::time::Duration;

use lazyinit_core::Cell;
use serde::Serialize;

use crate::config::Ec2Config;
use crate::error::Ec2Error;
use crate::provider::volume_gib;

/// Hours in the month EBS prices are quoted for (AWS uses 730).
const HOURS_PER_MONTH: f64 = 730.0;
const GP3_FREE_IOPS: i32 = 3000;
const GP3_FREE_THROUGHPUT: i32 = 125;

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CostEstimate {
    pub instance_hours: f64,
    pub volume_gb_hours: f64,
    pub usd: f64,
}

/// API calls per cell when no wait needs a second poll: RunInstances,
/// CreateVolume, AttachVolume, ModifyInstanceAttribute and one poll each
/// for running, available and attached; at teardown GetConsoleOutput,
/// TerminateInstances and one poll each for the instance and the volume
/// being gone.
pub const CALLS_PER_CELL: u64 = 11;
/// DescribeInstanceTypes and DescribeImages, per arch (preflight).
pub const CALLS_PER_ARCH: u64 = 2;

/// The API calls a run of `cells` makes at least; each poll-interval of
/// waiting for a state adds one.
pub fn api_calls(cells: &[Cell]) -> u64 {
    let mut arches: Vec<_> = cells.iter().map(|c| c.arch).collect();
    arches.sort();
    arches.dedup();
    cells.len() as u64 * CALLS_PER_CELL + arches.len() as u64 * CALLS_PER_ARCH
}

/// Each cell holds one instance and one volume of its size for its
/// predicted lazyinit time plus `cell-overhead`. Per-second billing is
/// assumed (Linux on-demand; the 60 s minimum never binds here).
pub fn estimate(
    cells: &[Cell],
    lazyinit: &[Duration],
    cfg: &Ec2Config,
) -> Result<CostEstimate, Ec2Error> {
    if cells.len() != lazyinit.len() {
        return Err(Ec2Error::BadInput(format!(
            "{} cells but {} durations",
            cells.len(),
            lazyinit.len()
        )));
    }
    let p = &cfg.prices;
    let vol_type = cfg.volume.volume_type.as_str();
    let gb_month = *p.volume_gb_month.get(vol_type).ok_or_else(|| {
        Ec2Error::BadInput(format!(
            "no price for volume type {vol_type}: add prices.volume-gb-month.{vol_type}"
        ))
    })?;
    // gp3 charges provisioned IOPS and throughput above the baseline per volume-month.
    let extras_month = if vol_type == "gp3" {
        let iops = (cfg.volume.iops.unwrap_or(GP3_FREE_IOPS) - GP3_FREE_IOPS).max(0) as f64;
        let tput = (cfg.volume.throughput.unwrap_or(GP3_FREE_THROUGHPUT) - GP3_FREE_THROUGHPUT)
            .max(0) as f64;
        iops * p.gp3_iops_month + tput * p.gp3_throughput_month
    } else {
        0.0
    };
    let mut est = CostEstimate {
        instance_hours: 0.0,
        volume_gb_hours: 0.0,
        usd: 0.0,
    };
    for (cell, d) in cells.iter().zip(lazyinit) {
        let ty = cfg.instance_types.get(cell.arch);
        let hourly = *p.instance_hour.get(ty).ok_or_else(|| {
            Ec2Error::BadInput(format!(
                "no price for instance type {ty}: add prices.instance-hour.\"{ty}\""
            ))
        })?;
        let hours = (*d + cfg.cell_overhead).as_secs_f64() / 3600.0;
        let gb_hours = volume_gib(cell.volume) as f64 * hours;
        est.instance_hours += hours;
        est.volume_gb_hours += gb_hours;
        est.usd += hours * hourly
            + gb_hours * gb_month / HOURS_PER_MONTH
            + hours * extras_month / HOURS_PER_MONTH;
    }
    Ok(est)
}

#[cfg(test)]
mod tests {
    use super::*;
    use lazyinit_core::model;
    use lazyinit_core::{Arch, Hz, KernelSource, Variant};

    /// The model's lazyinit duration for a cell (default zeroing time,
    /// mean start delay).
    fn predicted_lazyinit(cell: &Cell) -> Duration {
        let p = model::predict_cell(&cell.axes);
        Duration::from_secs_f64(p.lazyinit_s + model::MEAN_START_DELAY_S)
    }

    /// The eight cells of the 2021 report: arm64 (c6g, HZ=100) and x86_64
    /// (c5, HZ=250), with and without the fix, 2 TiB and 3 TiB.
    pub(crate) fn reported_matrix() -> Vec<Cell> {
        let mut cells = Vec::new();
        for (arch, hz) in [(Arch::Arm64, 100), (Arch::X86_64, 250)] {
            for variant in Variant::ALL {
                for size in ["2TiB", "3TiB"] {
                    cells.push(Cell {
                        provider: "ec2".into(),
                        axes: lazyinit_core::Axes::new(
                            arch,
                            KernelSource::Debian61,
                            Hz::new(hz).unwrap(),
                            variant,
                            size.parse().unwrap(),
                        ),
                        repetition: 1,
                    });
                }
            }
        }
        cells
    }

    #[test]
    fn api_calls_of_the_reported_matrix() {
        // 8 cells on 2 arches.
        assert_eq!(api_calls(&reported_matrix()), 8 * 11 + 2 * 2);
        assert_eq!(api_calls(&[]), 0);
    }

    #[test]
    fn one_cell_by_hand() {
        let cfg = Ec2Config::default();
        let cell = reported_matrix().remove(0); // arm64 nofix 2 TiB
        let est = estimate(&[cell], &[Duration::from_secs(3300)], &cfg).unwrap();
        // 3300 s + 300 s overhead = 1 h on c6g.2xlarge with 2048 GiB gp3.
        assert!((est.instance_hours - 1.0).abs() < 1e-12);
        assert!((est.volume_gb_hours - 2048.0).abs() < 1e-9);
        let usd = 0.272 + 2048.0 * 0.08 / 730.0;
        assert!((est.usd - usd).abs() < 1e-12, "{}", est.usd);
    }

    #[test]
    fn provisioned_gp3_extras_and_missing_prices() {
        let mut cfg = Ec2Config::default();
        let cell = reported_matrix().remove(0);
        let base = estimate(
            std::slice::from_ref(&cell),
            &[Duration::from_secs(3300)],
            &cfg,
        )
        .unwrap();
        cfg.volume.iops = Some(4000);
        cfg.volume.throughput = Some(225);
        let more = estimate(
            std::slice::from_ref(&cell),
            &[Duration::from_secs(3300)],
            &cfg,
        )
        .unwrap();
        let extra = (1000.0 * 0.005 + 100.0 * 0.04) / 730.0;
        assert!((more.usd - base.usd - extra).abs() < 1e-12);

        cfg.instance_types.arm64 = "c7g.2xlarge".into();
        let e = estimate(std::slice::from_ref(&cell), &[Duration::ZERO], &cfg).unwrap_err();
        assert!(
            e.to_string()
                .contains("prices.instance-hour.\"c7g.2xlarge\""),
            "{e}"
        );
        assert!(estimate(&[cell], &[], &cfg).is_err());
    }

    /// The figure `plan` quotes for the full reported matrix with default
    /// prices and overhead. Computed from the model, not typed in: the
    /// assertions check it against the hand sum of the same model terms.
    #[test]
    fn full_reported_matrix() {
        let cfg = Ec2Config::default();
        let cells = reported_matrix();
        let d: Vec<Duration> = cells.iter().map(predicted_lazyinit).collect();
        let est = estimate(&cells, &d, &cfg).unwrap();
        let secs: f64 = d.iter().map(Duration::as_secs_f64).sum::<f64>() + 8.0 * 300.0;
        assert!((est.instance_hours - secs / 3600.0).abs() < 1e-9);
        // The model's durations stay within 5% of the report's own total,
        // so the estimate is about what the real runs will take.
        let reported: f64 = lazyinit_core::reported::REPORTED_2021
            .iter()
            .map(|c| c.seconds)
            .sum();
        let predicted: f64 = d.iter().map(Duration::as_secs_f64).sum();
        assert!(
            (predicted / reported - 1.0).abs() < 0.05,
            "{predicted} vs {reported}"
        );
        // Priced by hand from the same hours: arm64 cells at c6g, x86 at c5.
        let by_hand: f64 = cells
            .iter()
            .zip(&d)
            .map(|(c, d)| {
                let h = (d.as_secs_f64() + 300.0) / 3600.0;
                let rate = if c.arch == lazyinit_core::Arch::Arm64 {
                    0.272
                } else {
                    0.34
                };
                h * rate + volume_gib(c.volume) as f64 * h * 0.08 / 730.0
            })
            .sum();
        assert!((est.usd - by_hand).abs() < 1e-9);
        println!(
            "full reported matrix: {:.2} instance-hours, {:.0} GB-hours, ${:.2}",
            est.instance_hours, est.volume_gb_hours, est.usd
        );
        for (c, d) in cells.iter().zip(&d) {
            println!("  {} {:.0} s", c.id(), d.as_secs_f64());
        }
    }
}

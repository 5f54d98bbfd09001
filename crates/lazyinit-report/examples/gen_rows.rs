//! Writes N synthetic result rows (default 10,000) for timing `report`:
//!
//!     cargo run --release -p lazyinit-report --example gen_rows -- 10000 /tmp/rows.csv
//!     time lazyinit-bench report /tmp/rows.csv > /dev/null
//!     time lazyinit-bench report --format kcidb /tmp/rows.csv > /dev/null
//!
//! Rows follow the model (docs/design.md §2) with noise, over a matrix of providers,
//! arches, HZ, variants and volumes; about 3% of runs fail. Deterministic.

use lazyinit_core::model;
use lazyinit_core::results::{Measurement, ResultRow, Status, COLUMNS};
use lazyinit_core::{Arch, ByteSize, Hz, Variant};

/// xorshift64*: enough randomness for noise, no dependency.
struct Rng(u64);
impl Rng {
    fn unit(&mut self) -> f64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 11) as f64 / (1u64 << 53) as f64
    }
}

fn main() {
    let mut args = std::env::args().skip(1);
    let n: usize = args
        .next()
        .map(|s| s.parse().expect("N is a number"))
        .unwrap_or(10_000);
    let out = args.next().unwrap_or_else(|| "rows.csv".into());
    let envs = [("qemu", "tcg"), ("qemu", "kvm"), ("ec2", "hardware")];
    let volumes: [ByteSize; 3] = [
        "64GiB".parse().unwrap(),
        "2TiB".parse().unwrap(),
        "3TiB".parse().unwrap(),
    ];
    let mut cells = Vec::new();
    for (provider, accel) in envs {
        for arch in Arch::ALL {
            for hz in [100, 250, 1000] {
                for variant in Variant::ALL {
                    for vol in volumes {
                        cells.push((provider, accel, arch, Hz::new(hz).unwrap(), variant, vol));
                    }
                }
            }
        }
    }
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut w = lazyinit_core::results::csv_writer(std::io::BufWriter::new(
        std::fs::File::create(&out).expect("cannot create the output file"),
    ))
    .expect("writing the header");
    for i in 0..n {
        let (provider, accel, arch, hz, variant, vol) = cells[i % cells.len()];
        let rep = (i / cells.len()) as u32 + 1;
        let machine = match (provider, arch) {
            ("ec2", Arch::X86_64) => "c5.2xlarge".to_string(),
            ("ec2", Arch::Arm64) => "c6g.2xlarge".to_string(),
            _ => format!("qemu-{}", arch.uname_machine()),
        };
        let z1 = 0.002 + 0.003 * rng.unit();
        let groups = model::groups(vol);
        let p = model::predict(model::ModelInputs {
            hz,
            variant,
            wait_mult: 10,
            groups,
            z1_s: z1,
            z_s: 0.001,
        });
        let noise = 1.0 + 0.02 * (rng.unit() - 0.5);
        let failed = rng.unit() < 0.03;
        let lazy = p.lazyinit_s * noise + 5.0 * rng.unit();
        let cell_id = format!("{provider}-{arch}-debian-6.1-hz{hz}-{variant}-{vol}-r{rep}");
        let row = ResultRow {
            run_id: format!("bench-{}", rep),
            cell_id,
            testbed: lazyinit_core::Testbed {
                provider: provider.into(),
                machine: machine.into(),
                accel: accel.into(),
                storage: "none".into(),
            },
            axes: lazyinit_core::Axes::new(arch, "debian-6.1".into(), hz, variant, vol),
            kernel_profile: None,
            kernel_tree: String::new(),
            kernel_release: format!("6.1.158-lazyinit-hz{hz}-{variant}"),
            repetition: rep,
            started_at: format!(
                "2026-11-29T{:02}:{:02}:{:02}Z",
                (i / 3600) % 24,
                (i / 60) % 60,
                i % 60
            ),
            harness_version: lazyinit_core::HARNESS_VERSION.into(),
            harness_commit: lazyinit_core::harness_commit().into(),
            status: if failed { Status::Failed } else { Status::Ok },
            error: if failed {
                "guest did not answer SSH within 120 s".into()
            } else {
                String::new()
            },
            boot_s: Some(1.1),
            concurrency: 4,
            estimate_after: None,
            shard: String::new(),
            host: String::new(),
            measured: Measurement {
                groups: Some(groups),
                mkfs_s: Some(1.0 + rng.unit()),
                mount_s: Some(0.04),
                lazyinit_s: (!failed).then_some(lazy),
                lazyinit_poll_s: (!failed).then_some(lazy + 0.5),
                ms_per_group: (!failed).then_some(p.per_group_s * 1000.0 * noise),
                traced_groups: (!failed).then_some(groups),
                clocksource: "tsc".into(),
                sleep_ticks: (!failed).then_some(p.sleep_ticks),
                first_group_s: Some(2.5),
                mkfs_cmd: "mkfs.ext4 -F /dev/vda".into(),
                z1_ms: None,
                z1_target_ms: None,
                guest_part_ms: None,
                zero_hold_ms: None,
                zero_median_ms: None,
                z1_attempts: None,
                estimated: false,
                estimate_groups: None,
                estimate_cycle_ms: None,
                lazyinit_lo_s: None,
                lazyinit_hi_s: None,
                crossed_ticks: None,
                estimate_caveat: None,
                profile_held: None,
                z1_lo_ms: None,
                z1_hi_ms: None,
            },
        };
        w.serialize(&row).expect("writing a row");
    }
    w.flush().expect("flushing");
    eprintln!(
        "wrote {n} rows ({} cells, {} columns) to {out}",
        cells.len().min(n),
        COLUMNS.len()
    );
}

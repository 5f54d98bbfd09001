//! From a spec to the matrix of cells, what must be built, and what the run
//! will cost in time and, as the provider prices it, in host memory and
//! disk or money. Pure: `plan` launches nothing.

use std::collections::BTreeSet;
use std::time::Duration;

use lazyinit_core::model::{self, Prediction};
use lazyinit_core::provider::{CellEstimate, Cost, Provider, ProviderError};
use lazyinit_core::{
    Arch, Axes, Cell, Hz, KernelId, KernelProfile, KernelSource, StorageProfile, Variant,
};
use serde::Serialize;

use crate::spec::{Concurrency, ProviderConfigs, Spec};

/// Boot, SSH, mkfs and teardown around lazy-init, per cell, under TCG.
pub const OVERHEAD_S: f64 = 30.0;
/// Host memory kept free of guests for everything else.
pub const HOST_RESERVE_MIB: u64 = 2048;

/// A kernel the plan builds: the identity's [`KernelId`] (a cell's axes
/// and the provider's profile, `cell.kernel(profile)`).
pub type KernelNeed = KernelId;

/// The plan's kernels as its JSON has always listed them: the profile is
/// the plan's own (`kernel_profile`), so each kernel's is left out.
fn kernels_without_profile<S: serde::Serializer>(
    kernels: &[KernelNeed],
    s: S,
) -> Result<S::Ok, S::Error> {
    #[derive(Serialize)]
    struct Listed<'a> {
        arch: Arch,
        source: &'a KernelSource,
        hz: Hz,
        variant: Variant,
    }
    s.collect_seq(kernels.iter().map(|k| Listed {
        arch: k.arch,
        source: &k.source,
        hz: k.hz,
        variant: k.variant,
    }))
}

#[derive(Debug, Clone, Serialize)]
pub struct PlannedCell {
    pub cell: Cell,
    pub id: String,
    pub groups: u64,
    pub predicted: Prediction,
    /// The model's lazy-init plus the mean start delay: what a provider
    /// prices a cell by, adding its own overhead.
    #[serde(skip)]
    pub lazyinit: Duration,
    /// Lazy-init plus mean start delay plus overhead.
    pub predicted_wall_s: f64,
    pub reported_s: Option<f64>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Plan {
    pub run_id: String,
    pub provider: String,
    pub cells: Vec<PlannedCell>,
    #[serde(serialize_with = "kernels_without_profile")]
    pub kernels: Vec<KernelNeed>,
    /// The configuration the provider's machines boot.
    pub kernel_profile: KernelProfile,
    /// What a zeroing costs on the volumes (part of what a run costs).
    pub storage_profile: StorageProfile,
    pub arches: Vec<Arch>,
    pub concurrency: usize,
    /// Slowest cell alone (the floor for the whole run).
    pub slowest_cell_s: f64,
    /// Sum of all cells (one after another).
    pub serial_s: f64,
    /// Estimate with `concurrency` cells at once (longest first).
    pub parallel_s: f64,
    /// What the run costs, as the provider prices it ([`Plan::priced`]).
    #[serde(flatten)]
    pub cost: Option<Cost>,
    /// Cells stop early, estimating the rest (`estimate-after`).
    pub estimate_after: Option<u64>,
    /// The shard of the whole plan this is (`run --shard`), if one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shard: Option<crate::shard::Shard>,
    /// What the kernels not yet cached take to build, CPU and disk
    /// ([`Plan::with_builds`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kernel_builds: Option<lazyinit_kernel::budget::BuildCost>,
}

pub fn cells<C: ProviderConfigs>(spec: &Spec<C>) -> Vec<Cell> {
    let mut out = Vec::new();
    // Checked when the spec was read (`Spec::validate`): every
    // combination of the knobs' values, the defaults where none is set.
    let knob_sets = spec
        .knobs
        .resolve()
        .unwrap_or_else(|_| vec![Default::default()]);
    for &arch in &spec.arches {
        for source in &spec.sources {
            for hz in spec.hz.for_arch(arch) {
                for &variant in &spec.variants {
                    for &volume in &spec.sizes {
                        for knobs in &knob_sets {
                            for repetition in 1..=spec.repetitions {
                                out.push(Cell {
                                    provider: spec.provider.as_str().into(),
                                    axes: Axes {
                                        arch,
                                        source: source.clone(),
                                        hz,
                                        variant,
                                        volume,
                                        wait_mult: spec.wait_mult,
                                        knobs: knobs.clone(),
                                    },
                                    repetition,
                                });
                            }
                        }
                    }
                }
            }
        }
    }
    out
}

/// Cells that can run at once: for guests on this host, as many as its
/// memory holds (guests mostly sleep, so CPU is not the limit); for
/// machines elsewhere (`None`), all. Never more than there are cells.
pub fn auto_concurrency(
    n_cells: usize,
    host_mib_per_machine: Option<u64>,
    host_available_mib: u64,
) -> usize {
    let fit = match host_mib_per_machine {
        Some(per) => (host_available_mib.saturating_sub(HOST_RESERVE_MIB) / per.max(1)) as usize,
        None => n_cells,
    };
    fit.clamp(1, n_cells.max(1))
}

/// Longest-processing-time-first schedule length on `slots` machines.
pub fn makespan(mut durations: Vec<f64>, slots: usize) -> f64 {
    durations.sort_by(|a, b| b.total_cmp(a));
    let mut load = vec![0.0f64; slots.max(1)];
    for d in durations {
        let i = (0..load.len())
            .min_by(|&a, &b| load[a].total_cmp(&load[b]))
            .unwrap_or(0);
        load[i] += d;
    }
    load.into_iter().fold(0.0, f64::max)
}

/// The host's cores, which CPU-bound guests share.
pub fn host_cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

pub fn host_available_mib() -> u64 {
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            m.lines()
                .find(|l| l.starts_with("MemAvailable:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<u64>().ok())
        })
        .map(|kb| kb / 1024)
        .unwrap_or(4096)
}

/// Lazy-init the cell waits for: every group, or with `estimate-after`
/// the groups before the first check (a cycle that locks later costs more).
fn traced_s<C: ProviderConfigs>(p: &Prediction, groups: u64, spec: &Spec<C>) -> f64 {
    match spec.estimate_after {
        Some(n) if n < groups => n as f64 * p.per_group_s,
        _ => p.lazyinit_s,
    }
}

/// The cells of `spec` with what the model predicts of each: what any
/// provider runs (the split into shards needs no more).
pub fn planned_cells<C: ProviderConfigs>(spec: &Spec<C>) -> Vec<PlannedCell> {
    cells(spec)
        .into_iter()
        .map(|cell| {
            let predicted = model::predict_cell(&cell.axes);
            let reported_s =
                lazyinit_core::reported::lookup(cell.arch, cell.hz, cell.variant, cell.volume.0)
                    .map(|r| r.seconds);
            let lazyinit = predicted.lazyinit_s + model::MEAN_START_DELAY_S;
            PlannedCell {
                id: cell.id(),
                groups: model::groups(cell.volume),
                lazyinit: Duration::from_secs_f64(lazyinit),
                predicted_wall_s: traced_s(&predicted, model::groups(cell.volume), spec)
                    + model::MEAN_START_DELAY_S
                    + OVERHEAD_S,
                predicted,
                reported_s,
                cell,
            }
        })
        .collect()
}

impl Plan {
    /// What `provider` refuses of this plan from the spec alone
    /// ([`Provider::refuse`]: every cell of it, done or not, so a resume
    /// refuses what a fresh run does). `plan` and `run` both ask it.
    pub fn refused_by(&self, provider: &dyn Provider) -> Result<(), crate::RunError> {
        let cells: Vec<Cell> = self.cells.iter().map(|p| p.cell.clone()).collect();
        provider
            .refuse(&cells, &self.storage_profile)
            .map_err(|source| crate::RunError::Refused {
                provider: provider.name().to_string(),
                source,
            })
    }
}

/// The plan of `spec` on `provider`, unpriced.
pub fn plan<C: ProviderConfigs>(
    spec: &Spec<C>,
    provider: &dyn Provider,
    host_available_mib: u64,
) -> Plan {
    let mut planned = planned_cells(spec);
    // Guests that do not sleep in real time (the virtual clock) cost the
    // host CPU instead: their time is the provider's, and cells beyond
    // the host's cores share them.
    let mut cpu_bound = false;
    for p in &mut planned {
        if let Some(s) = provider.host_seconds(&p.cell, p.groups) {
            p.predicted_wall_s = s;
            cpu_bound = true;
        }
    }
    let profile = provider.kernel_profile();
    let kernels: BTreeSet<KernelNeed> = planned.iter().map(|p| p.cell.kernel(profile)).collect();
    let arches: BTreeSet<Arch> = planned.iter().map(|p| p.cell.arch).collect();
    let concurrency = match spec.concurrency {
        Concurrency::Fixed(n) => (n as usize).min(planned.len().max(1)),
        Concurrency::Named(_) => auto_concurrency(
            planned.len(),
            provider.host_mib_per_machine(),
            host_available_mib,
        ),
    };
    let durations: Vec<f64> = planned.iter().map(|p| p.predicted_wall_s).collect();
    Plan {
        run_id: spec.run_id(),
        provider: provider.name().to_string(),
        kernel_profile: profile,
        storage_profile: spec.storage_profile,
        slowest_cell_s: durations.iter().cloned().fold(0.0, f64::max),
        serial_s: durations.iter().sum(),
        parallel_s: match cpu_bound {
            true => makespan(durations.clone(), concurrency)
                .max(durations.iter().sum::<f64>() / host_cores().min(concurrency.max(1)) as f64),
            false => makespan(durations, concurrency),
        },
        cost: None,
        cells: planned,
        estimate_after: spec.estimate_after,
        kernels: kernels.into_iter().collect(),
        arches: arches.into_iter().collect(),
        concurrency,
        shard: None,
        kernel_builds: None,
    }
}

impl Plan {
    /// The plan with what its kernels take to build into `cache_dir`
    /// (the minimal config's trees; a `--kernel-config` base costs more).
    pub fn with_builds(
        mut self,
        cache_dir: &std::path::Path,
        budget: lazyinit_core::ByteSize,
    ) -> Plan {
        let specs: Vec<lazyinit_kernel::KernelSpec> = self
            .kernels
            .iter()
            .cloned()
            .map(lazyinit_kernel::KernelSpec::of)
            .collect();
        self.kernel_builds = Some(lazyinit_kernel::budget::estimate(&specs, cache_dir, budget));
        self
    }

    /// The plan with what `provider` says it costs.
    pub fn priced(mut self, provider: &dyn Provider) -> Result<Plan, ProviderError> {
        let cells: Vec<CellEstimate<'_>> = self
            .cells
            .iter()
            .map(|c| CellEstimate {
                cell: &c.cell,
                lazyinit: c.lazyinit,
            })
            .collect();
        let cost = provider.cost(&cells, &self.storage_profile, self.concurrency)?;
        self.cost = Some(cost);
        Ok(self)
    }
}

pub(crate) fn hms(s: f64) -> String {
    let s = s.round() as u64;
    if s >= 3600 {
        format!("{}h{:02}m", s / 3600, (s % 3600) / 60)
    } else if s >= 60 {
        format!("{}m{:02}s", s / 60, s % 60)
    } else {
        format!("{s}s")
    }
}

/// The plan as text for a terminal.
pub fn render(p: &Plan) -> String {
    let shard = match p.shard {
        Some(k) => format!(", shard {k}"),
        None => String::new(),
    };
    let mut s = format!(
        "run {}{shard} — {} cells, {} at once\n\n",
        p.run_id,
        p.cells.len(),
        p.concurrency
    );
    s.push_str("| cell | groups | model L (ticks) | model lazyinit | reported |\n|---|---:|---:|---:|---:|\n");
    for c in &p.cells {
        s.push_str(&format!(
            "| {} | {} | {} | {} | {} |\n",
            c.id,
            c.groups,
            c.predicted.sleep_ticks,
            hms(c.predicted.lazyinit_s),
            c.reported_s.map(hms).unwrap_or_else(|| "-".into())
        ));
    }
    s.push_str("\nkernels to have (built unless cached):\n");
    for k in &p.kernels {
        s.push_str(&format!(
            "  {} {} HZ={} {}\n",
            k.arch, k.source, k.hz, k.variant
        ));
    }
    if let Some(b) = &p.kernel_builds {
        s.push_str(&format!("{}\n", b.render(host_cores())));
    }
    if let Some(n) = p.estimate_after {
        s.push_str(&format!(
            "\nestimate-after {n}: each cell stops once its cycle has locked, from {n} groups on, and records a predicted lazyinit_s (README, \"Estimates\"); the model column is a full run\n"
        ));
    }
    s.push_str(&format!(
        "\nestimated wall time: {} (slowest cell alone {}, all cells one after another {})\n",
        hms(p.parallel_s),
        hms(p.slowest_cell_s),
        hms(p.serial_s)
    ));
    if let Some(cost) = &p.cost {
        s.push_str(&cost.render(&p.provider, p.concurrency));
        s.push('\n');
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fake::Lab;
    use crate::spec::{preset, RawSpec};

    fn lab() -> Lab {
        Lab::new(std::env::temp_dir().join("lazyinit-plan-tests-unused"))
    }

    #[test]
    fn quick_preset_is_four_cells() {
        let spec = RawSpec::parse(preset("quick").unwrap(), "quick").unwrap();
        let p = plan(&spec, &lab().provider(), 20_000);
        assert_eq!(p.cells.len(), 4);
        assert_eq!(p.kernels.len(), 4);
        assert_eq!(p.concurrency, 4);
        assert!(p.parallel_s < p.serial_s);
        assert!((p.parallel_s - p.slowest_cell_s).abs() < 1e-9);
    }

    #[test]
    fn estimates_stop_cells_after_their_first_groups() {
        let full = RawSpec::parse(preset("reported").unwrap(), "reported").unwrap();
        let mut early = full.clone();
        early.estimate_after = Some(50);
        let local = lab().provider();
        let (a, b) = (plan(&full, &local, 20_000), plan(&early, &local, 20_000));
        assert_eq!(a.cells.len(), b.cells.len());
        assert!(a.slowest_cell_s > 2500.0, "{}", a.slowest_cell_s);
        // 50 groups of at most 110 ms, plus the start delay and overhead.
        assert!(b.slowest_cell_s < 60.0, "{}", b.slowest_cell_s);
        assert!(render(&b).contains("estimate-after 50: "));
        assert!(!render(&a).contains("estimate-after"));
    }

    /// A provider whose guests cost the host CPU rather than time (the
    /// virtual clock): its seconds replace the model's wall, and cells
    /// beyond the host's cores share them.
    #[test]
    fn cpu_bound_guests_are_planned_by_the_providers_seconds() {
        struct Virtual(crate::fake::FakeProvider);
        #[async_trait::async_trait]
        impl Provider for Virtual {
            fn name(&self) -> &str {
                "virtual"
            }
            fn kernel_profile(&self) -> KernelProfile {
                self.0.kernel_profile()
            }
            fn host_mib_per_machine(&self) -> Option<u64> {
                Some(100)
            }
            fn cost(
                &self,
                c: &[CellEstimate<'_>],
                s: &lazyinit_core::StorageProfile,
                n: usize,
            ) -> Result<Cost, ProviderError> {
                self.0.cost(c, s, n)
            }
            async fn preflight(
                &self,
                c: &[Cell],
                s: &lazyinit_core::StorageProfile,
            ) -> Result<(), ProviderError> {
                self.0.preflight(c, s).await
            }
            async fn launch(
                &self,
                r: &lazyinit_core::provider::LaunchRequest,
            ) -> Result<Box<dyn lazyinit_core::provider::Machine>, ProviderError> {
                self.0.launch(r).await
            }
            fn host_seconds(&self, _: &Cell, groups: u64) -> Option<f64> {
                Some(10.0 + groups as f64 * 0.001)
            }
        }
        let full = RawSpec::parse(preset("reported").unwrap(), "reported").unwrap();
        let p = plan(&full, &Virtual(lab().provider()), 20_000);
        // 3 TiB: 24,576 groups.
        assert!(
            (p.slowest_cell_s - 34.576).abs() < 1e-9,
            "{}",
            p.slowest_cell_s
        );
        let serial = 4.0 * (10.0 + 16.384) + 4.0 * 34.576;
        assert!((p.serial_s - serial).abs() < 1e-9, "{}", p.serial_s);
        let cores = host_cores().min(p.concurrency) as f64;
        assert!(p.parallel_s >= serial / cores - 1e-9, "{}", p.parallel_s);
        assert!(p.parallel_s >= p.slowest_cell_s);
    }

    #[test]
    fn reported_preset_matches_report_cells() {
        let spec = RawSpec::parse(preset("reported").unwrap(), "reported").unwrap();
        let p = plan(&spec, &lab().provider(), 20_000);
        assert_eq!(p.cells.len(), 8);
        assert!(p.cells.iter().all(|c| c.reported_s.is_some()));
        let arm_nofix_2t = p
            .cells
            .iter()
            .find(|c| c.id.contains("arm64") && c.id.contains("nofix-2TiB"))
            .unwrap();
        assert_eq!(arm_nofix_2t.groups, 16384);
    }

    /// What the provider says is what the plan shows: its kernel profile,
    /// and host memory and disk for local guests, money for machines
    /// elsewhere.
    #[test]
    fn the_provider_prices_the_plan() {
        let q = RawSpec::parse(preset("quick").unwrap(), "quick").unwrap();
        let local = lab().provider();
        let p = plan(&q, &local, 20_000).priced(&local).unwrap();
        assert_eq!(p.kernel_profile, KernelProfile::Qemu);
        let text = render(&p);
        assert!(
            text.ends_with(
                "host memory: ~3248 MiB for 4 guests; host disk: ~0.3 GiB of sparse volumes\n"
            ),
            "{text}"
        );
        let json = serde_json::to_value(&p).unwrap();
        assert_eq!(json["memory_mib"], 3248);

        let cloud = lab().kexec_provider();
        let p = plan(&q, &cloud, 20_000).priced(&cloud).unwrap();
        assert_eq!(p.kernel_profile, KernelProfile::Cloud);
        let text = render(&p);
        assert!(!text.contains("host memory"), "{text}");
        assert!(text.contains("fake: "), "{text}");
        // Unpriced, the plan says nothing of cost.
        assert!(!render(&plan(&q, &cloud, 20_000)).contains("fake: "));
    }

    #[test]
    fn concurrency_bounded_by_memory_and_cells() {
        assert_eq!(auto_concurrency(8, Some(812), 3000), 1);
        assert_eq!(auto_concurrency(8, Some(812), 24_000), 8);
        assert_eq!(auto_concurrency(100, Some(812), 24_000), 27);
        // Machines elsewhere take nothing from this host.
        assert_eq!(auto_concurrency(100, None, 3000), 100);
    }

    #[test]
    fn makespan_lpt() {
        assert_eq!(makespan(vec![4.0, 3.0, 3.0, 2.0], 2), 6.0);
        assert_eq!(makespan(vec![5.0, 1.0], 4), 5.0);
    }

    #[test]
    fn cell_ids_are_unique() {
        let spec = RawSpec::parse(preset("reported").unwrap(), "r").unwrap();
        let ids: BTreeSet<String> = cells(&spec).iter().map(|c| c.id()).collect();
        assert_eq!(ids.len(), 8);
    }
}

//! Synthetic lazy-init traces from the model (docs/design.md §2), for tests of
//! the estimator, the guest protocol's early stop and `replay`: a thread
//! that wakes on a tick, zeroes, and sleeps L ticks from that tick, with
//! optional noise (late wakeups, extra ticks), a back-to-back start,
//! stalls and a drift of the extra-tick rate. Deterministic per seed.

/// What to generate. Times are from the end of the mount.
#[derive(Debug, Clone, PartialEq)]
pub struct Run {
    pub hz: u32,
    /// The sleep L between groups, ticks.
    pub sleep_ticks: u64,
    /// Groups to zero (G).
    pub groups: u64,
    /// Mount done to the thread's first wake (start delay and prefetch).
    pub start_s: f64,
    /// Each zeroing, ms (under a tick for the cycle to be L + 1 ticks).
    pub zero_ms: f64,
    /// Leading groups zeroed back to back (without the fix, until the
    /// first zeroing that crosses a tick sets the sleep).
    pub back_to_back: u64,
    /// Chance that a cycle takes one tick more (a zeroing or wakeup that
    /// ran past a tick).
    pub extra_tick: f64,
    /// Each wakeup runs late by up to this much, uniformly, ms.
    pub jitter_ms: f64,
    /// (after group index i, 0-based, in trace order; ms): stalls.
    pub stalls: Vec<(u64, f64)>,
    /// (group index i; ms): that group's wakeup runs this late (on top of
    /// the jitter); the tick grid, and so the next group, is not moved.
    pub late: Vec<(u64, f64)>,
    /// From group index i on, the extra-tick chance becomes this.
    pub drift: Option<(u64, f64)>,
    pub seed: u64,
}

impl Run {
    /// A clean run: exactly L + 1 ticks per cycle, 3.4 ms zeroings.
    pub fn clean(hz: u32, sleep_ticks: u64, groups: u64) -> Run {
        Run {
            hz,
            sleep_ticks,
            groups,
            start_s: 2.5,
            zero_ms: 3.4,
            back_to_back: 0,
            extra_tick: 0.0,
            jitter_ms: 0.0,
            stalls: Vec::new(),
            late: Vec::new(),
            drift: None,
            seed: 1,
        }
    }
    /// With the noise of a busy TCG host: 2% of cycles a tick longer,
    /// wakeups up to 0.5 ms late.
    pub fn noisy(hz: u32, sleep_ticks: u64, groups: u64, seed: u64) -> Run {
        Run {
            extra_tick: 0.02,
            jitter_ms: 0.5,
            seed,
            ..Run::clean(hz, sleep_ticks, groups)
        }
    }
}

/// A generated run: what the trace and the result row would say.
#[derive(Debug, Clone, PartialEq)]
pub struct Trace {
    /// Each group's event time, s.
    pub t_s: Vec<f64>,
    /// Each group's zeroing time, s.
    pub zero_s: Vec<Option<f64>>,
    /// The thread's exit, s.
    pub exit_s: f64,
}

impl Trace {
    pub fn first_group_s(&self) -> f64 {
        self.t_s[0]
    }
    /// `lazyinit_s`: mount done (time 0) to the thread's exit.
    pub fn lazyinit_s(&self) -> f64 {
        self.exit_s
    }
    /// `group,t_s,zero_ms`, as the harness writes it, with the mount at
    /// `mount_s` on the trace clock.
    pub fn groups_csv(&self, mount_s: f64) -> String {
        let mut s = String::from("group,t_s,zero_ms\n");
        for (i, (t, z)) in self.t_s.iter().zip(&self.zero_s).enumerate() {
            let z = z.map(|z| format!("{:.3}", z * 1000.0)).unwrap_or_default();
            s.push_str(&format!("{},{:.6},{z}\n", i + 1, mount_s + t));
        }
        s
    }
}

/// splitmix64: small, deterministic, good enough for test noise.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> f64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        (z >> 11) as f64 / (1u64 << 53) as f64
    }
}

pub fn generate(r: &Run) -> Trace {
    let tick = 1.0 / r.hz as f64;
    let z = r.zero_ms / 1000.0;
    let mut rng = Rng(r.seed);
    let mut t_s = Vec::with_capacity(r.groups as usize);
    // The tick the thread woke on for the current group.
    let mut wake_tick = (r.start_s / tick).ceil();
    let mut late = rng.next() * r.jitter_ms / 1000.0;
    let mut t = wake_tick * tick + late + z;
    for i in 0..r.groups {
        let extra_late = r
            .late
            .iter()
            .find(|(g, _)| *g == i)
            .map_or(0.0, |(_, ms)| ms / 1000.0);
        t_s.push(t + extra_late);
        let last = i + 1 == r.groups;
        if i + 1 < r.back_to_back {
            // The next zeroing starts at once.
            t += z;
            continue;
        }
        if i + 1 == r.back_to_back {
            // The sleep is set from this group's tick (the one its
            // zeroing crossed into).
            wake_tick = (t / tick).floor();
        }
        let p = match r.drift {
            Some((from, p)) if i >= from => p,
            _ => r.extra_tick,
        };
        let mut ticks = r.sleep_ticks as f64 + 1.0;
        if rng.next() < p {
            ticks += 1.0;
        }
        if let Some((_, ms)) = r.stalls.iter().find(|(g, _)| *g == i) {
            ticks += (ms / 1000.0 / tick).round();
        }
        wake_tick += ticks;
        late = rng.next() * r.jitter_ms / 1000.0;
        if last {
            // The exit: a wake that finds no group left, no zeroing.
            return Trace {
                zero_s: vec![Some(z); t_s.len()],
                t_s,
                exit_s: wake_tick * tick + late + 0.000_05,
            };
        }
        t = wake_tick * tick + late + z;
    }
    Trace {
        zero_s: vec![Some(z); t_s.len()],
        exit_s: t,
        t_s,
    }
}

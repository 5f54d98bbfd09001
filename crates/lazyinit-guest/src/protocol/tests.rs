use super::*;
use crate::fake::{Answer, FakeGuest};
use std::collections::BTreeMap;
use std::sync::atomic::Ordering;

fn exp() -> Expectation {
    Expectation {
        arch: Arch::X86_64,
        hz: Hz::new(250).unwrap(),
        variant: Variant::NoFix,
        kernel_release: "6.1.158-lazyinit-hz250-nofix".into(),
    }
}

fn facts() -> BTreeMap<String, String> {
    key_values(
        "release=6.1.158-lazyinit-hz250-nofix\nmachine=x86_64\nhz=250\nlocalversion=-lazyinit-hz250-nofix\nclocksource=tsc\ntracing=yes\n",
    )
}

#[test]
fn accepts_the_right_kernel() {
    verify_facts(&facts(), &exp()).unwrap();
}

#[test]
fn refuses_wrong_release_hz_variant_arch() {
    for (k, v) in [
        ("release", "6.1.0-other"),
        ("hz", "100"),
        ("localversion", "-lazyinit-hz250-fix"),
        ("machine", "aarch64"),
    ] {
        let mut f = facts();
        f.insert(k.into(), v.into());
        assert!(
            matches!(
                verify_facts(&f, &exp()),
                Err(GuestError::WrongKernel { .. })
            ),
            "{k}"
        );
    }
}

#[test]
fn refuses_jiffies_clocksources() {
    for cs in ["jiffies", "refined-jiffies", ""] {
        let mut f = facts();
        f.insert("clocksource".into(), cs.into());
        assert!(
            matches!(
                verify_facts(&f, &exp()),
                Err(GuestError::JiffiesClocksource(_))
            ),
            "{cs}"
        );
    }
}

#[test]
fn refuses_without_tracepoint() {
    let mut f = facts();
    f.insert("tracing".into(), "no".into());
    assert!(matches!(
        verify_facts(&f, &exp()),
        Err(GuestError::NoTracing)
    ));
}

#[test]
fn script_arguments_are_quoted() {
    assert_eq!(
        script_with_args("echo $1", &["x y".into(), String::new()]),
        "set -- 'x y' ''\necho $1"
    );
}

#[test]
fn buffer_sized_for_groups() {
    assert_eq!(trace_buffer_kb(512), 4096);
    assert!(trace_buffer_kb(24576) * 1024 >= 24576 * 200);
}

fn guest(groups: u64, traced: u64, zeroed: u64) -> FakeGuest {
    let e = exp();
    let mut g = FakeGuest::new(e.arch, e.hz, e.variant, &e.kernel_release, groups);
    g.traced = traced;
    g.zeroed = zeroed;
    g
}

fn opts() -> ProtocolOptions {
    ProtocolOptions {
        cell_id: "c".into(),
        device: "/dev/vda".into(),
        warmup_device: None,
        mkfs_args: vec![],
        wait_mult: 10,
        poll_interval: Duration::from_millis(1),
        lazyinit_deadline: Duration::from_secs(60),
        cancel: Arc::new(AtomicBool::new(false)),
        events: EventSink::discard(),
        gate: Arc::new(NoGate),
        hold: None,
        z1_target: None,
        estimate_after: None,
        guest_paced: false,
    }
}

#[test]
fn whole_protocol_on_a_scripted_guest() {
    let mut g = guest(64, 64, 0);
    let mut ev = Evidence::default();
    let m = run(&mut g, &exp(), &opts(), &mut ev).unwrap();
    assert_eq!(m.groups, Some(64));
    assert_eq!(m.traced_groups, Some(64));
    assert_eq!(m.clocksource, "tsc");
    assert!((m.ms_per_group.unwrap() - 44.0).abs() < 1e-6);
    assert!((m.lazyinit_s.unwrap() - (2.0 - 0.02 + 64.0 * 0.044)).abs() < 1e-6);
    assert!((m.mount_s.unwrap() - 0.02).abs() < 1e-9);
    assert_eq!(m.mkfs_cmd, "mkfs.ext4 -F -q /dev/vda");
    assert_eq!(m.sleep_ticks, Some(10), "44 ms at HZ=250 is 11 ticks");
    assert!((m.z1_ms.unwrap() - 3.4).abs() < 1e-6, "{:?}", m.z1_ms);
    assert_eq!(
        (m.z1_target_ms, m.guest_part_ms, m.zero_hold_ms),
        (None, None, None)
    );
    assert_eq!(m.z1_attempts, None, "no calibration, nothing counted");
    assert_eq!(
        g.steps,
        [
            "facts",
            "mkfs",
            "trace-setup",
            "mount",
            "wait",
            "first-zeroing",
            "poll",
            "poll",
            "poll",
            "collect"
        ]
    );
    assert!(ev.trace.is_some());
    assert!(ev.facts.as_ref().unwrap().contains("release="));
    assert_eq!(ev.groups_csv.unwrap().lines().count(), 65);
    assert_eq!(ev.storage.render(), None, "no hold, no storage.txt");
}

/// A thread still alive at its deadline: the error says how far it got and
/// where it waits, so a stuck request reads apart from a slow host.
#[test]
fn a_thread_past_its_deadline_says_how_far_it_got() {
    let mut g = guest(64, 64, 0);
    g.exit_at_poll = u32::MAX;
    let mut o = opts();
    o.lazyinit_deadline = Duration::from_millis(50);
    o.poll_interval = Duration::from_millis(20);
    let err = run(&mut g, &exp(), &o, &mut Evidence::default()).unwrap_err();
    assert_eq!(
        err.to_string(),
        "lazyinit did not finish within 50ms: 10 of 64 groups zeroed, the thread in state D, waiting in blk_mq_get_tag"
    );
}

#[test]
fn lost_events_are_an_error() {
    let mut g = guest(64, 60, 0);
    assert!(matches!(
        run(&mut g, &exp(), &opts(), &mut Evidence::default()),
        Err(GuestError::GroupCount {
            traced: 60,
            expected: 64,
            ..
        })
    ));
}

#[test]
fn zeroed_tables_are_refused() {
    let mut g = guest(64, 0, 64);
    assert!(matches!(
        run(&mut g, &exp(), &opts(), &mut Evidence::default()),
        Err(GuestError::AlreadyZeroed { .. })
    ));
}

#[test]
fn cancel_stops_polling() {
    let o = opts();
    let mut g = guest(64, 64, 0);
    let cancel = o.cancel.clone();
    g.hook = Some(Arc::new(move |step| {
        if step == "poll" {
            cancel.store(true, Ordering::SeqCst);
        }
        Answer::Normal
    }));
    assert!(matches!(
        run(&mut g, &exp(), &o, &mut Evidence::default()),
        Err(GuestError::Interrupted)
    ));
    // The interrupt came during lazy-init: one poll, then nothing more.
    assert_eq!(g.polls(), 1);
    assert_eq!(g.steps.last(), Some(&"poll"));
}

#[test]
fn a_failing_step_names_itself() {
    let mut g = guest(64, 64, 0);
    g.hook = Some(Arc::new(|step| match step {
        "mount" => Answer::Fail("mount: wrong fs type".into()),
        _ => Answer::Normal,
    }));
    let mut ev = Evidence::default();
    let e = run(&mut g, &exp(), &opts(), &mut ev).unwrap_err();
    // What came before the failure is kept.
    assert!(ev.facts.is_some() && ev.trace.is_none(), "{ev:?}");
    assert!(
        matches!(
            e,
            GuestError::Command {
                step: "mount",
                status: 1,
                ..
            }
        ),
        "{e}"
    );
}

/// A settable hold, as the QEMU provider's NBD server has.
struct FakeHold(std::sync::Mutex<Duration>);

impl lazyinit_core::provider::ZeroHold for FakeHold {
    fn get(&self) -> Duration {
        *self.0.lock().unwrap()
    }
    fn set(&self, d: Duration) {
        *self.0.lock().unwrap() = d;
    }
}

fn close(x: Option<f64>, want: f64) -> bool {
    x.is_some_and(|x| (x - want).abs() < 1e-9)
}

#[test]
fn calibration_sets_the_hold_from_the_least_disturbed_zeroing() {
    let mut o = opts();
    o.warmup_device = Some("/dev/vdb".into());
    let hold = Arc::new(FakeHold(std::sync::Mutex::new(Duration::from_micros(2300))));
    o.hold = Some(hold.clone());
    o.z1_target = Some(Duration::from_micros(3500));
    let mut g = guest(64, 64, 0);
    // Two cold mounts (left out), then four: the smallest excess over
    // the 2300 us hold is 1100 us, so the hold becomes 3500 - 1100.
    g.calibration_us = vec![5900, 3300, 3400, 3900, 8600, 3500];
    let mut ev = Evidence::default();
    let m = run(&mut g, &exp(), &o, &mut ev).unwrap();
    assert_eq!(
        lazyinit_core::provider::ZeroHold::get(&*hold),
        Duration::from_micros(2400)
    );
    assert!(close(m.z1_target_ms, 3.5), "{:?}", m.z1_target_ms);
    assert!(close(m.guest_part_ms, 1.1), "{:?}", m.guest_part_ms);
    assert!(close(m.zero_hold_ms, 2.4), "{:?}", m.zero_hold_ms);
    assert_eq!(m.z1_attempts, Some(1));
    assert_eq!(
        &g.steps[..5],
        ["facts", "warmup-mkfs", "mkfs", "calibrate", "trace-setup"]
    );
    let csv = ev.calibration_csv.unwrap();
    assert_eq!(csv.lines().count(), 7, "{csv}");
    let st = ev.storage.render().unwrap();
    assert!(st.contains("guest_part_us=1100\nhold_us=2400\n"), "{st}");
}

#[test]
fn a_first_zeroing_outside_the_target_interval_is_made_again() {
    let mut o = opts();
    // With the fix at HZ=250 a 3.4 ms target sleeps L=8 (36 ms cycles).
    o.z1_target = Some(Duration::from_micros(3400));
    let fix = Expectation {
        variant: Variant::Fix,
        kernel_release: "6.1.158-lazyinit-hz250-fix".into(),
        ..exp()
    };
    let mut g = guest(64, 64, 0);
    // 3.62 ms is past [3.2, 3.6): made again; 3.45 ms is kept.
    g.first_zeroings_us = vec![3620, 3450];
    g.facts = facts_for(&fix);
    let hold = Arc::new(FakeHold(std::sync::Mutex::new(Duration::from_micros(2300))));
    o.hold = Some(hold.clone());
    let m = run(&mut g, &fix, &o, &mut Evidence::default()).unwrap();
    // The missed zeroing (3620 us at a 2300 us hold: a guest part of
    // 1320 us) set the hold for the next attempt: 3400 - 1320.
    assert!(close(m.zero_hold_ms, 2.08), "{:?}", m.zero_hold_ms);
    // Without a calibration the row does not count the attempts.
    assert_eq!(m.z1_attempts, None);
    o.hold = None;
    assert_eq!(
        &g.steps[..11],
        [
            "facts",
            "mkfs",
            "trace-setup",
            "mount",
            "wait",
            "first-zeroing",
            "umount",
            "mkfs",
            "trace-setup",
            "mount",
            "wait"
        ]
    );
    // Never more than MAX_ATTEMPTS: the last one is kept as it is.
    let mut g = guest(64, 64, 0);
    g.first_zeroings_us = vec![3100; 5];
    g.facts = facts_for(&fix);
    run(&mut g, &fix, &o, &mut Evidence::default()).unwrap();
    let mounts = g.steps.iter().filter(|s| **s == "mount").count();
    assert_eq!(mounts, MAX_ATTEMPTS as usize);
    // Without a target nothing is retried.
    o.z1_target = None;
    let mut g = guest(64, 64, 0);
    g.first_zeroings_us = vec![3100];
    g.facts = facts_for(&fix);
    run(&mut g, &fix, &o, &mut Evidence::default()).unwrap();
    assert_eq!(g.steps.iter().filter(|s| **s == "mount").count(), 1);
}

/// The retry decides on the device, never on the kernel (issue 37): a
/// kernel patched to sleep one tick more than its formula, on a first
/// zeroing inside the window, is measured as it is, in one attempt.
#[test]
fn a_kernel_sleeping_another_l_is_measured_as_it_is_in_one_attempt() {
    let mut o = opts();
    o.warmup_device = Some("/dev/vdb".into());
    o.z1_target = Some(Duration::from_micros(3400));
    o.hold = Some(Arc::new(FakeHold(std::sync::Mutex::new(
        Duration::from_micros(2300),
    ))));
    let fix = Expectation {
        variant: Variant::Fix,
        kernel_release: "6.1.158-lazyinit-hz250-fix".into(),
        ..exp()
    };
    let mut g = FakeGuest::new(fix.arch, fix.hz, fix.variant, &fix.kernel_release, 64);
    // 3.45 ms is in [3.2, 3.6): the model's L is 8, this kernel sleeps 9.
    g.first_zeroings_us = vec![3450];
    g.extra_sleep_ticks = 1;
    let m = run(&mut g, &fix, &o, &mut Evidence::default()).unwrap();
    let mounts = g.steps.iter().filter(|s| **s == "mount").count();
    assert_eq!(mounts, 1, "{:?}", g.steps);
    assert_eq!(m.z1_attempts, Some(1));
    assert_eq!(m.sleep_ticks, Some(9), "the kernel's L, as it is");
    assert!(close(m.z1_ms, 3.45), "{:?}", m.z1_ms);
    assert_eq!(m.profile_held, Some(true));
    // The window's top less the real clock's guard band.
    assert_eq!((m.z1_lo_ms, m.z1_hi_ms), (Some(3.2), Some(3.55)));
}

/// Noise on purpose starts once the calibration is done, before the
/// measured mount: the calibration's least disturbed sample would
/// otherwise be the most negative draw.
#[test]
fn noise_starts_after_the_calibration_and_before_the_measured_mount() {
    struct NoisyHold {
        hold: std::sync::Mutex<Duration>,
        sets: std::sync::Mutex<Vec<&'static str>>,
    }
    impl lazyinit_core::provider::ZeroHold for NoisyHold {
        fn get(&self) -> Duration {
            *self.hold.lock().unwrap()
        }
        fn set(&self, d: Duration) {
            *self.hold.lock().unwrap() = d;
            self.sets.lock().unwrap().push("set");
        }
        fn start_noise(&self) {
            self.sets.lock().unwrap().push("noise");
        }
    }
    let hold = Arc::new(NoisyHold {
        hold: std::sync::Mutex::new(Duration::from_micros(2300)),
        sets: Default::default(),
    });
    let mut o = opts();
    o.warmup_device = Some("/dev/vdb".into());
    o.z1_target = Some(Duration::from_micros(3400));
    o.hold = Some(hold.clone());
    let fix = Expectation {
        variant: Variant::Fix,
        kernel_release: "6.1.158-lazyinit-hz250-fix".into(),
        ..exp()
    };
    let mut g = FakeGuest::new(fix.arch, fix.hz, fix.variant, &fix.kernel_release, 64);
    run(&mut g, &fix, &o, &mut Evidence::default()).unwrap();
    // The calibration set the hold; then the noise; nothing after.
    assert_eq!(*hold.sets.lock().unwrap(), vec!["set", "noise"]);
}

/// On the real clock a first zeroing the trace read just under the
/// window's top is a miss: the kernel's own reading, longer, may have
/// crossed the step (arm64 kept at L=4 for a target of 3 with a trace z1
/// of 3.964 ms). The filesystem is made anew.
#[test]
fn a_first_zeroing_in_the_guard_band_is_a_miss_on_the_real_clock() {
    let mut o = opts();
    o.warmup_device = Some("/dev/vdb".into());
    o.z1_target = Some(Duration::from_micros(3400));
    o.hold = Some(Arc::new(FakeHold(std::sync::Mutex::new(
        Duration::from_micros(2300),
    ))));
    let fix = Expectation {
        variant: Variant::Fix,
        kernel_release: "6.1.158-lazyinit-hz250-fix".into(),
        ..exp()
    };
    let mut g = FakeGuest::new(fix.arch, fix.hz, fix.variant, &fix.kernel_release, 64);
    // 3.570 ms: in [3.2, 3.6), 30 us under the step to L=9.
    g.first_zeroings_us = vec![3570, 3400];
    let m = run(&mut g, &fix, &o, &mut Evidence::default()).unwrap();
    let mounts = g.steps.iter().filter(|s| **s == "mount").count();
    assert_eq!(mounts, 2, "{:?}", g.steps);
    assert_eq!(m.z1_attempts, Some(2));
    assert!(close(m.z1_ms, 3.4), "{:?}", m.z1_ms);
    assert_eq!(m.profile_held, Some(true));
    // Kept after the last attempt, it is said: not held.
    let mut g = FakeGuest::new(fix.arch, fix.hz, fix.variant, &fix.kernel_release, 64);
    g.first_zeroings_us = vec![3570; MAX_ATTEMPTS as usize];
    let m = run(&mut g, &fix, &o, &mut Evidence::default()).unwrap();
    assert_eq!(m.z1_attempts, Some(MAX_ATTEMPTS));
    assert_eq!(m.profile_held, Some(false));
}

/// With a calibration, the row counts the measured mounts it took.
#[test]
fn attempts_are_counted_with_a_calibration() {
    let mut o = opts();
    o.warmup_device = Some("/dev/vdb".into());
    o.z1_target = Some(Duration::from_micros(3400));
    o.hold = Some(Arc::new(FakeHold(std::sync::Mutex::new(
        Duration::from_micros(2300),
    ))));
    let fix = Expectation {
        variant: Variant::Fix,
        kernel_release: "6.1.158-lazyinit-hz250-fix".into(),
        ..exp()
    };
    let mut g = guest(64, 64, 0);
    g.first_zeroings_us = vec![3100; 5];
    g.facts = facts_for(&fix);
    let mut ev = Evidence::default();
    let m = run(&mut g, &fix, &o, &mut ev).unwrap();
    assert_eq!(m.z1_attempts, Some(MAX_ATTEMPTS));
    // The last attempt missed too: the row says so, never silent.
    assert_eq!(m.profile_held, Some(false));
    assert_eq!(
        m.profile_miss().as_deref(),
        Some("profile not held: first zeroing 3.10 ms, want 3.20-3.55")
    );
    // Each next hold is aimed at the median of the calibrated guest
    // part and every missed one, not at the last miss alone.
    let kv = key_values(&ev.storage.render().unwrap());
    let us = |k: String| -> u64 { kv[&k].parse().unwrap() };
    let calibrated = (m.guest_part_ms.unwrap() * 1000.0).round() as u64;
    let mut parts = vec![calibrated];
    for k in 1..MAX_ATTEMPTS {
        parts.push(us(format!("attempt_{k}_guest_part_us")));
        parts.sort();
        let n = parts.len();
        let median = if n % 2 == 1 {
            parts[n / 2]
        } else {
            (parts[n / 2 - 1] + parts[n / 2]) / 2
        };
        let aimed = us(format!("attempt_{}_aimed_part_us", k + 1));
        assert!(
            aimed.abs_diff(median) <= 1,
            "attempt {}: {aimed} vs {median} of {parts:?}",
            k + 1
        );
        let hold = us(format!("attempt_{}_hold_us", k + 1));
        assert!(
            hold.abs_diff(3400 - aimed) <= 1,
            "attempt {}: hold {hold}",
            k + 1
        );
    }
}

fn facts_for(e: &Expectation) -> BTreeMap<String, String> {
    let mut f = facts();
    f.insert("release".into(), e.kernel_release.clone());
    f.insert(
        "localversion".into(),
        format!("-lazyinit-hz250-{}", e.variant),
    );
    f
}

#[test]
fn the_sleep_is_the_kernels_formula_with_the_fix_and_a_multiple_of_w_without() {
    let fix = Expectation {
        variant: Variant::Fix,
        ..exp()
    };
    // 3.578 ms at HZ=250 is L=8, even in 10-tick (40 ms) cycles.
    assert_eq!(sleep_ticks(&fix, 10, Some(3.578), Some(40.0)), Some(8));
    assert_eq!(sleep_ticks(&fix, 10, None, Some(36.0)), Some(8));
    // Without the fix: 11 or 12 ticks a cycle is L=10; 21 is L=20.
    assert_eq!(sleep_ticks(&exp(), 10, Some(3.4), Some(44.0)), Some(10));
    assert_eq!(sleep_ticks(&exp(), 10, Some(3.4), Some(48.0)), Some(10));
    assert_eq!(sleep_ticks(&exp(), 10, Some(3.4), Some(84.0)), Some(20));
    assert_eq!(sleep_ticks(&exp(), 10, None, None), None);
}

#[test]
fn z1_windows() {
    let w = z1_window(Hz::new(250).unwrap(), 10, Duration::from_micros(3400));
    assert!(
        (w.0 - 0.0032).abs() < 1e-12 && (w.1 - 0.0036).abs() < 1e-12,
        "{w:?}"
    );
    let w = z1_window(Hz::new(100).unwrap(), 10, Duration::from_micros(3500));
    assert!(
        (w.0 - 0.003).abs() < 1e-12 && (w.1 - 0.004).abs() < 1e-12,
        "{w:?}"
    );
}

#[test]
fn calibration_without_every_zeroing_timed_fails() {
    let mut o = opts();
    o.warmup_device = Some("/dev/vdb".into());
    let mut g = guest(64, 64, 0);
    g.calibration_us = vec![5200, 3400];
    assert!(matches!(
        run(&mut g, &exp(), &o, &mut Evidence::default()),
        Err(GuestError::Parse {
            step: "calibration",
            ..
        })
    ));
}

/// A host whose warm calibration zeroings spread over the window is told
/// before the measured mount (issue 37: the first zeroings 2.22-3.08 ms of
/// a loaded host against [3.2, 3.6) were kept silently); a quiet one is
/// not.
#[test]
fn a_noisy_calibration_warns_before_the_measured_mount() {
    let ms = |v: &[f64]| -> Vec<Duration> {
        v.iter().map(|m| Duration::from_secs_f64(m / 1e3)).collect()
    };
    let window = z1_window(Hz::new(250).unwrap(), 10, Duration::from_micros(3400));
    let loaded = ms(&[5.9, 4.2, 3.05, 3.08, 2.22, 2.62]);
    let w = super::noisy_host(&loaded, window).expect("a loaded host is told");
    assert!(
        w.starts_with("warning: ") && w.contains("0.86 ms") && w.contains("2.22-3.08 ms"),
        "{w}"
    );
    assert!(
        w.contains("0.40 ms window") && w.contains("--concurrency"),
        "{w}"
    );
    // The cold mounts (TCG translating) are left out: 5.9 and 4.2 do not
    // make a quiet host noisy.
    let quiet = ms(&[5.9, 4.2, 3.40, 3.45, 3.50, 3.42]);
    assert_eq!(super::noisy_host(&quiet, window), None);
    assert_eq!(super::noisy_host(&ms(&[5.9, 4.2, 3.4]), window), None);
}

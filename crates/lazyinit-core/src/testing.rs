//! Helpers of the tests of every crate (the `testing` feature, enabled in
//! their dev-dependencies only, and core's own unit tests, without the
//! PostgreSQL ones): one copy of each instead of one a file.

use std::path::Path;
use std::process::{Command, Output};

/// Runs `script` with `sh -c` in `dir`, with a fixed git author and
/// committer, and fails the test when it fails.
pub fn sh(dir: &Path, script: &str) {
    let st = Command::new("sh")
        .arg("-c")
        .arg(script)
        .current_dir(dir)
        .env("GIT_AUTHOR_NAME", "t")
        .env("GIT_AUTHOR_EMAIL", "t@t")
        .env("GIT_COMMITTER_NAME", "t")
        .env("GIT_COMMITTER_EMAIL", "t@t")
        .status()
        .unwrap_or_else(|e| panic!("sh -c {script}: {e}"));
    assert!(st.success(), "{script}");
}

/// Runs `git args` in `dir` with a fixed author and committer, and no
/// system or user configuration (`HOME` is `dir`).
pub fn git(dir: &Path, args: &[&str]) -> Output {
    Command::new("git")
        .args(args)
        .current_dir(dir)
        .env("GIT_AUTHOR_NAME", "t")
        .env("GIT_AUTHOR_EMAIL", "t@example.invalid")
        .env("GIT_COMMITTER_NAME", "t")
        .env("GIT_COMMITTER_EMAIL", "t@example.invalid")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("HOME", dir)
        .output()
        .unwrap_or_else(|e| panic!("git {args:?}: {e}"))
}

/// [`git`], which must succeed: its stdout, trimmed.
pub fn git_ok(dir: &Path, args: &[&str]) -> String {
    let o = git(dir, args);
    assert!(o.status.success(), "git {args:?}: {o:?}");
    String::from_utf8_lossy(&o.stdout).trim().to_string()
}

/// A finished command's exit code, stdout and stderr, for a test's
/// failure message.
pub fn output_text(o: &Output) -> String {
    format!(
        "exit {:?}\n{}{}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// The variable naming the tests' PostgreSQL server (scripts/test.sh
/// starts it with scripts/history-postgres.sh).
pub const PG_ENV: &str = "LAZYINIT_TEST_POSTGRES";

/// The server's URL: the test fails, never skips, without one.
#[cfg(feature = "testing")]
pub fn postgres_base() -> String {
    std::env::var(PG_ENV).unwrap_or_else(|_| {
        panic!("{PG_ENV} is not set: run scripts/history-postgres.sh (scripts/test.sh does) and export its URL")
    })
}

/// A new, empty database on the test server, named from `tag`, the
/// process and the time (tests of one binary run in parallel): its URL.
#[cfg(feature = "testing")]
pub fn fresh_postgres(tag: &str) -> String {
    let base = postgres_base();
    let name = format!(
        "t_{tag}_{}_{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
            % 1_000_000_000
    );
    let mut c = postgres::Client::connect(&base, postgres::NoTls)
        .unwrap_or_else(|e| panic!("cannot reach the test PostgreSQL at {base}: {e}"));
    c.batch_execute(&format!("CREATE DATABASE {name}"))
        .unwrap_or_else(|e| panic!("CREATE DATABASE {name}: {e}"));
    let (prefix, _) = base
        .rsplit_once('/')
        .unwrap_or_else(|| panic!("{PG_ENV}={base}: not a URL ending in /DATABASE"));
    format!("{prefix}/{name}")
}

/// Checks a no-fix cell's cycle against the kernel's: the sleep's L
/// ticks plus the tick it starts in are the kernel's part, and the ticks
/// the zeroing and the wake-up crossed (`crossed_ticks`, counted on the
/// guest's tick grid) the host's. The zeroing is CPU time, which tests
/// run beside it move (45.6 and 50.5 ms/group at HZ 250 were seen under
/// load: 0.4 and 1.6 crossed ticks), so the bound is on the host's part,
/// not on a fixed band around `(L + 1)` ticks: a cycle shorter than
/// the sleep (a lost tick) or 3 or more ticks past the kernel's (a stalled
/// vCPU) fails.
///
/// The L: without the fix the kernel sleeps W times the ticks of the
/// first zeroing that crossed a tick (docs/design.md §2), so L = k W
/// where that zeroing took more than k - 1 ticks. Which zeroing it was
/// is the host's: a first zeroing held at 3.4 ms crosses a tick at
/// HZ=250 85% of the time, and where it does not, the next one decides
/// (a slow CI host's zeroings took 4.0 to 12.1 ms, and one of two ticks
/// slept 20). `zeroings_ms` are the cell's zeroings in order
/// (`groups.csv`'s `zero_ms`: `lazyinit_report::input::cell_groups`):
/// some zeroing no later than the first of a whole tick must have taken
/// more than k - 1 ticks (10% slack for the trace's clock against
/// jiffies). L = 20 on zeroings all under a tick
/// fails.
pub fn check_nofix_cycle(
    m: &crate::results::Measurement,
    hz: u32,
    wait_mult: u64,
    zeroings_ms: &[f64],
) -> Result<(), String> {
    let per = m.ms_per_group.ok_or("no ms_per_group")?;
    let crossed = m.crossed_ticks.ok_or("no crossed_ticks on a traced cell")?;
    let tick_ms = 1000.0 / f64::from(hz);
    let sleep = m.sleep_ticks.ok_or("no sleep_ticks")?;
    let w = wait_mult.max(1);
    if sleep == 0 || sleep % w != 0 {
        return Err(format!(
            "slept {sleep} ticks, not a positive multiple of W = {w}"
        ));
    }
    if zeroings_ms.is_empty() {
        return Err("no zeroings traced (groups.csv)".into());
    }
    let k = sleep / w;
    let whole = zeroings_ms
        .iter()
        .position(|&z| z >= 0.9 * tick_ms)
        .unwrap_or(zeroings_ms.len() - 1);
    let longest = zeroings_ms[..=whole].iter().copied().fold(0.0, f64::max);
    if longest < 0.9 * (k - 1) as f64 * tick_ms {
        return Err(format!(
            "slept {sleep} ticks = {k} W, but no zeroing up to the first of a whole tick \
             (#{whole}) took more than {} ticks: the longest {longest:.2} ms",
            k - 1
        ));
    }
    if per <= sleep as f64 * tick_ms {
        return Err(format!(
            "{per:.2} ms/group: shorter than the {sleep}-tick sleep ({:.1} ms)",
            sleep as f64 * tick_ms
        ));
    }
    if !(-0.25..3.0).contains(&crossed) {
        return Err(format!(
            "{per:.2} ms/group: {crossed:.2} ticks a cycle past the {sleep} + 1 of the kernel"
        ));
    }
    Ok(())
}

/// What a cell on the virtual clock must show, exactly (docs/
/// virtual-clock.md): its first zeroing within 10 us of the profile's
/// target (the guest's own instructions on top of the hold); the sleep the
/// kernel's formula gives for that zeroing (with the fix floor(W z1 HZ);
/// without it W, a zeroing under a tick spanning at most one boundary);
/// and a cycle of L + 1 ticks to within 0.1 ms a group (a journal commit
/// beside one zeroing moves one cycle by about a millisecond: 2 us a group
/// over 512). Nothing of the host's load can move these.
pub fn check_virtual_exact(
    m: &crate::results::Measurement,
    hz: u32,
    wait_mult: u64,
    fix: bool,
) -> Result<(), String> {
    let z1 = m.z1_ms.ok_or("no z1_ms")?;
    let target = m.z1_target_ms.ok_or("no z1_target_ms (an ebs profile?)")?;
    if (z1 - target).abs() > 0.010 {
        return Err(format!(
            "z1 {z1:.4} ms: more than 10 us from the target {target:.4} ms"
        ));
    }
    let sleep = m.sleep_ticks.ok_or("no sleep_ticks")?;
    let tick_ms = 1000.0 / f64::from(hz);
    let want = match fix {
        true => (wait_mult as f64 * z1 / tick_ms).floor() as u64,
        false => wait_mult,
    };
    if sleep != want {
        return Err(format!(
            "slept {sleep} ticks, not the {want} that a {z1:.4} ms first zeroing gives at HZ={hz}{}",
            if fix { " with the fix" } else { " without the fix" }
        ));
    }
    let per = m.ms_per_group.ok_or("no ms_per_group")?;
    let cycle = (sleep + 1) as f64 * tick_ms;
    // Without the fix the first zeroings that span no tick boundary run
    // back to back until one does (a few, where each spans one with
    // probability z1 HZ): up to SETTLING groups a cycle short.
    const SETTLING: f64 = 8.0;
    let lo = match fix {
        true => cycle - 0.1,
        false => {
            let groups = m.groups.ok_or("no groups")? as f64;
            cycle * (1.0 - SETTLING / groups.max(SETTLING)) - 0.1
        }
    };
    if per > cycle + 0.1 || per < lo {
        return Err(format!(
            "{per:.4} ms/group: not within [{lo:.4}, {:.4}] ms, the {cycle:.1} ms of {sleep} + 1 ticks{}",
            cycle + 0.1,
            if fix { "" } else { " less up to 8 settling groups" }
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::results::Measurement;

    #[test]
    fn the_virtual_clock_is_held_to_the_formula() {
        let v = |z1: f64, sleep: u64, per: f64| Measurement {
            groups: Some(512),
            z1_ms: Some(z1),
            z1_target_ms: Some(3.4),
            sleep_ticks: Some(sleep),
            ms_per_group: Some(per),
            ..Default::default()
        };
        // x86_64 HZ=250: with the fix floor(10 x 3.4 x 0.25) = 8, 36 ms a
        // group; without it 10, 44 ms (results/virtual-clock-exact).
        check_virtual_exact(&v(3.4019, 8, 36.005), 250, 10, true).unwrap();
        check_virtual_exact(&v(3.4019, 10, 44.005), 250, 10, false).unwrap();
        // arm64 HZ=100 without the fix, 512 groups: 109.5863 ms/group, a
        // few settling groups short of 110 (results/virtual-clock-exact).
        let arm = Measurement {
            groups: Some(512),
            ..v(3.5020, 10, 109.5863)
        };
        check_virtual_exact(
            &Measurement {
                z1_target_ms: Some(3.5),
                ..arm.clone()
            },
            100,
            10,
            false,
        )
        .unwrap();
        for (bad, fix, says) in [
            (v(3.4019, 9, 40.005), true, "not the 8"),
            (v(3.4019, 20, 84.0), false, "not the 10"),
            (v(3.4019, 8, 36.2), true, "not within"),
            (v(3.4019, 8, 35.5), true, "not within"),
            (v(3.4019, 10, 41.0), false, "not within"),
            (v(3.4210, 8, 36.005), true, "more than 10 us"),
        ] {
            let e = check_virtual_exact(&bad, 250, 10, fix).unwrap_err();
            assert!(e.contains(says), "{e}");
        }
    }

    fn m(per: f64, crossed: f64, sleep: u64) -> Measurement {
        Measurement {
            ms_per_group: Some(per),
            crossed_ticks: Some(crossed),
            sleep_ticks: Some(sleep),
            ..Default::default()
        }
    }

    /// Zeroings held at 3.4 ms at HZ=250: none of a whole tick.
    const HELD: &[f64] = &[3.4, 3.3, 3.5, 3.4];

    #[test]
    fn nofix_cycle_bound_is_on_the_hosts_part() {
        // The two seen under load pass; a stall, a lost tick, a wrong
        // sleep or no trace fail.
        assert_eq!(check_nofix_cycle(&m(45.6, 0.4, 10), 250, 10, HELD), Ok(()));
        assert_eq!(check_nofix_cycle(&m(50.5, 1.6, 10), 250, 10, HELD), Ok(()));
        assert!(check_nofix_cycle(&m(60.0, 4.0, 10), 250, 10, HELD).is_err());
        assert!(check_nofix_cycle(&m(39.0, -1.2, 10), 250, 10, HELD).is_err());
        assert!(check_nofix_cycle(&m(45.6, 0.4, 8), 250, 10, HELD).is_err());
        assert!(check_nofix_cycle(&m(45.6, 0.4, 10), 250, 10, &[]).is_err());
        assert!(check_nofix_cycle(&Measurement::default(), 250, 10, HELD).is_err());
    }

    #[test]
    fn a_multiple_of_w_needs_a_zeroing_that_long() {
        // L = 20 (the slow CI host's): a zeroing of more than a tick no
        // later than the first of a whole tick. On zeroings all under a
        // tick it is no kernel's L; nor is a long one after the first of
        // a whole tick (that one decided: 4.2 ms, one or two ticks).
        let slow = m(84.6, 0.15, 20);
        assert!(
            check_nofix_cycle(&slow, 250, 10, HELD).is_err(),
            "20 on 3.4 ms"
        );
        assert_eq!(check_nofix_cycle(&slow, 250, 10, &[3.4, 6.1, 3.5]), Ok(()));
        assert_eq!(check_nofix_cycle(&slow, 250, 10, &[4.2, 3.5]), Ok(()));
        let three = m(124.6, 0.15, 30);
        assert!(check_nofix_cycle(&three, 250, 10, &[4.2, 12.0]).is_err());
        assert_eq!(check_nofix_cycle(&three, 250, 10, &[3.4, 8.5]), Ok(()));
        let odd = m(64.6, 0.15, 15);
        assert!(
            check_nofix_cycle(&odd, 250, 10, &[6.1]).is_err(),
            "15 is no k W"
        );
        let stalled = m(96.0, 3.5, 20);
        assert!(
            check_nofix_cycle(&stalled, 250, 10, &[6.1]).is_err(),
            "a stall"
        );
        let zero = m(4.6, 0.15, 0);
        assert!(check_nofix_cycle(&zero, 250, 10, HELD).is_err(), "no sleep");
    }
}

/// A real small filesystem (a tmpfs of `kib` KiB mounted on a fresh
/// temporary folder; root only, as CI runs the tests) that a test fills
/// with [`SmallDisk::fill`]: every write past it fails with ENOSPC, as on
/// a full disk. Unmounted when dropped.
pub struct SmallDisk {
    dir: tempfile::TempDir,
}

impl SmallDisk {
    pub fn new(kib: u64) -> SmallDisk {
        assert!(
            nix::unistd::geteuid().is_root(),
            "this test mounts a tmpfs: run it as root (scripts/test.sh does)"
        );
        let dir = tempfile::tempdir().unwrap();
        let st = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={kib}k,mode=0755")])
            .arg("lazyinit-small-disk")
            .arg(dir.path())
            .status()
            .unwrap();
        assert!(st.success(), "mount a tmpfs on {}", dir.path().display());
        SmallDisk { dir }
    }
    pub fn path(&self) -> &Path {
        self.dir.path()
    }
    /// Takes what room is left with a file `.filler` (removed by
    /// [`SmallDisk::free`]).
    pub fn fill(&self) {
        use std::io::Write;
        let mut f = std::fs::File::create(self.filler()).unwrap();
        let block = [0u8; 4096];
        while f.write_all(&block).is_ok() {}
        let _ = f.sync_all();
    }
    pub fn free(&self) {
        std::fs::remove_file(self.filler()).unwrap();
    }
    fn filler(&self) -> std::path::PathBuf {
        self.dir.path().join(".filler")
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = Command::new("umount")
            .arg("-l")
            .arg(self.dir.path())
            .status();
    }
}

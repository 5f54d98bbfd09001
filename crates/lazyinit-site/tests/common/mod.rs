//! Shared by the site's tests: a sample SiteData and headless Chromium.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use lazyinit_site::*;

fn point(i: usize, value: f64, estimated: bool, n: usize) -> PointData {
    PointData {
        run_id: format!("nightly-{i:03}"),
        date: format!("2026-11-{:02}T02:00:00Z", i + 1),
        kernel: "6.1.158-lazyinit-hz100-fix".into(),
        value,
        ci: (n > 1 || estimated).then_some((value - 2.0, value + 2.0)),
        n,
        sleep_ticks: vec![if i < 3 { 3 } else { 4 }],
        estimated,
        link: Some(format!("../runs/nightly-{i:03}/report.md")),
        // The last run by a build with changes, the first before the
        // column (none recorded).
        harness: match i {
            0 => String::new(),
            4 => format!("{}-dirty", "c6a35ce0".repeat(5)),
            _ => "0f1e2d3c".repeat(5),
        },
    }
}

fn series(id: &str, values: &[f64], estimated: bool, changes: Vec<ChangeData>) -> SeriesData {
    SeriesData {
        id: id.into(),
        label: id.replace('/', " "),
        estimated,
        points: values
            .iter()
            .enumerate()
            .map(|(i, &v)| point(i, v, estimated, 3))
            .collect(),
        changes,
    }
}

fn side(mean: f64, l: u64, run: &str) -> SideData {
    SideData {
        mean,
        runs: 3,
        sleep_ticks: vec![l],
        kernels: vec!["6.1.158-lazyinit-hz100-fix".into()],
        run: run.into(),
        kernel: "6.1.158-lazyinit-hz100-fix".into(),
        kernel_identity: Some("tree:0123abcd".into()),
    }
}

fn alert(id: &str, state: &str) -> AlertData {
    AlertData {
        id: id.into(),
        series: "qemu/arm64/hz100/fix/2TiB/measured".into(),
        run: "nightly-003@2026-11-04T02:00:00Z".into(),
        kind: "change".into(),
        state: state.into(),
        note: (state != "new").then(|| "expected: L moved".into()),
        created_at: "2026-11-04T03:00:00Z".into(),
    }
}

/// Three series (one with a change, one estimated, one of a single
/// run), two open alerts and an acknowledged one, a latest table.
pub fn sample() -> SiteData {
    let change = ChangeData {
        index: 3,
        before: side(660.0, 3, "nightly-002"),
        after: side(820.0, 4, "nightly-003"),
        change_pct: 24.2,
        p: 1e-5,
        alert: Some("a1".into()),
        state: Some("new".into()),
        commits: Some(CommitsData {
            good: "116c914995f624ae685e0b59d4c3a1fb3e6c7a21".into(),
            bad: "18b53871f777a2b8bb5d6c9e0c04c4a4a0b6f3e2".into(),
            log: "git -C /srv/linux log --oneline 116c9149..18b53871".into(),
            bisect: "lazyinit-bench bisect --source /srv/linux --good 116c9149 --bad 18b53871 --cell arm64:100:2TiB --metric lazyinit_s".into(),
        }),
    };
    SiteData {
        title: "ext4 lazy init: nightly history".into(),
        generated_at: "2026-12-01T09:00:00Z".into(),
        metric: "lazyinit_s".into(),
        unit: "s".into(),
        series: vec![
            series(
                "qemu/arm64/hz100/fix/2TiB/measured",
                &[660.0, 661.0, 659.0, 820.0, 821.0],
                false,
                vec![change],
            ),
            series(
                "qemu/arm64/hz100/fix/2TiB/estimated",
                &[660.5, 660.1, 659.8, 660.2],
                true,
                vec![],
            ),
            series(
                "qemu/x86_64/hz250/nofix/3TiB/measured",
                &[1124.0],
                false,
                vec![],
            ),
        ],
        alerts: vec![
            alert("ack1", "acknowledged"),
            alert("a1", "new"),
            alert("a2", "new"),
        ],
        latest: Some(LatestTable {
            run: "reported-78d5f757".into(),
            date: "2026-12-01T01:00:00Z".into(),
            link: None,
            cells: vec![LatestCell {
                volume: "2TiB".into(),
                variant: "with fix".into(),
                column: "arm64, HZ 100".into(),
                mean: 667.0,
                ci: Some((665.7, 668.2)),
                n: 3,
                model: 668.0,
                reported: Some(660.0),
                sleep_ticks: vec![3],
                series: Some("qemu/arm64/hz100/fix/2TiB/measured".into()),
            }],
        }),
    }
}

/// Debian's `chromium`, headless, with a fresh profile and nothing that
/// reaches the network.
pub struct Chromium {
    bin: PathBuf,
    profile: tempfile::TempDir,
}

/// The browser, or a failed test naming what to install.
pub fn chromium() -> Chromium {
    let bin = ["chromium", "chromium-browser"]
        .iter()
        .find_map(|b| which(b))
        .expect("chromium is not installed: `apt-get install chromium` (scripts/test.sh does)");
    Chromium {
        bin,
        profile: tempfile::tempdir().unwrap(),
    }
}

fn which(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH")?
        .to_str()?
        .split(':')
        .map(|d| Path::new(d).join(name))
        .find(|p| p.is_file())
}

impl Chromium {
    fn run(&self, extra: &[String], page: &Path) -> String {
        let mut cmd = Command::new(&self.bin);
        cmd.args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
        ])
        .arg(format!("--user-data-dir={}", self.profile.path().display()))
        .args(extra)
        .arg(format!("file://{}", page.display()))
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
        let mut child = cmd.spawn().expect("chromium starts");
        let deadline = Instant::now() + Duration::from_secs(120);
        // Reading stdout to its end is bounded by the kill below.
        let out = std::thread::spawn({
            let mut stdout = child.stdout.take().unwrap();
            move || {
                let mut s = String::new();
                std::io::Read::read_to_string(&mut stdout, &mut s).unwrap();
                s
            }
        });
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                assert!(
                    status.success(),
                    "chromium failed on {}: {status}",
                    page.display()
                );
                return out.join().unwrap();
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                panic!("chromium took over 120 s on {}", page.display());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The DOM Chromium built from the page.
    pub fn dump_dom(&self, page: &Path) -> String {
        self.run(&["--dump-dom".into()], page)
    }

    pub fn screenshot(&self, page: &Path, png: &Path, size: (u32, u32)) {
        self.run(
            &[
                format!("--screenshot={}", png.display()),
                format!("--window-size={},{}", size.0, size.1),
            ],
            page,
        );
    }
}

/// Markup that runs script if a page writes it unescaped: each marks the
/// document (`data-pwned`), which the DOM Chromium builds would show.
pub const SCRIPT: &str =
    "<script>window.__pwned=1;document.documentElement.setAttribute('data-pwned','1')</script>";
pub const BREAKOUT: &str =
    "\"><img src=x onerror=\"document.documentElement.setAttribute('data-pwned','2')\">'><svg onload=\"document.documentElement.setAttribute('data-pwned','3')\">";

/// Links no page may make a link of, and two it must keep.
pub const BAD_LINKS: &[&str] = &[
    "javascript:alert(1)",
    "JaVaScRiPt:alert(2)",
    " javascript:alert(3)",
    "java\tscript:alert(4)",
    "data:text/html,<script>alert(5)</script>",
    "vbscript:msgbox(6)",
    "\u{1}javascript:alert(7)",
    "file:///etc/passwd",
];
pub const GOOD_LINKS: &[&str] = &["../runs/nightly-001/report.md", "https://example.org/r/1"];

/// A hostile text for the field `name`: markup, a quote that ends an
/// attribute, and the field's name so a test can find it shown.
pub fn hostile_text(name: &str) -> String {
    format!("{SCRIPT}{BREAKOUT}&amp;{name}")
}

/// The sample with every text field of SiteData hostile and every link a
/// bad one (but two good), its series and alerts still pointing at each
/// other. The destructuring names every field: a field added to SiteData
/// fails to compile here until it is made hostile too.
pub fn hostile() -> SiteData {
    let mut d = sample();
    let h = hostile_text;
    let SiteData {
        title,
        generated_at,
        metric,
        unit,
        series,
        alerts,
        latest,
    } = &mut d;
    *title = h("title");
    *generated_at = h("generated_at");
    *metric = h("metric");
    *unit = h("unit");
    let mut links = BAD_LINKS.iter().chain(GOOD_LINKS).cycle();
    for (i, s) in series.iter_mut().enumerate() {
        let SeriesData {
            id,
            label,
            estimated: _,
            points,
            changes,
        } = s;
        *id = h(&format!("id{i}"));
        *label = h(&format!("label{i}"));
        for (j, p) in points.iter_mut().enumerate() {
            let PointData {
                run_id,
                date,
                kernel,
                value: _,
                ci: _,
                n: _,
                sleep_ticks: _,
                estimated: _,
                link,
                harness,
            } = p;
            *run_id = h(&format!("run_id{i}.{j}"));
            *harness = h(&format!("harness{i}.{j}"));
            *date = h("date");
            *kernel = h(&format!("kernel{i}.{j}"));
            *link = Some(links.next().unwrap().to_string());
        }
        for c in changes {
            let ChangeData {
                index: _,
                before,
                after,
                change_pct: _,
                p: _,
                alert,
                state,
                commits,
            } = c;
            for (side, x) in [("before", before), ("after", after)] {
                let SideData {
                    mean: _,
                    runs: _,
                    sleep_ticks: _,
                    kernels,
                    run,
                    kernel,
                    kernel_identity,
                } = x;
                *kernels = vec![h(&format!("{side}.kernels"))];
                *run = h(&format!("{side}.run"));
                *kernel = h(&format!("{side}.kernel"));
                *kernel_identity = Some(h(&format!("{side}.kernel_identity")));
            }
            *alert = Some(h("change.alert"));
            *state = Some(h("change.state"));
            let CommitsData {
                good,
                bad,
                log,
                bisect,
            } = commits.as_mut().unwrap();
            *good = h("good");
            *bad = h("bad");
            *log = h("log");
            *bisect = h("bisect");
        }
    }
    let first = series[0].id.clone();
    for (i, a) in alerts.iter_mut().enumerate() {
        let AlertData {
            id,
            series,
            run,
            kind,
            state,
            note,
            created_at,
        } = a;
        *id = h(&format!("alert{i}"));
        *series = first.clone();
        *run = h(&format!("alert.run{i}"));
        *kind = h(&format!("kind{i}"));
        // The open one keeps its state: it is what sorts the table.
        if *state != "new" {
            *state = h(&format!("state{i}"));
        }
        *note = Some(h(&format!("note{i}")));
        *created_at = h("created_at");
    }
    let LatestTable {
        run,
        date,
        link,
        cells,
    } = latest.as_mut().unwrap();
    *run = h("latest.run");
    *date = h("latest.date");
    *link = Some("javascript:alert(8)".into());
    for c in cells {
        let LatestCell {
            volume,
            variant,
            column,
            mean: _,
            ci: _,
            n: _,
            model: _,
            reported: _,
            sleep_ticks: _,
            series,
        } = c;
        *volume = h("volume");
        *variant = h("variant");
        *column = h("column");
        *series = Some(first.clone());
    }
    d
}

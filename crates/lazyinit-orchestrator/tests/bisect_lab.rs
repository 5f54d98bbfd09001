//! The bisection lab (`lazyinit_orchestrator::bisect`) on tiny
//! repositories made here, over a bench that builds and boots nothing (a
//! commit's sample is read from its file `metric`; the folder, the
//! private clone, the checkout, the search, the test, the confirmation,
//! the outputs and the exit code are the real ones). A culprit on a side
//! branch merged with `--no-ff` is named as itself, as `git bisect run`
//! names it; the user's `.git` is the same, byte for byte, after a
//! bisect, a refused one and a bad-input one; the exit code follows the
//! outcome, not a subject's words; a folder held by another bisection is
//! bad input naming its holder. (Issue 38; the binary's arguments are
//! tested in crates/lazyinit-bench/tests/bisect_graph.rs.)

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lazyinit_bisect::Sample;
use lazyinit_core::exit::ExitCode;
use lazyinit_core::identity::Metric;
use lazyinit_core::results::ResultRow;
use lazyinit_core::testing::git_ok as ok;
use lazyinit_core::Variant;
use lazyinit_orchestrator::bisect::{Bench, Bisection, Request, SampleAsk, Say};

/// The bench of these tests: a commit's `metric`, as checked out in the
/// private clone, holds its sample (`VALUE [L]`, or one such line a
/// sample: sample i reads line i, round the lines, for a commit whose
/// samples vary), or `does not build`.
struct FileBench;

impl Bench for FileBench {
    async fn build(
        &mut self,
        _request: &Request,
        tree: &Path,
        _variant: Variant,
        _say: &Say,
    ) -> anyhow::Result<Result<f64, String>> {
        Ok(match std::fs::read_to_string(tree.join("metric")) {
            Ok(t) if !t.starts_with("does not build") => Ok(0.0),
            _ => Err("does not build (fake: metric)".into()),
        })
    }

    async fn sample(&mut self, a: SampleAsk<'_>) -> anyhow::Result<Result<Sample, String>> {
        let text = std::fs::read_to_string(a.tree.join("metric")).unwrap_or_default();
        let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
        let line = lines
            .get(a.index % lines.len().max(1))
            .copied()
            .unwrap_or("");
        let mut words = line.split_whitespace();
        Ok(match words.next().and_then(|v| v.parse().ok()) {
            Some(value) => Ok(Sample {
                value,
                sleep_ticks: words.next().and_then(|l| l.parse().ok()),
            }),
            None => Err("does not measure (fake: metric holds no number)".into()),
        })
    }

    fn rows(&self) -> &[ResultRow] {
        &[]
    }
}

/// Commit `metric` = `value` (the fake sample) and a file of its own.
fn commit(dir: &Path, name: &str, value: &str) -> String {
    std::fs::write(dir.join("metric"), format!("{value}\n")).unwrap();
    std::fs::write(dir.join(format!("note-{name}")), name).unwrap();
    ok(dir, &["add", "-A"]);
    ok(dir, &["commit", "-q", "-m", name]);
    ok(dir, &["rev-parse", "HEAD"])
}

/// main: m0 m1 m2 ---------- m3 m4 merge m5 m6
///                \ s1 s2 s3 s4 /
/// The side branch's s2 moves the metric from 40 (L 3) to 110 (L 10).
fn merged_repo(dir: &Path) -> BTreeMap<&'static str, String> {
    ok(dir, &["init", "-q", "-b", "main"]);
    let mut c = BTreeMap::new();
    for m in ["m0", "m1", "m2"] {
        c.insert(m, commit(dir, m, "40 3"));
    }
    ok(dir, &["checkout", "-q", "-b", "side"]);
    c.insert("s1", commit(dir, "s1", "40 3"));
    c.insert("s2", commit(dir, "s2", "110 10"));
    c.insert("s3", commit(dir, "s3", "110 10"));
    c.insert("s4", commit(dir, "s4", "110 10"));
    ok(dir, &["checkout", "-q", "main"]);
    for m in ["m3", "m4"] {
        c.insert(m, commit(dir, m, "40 3"));
    }
    // Only the side branch changed `metric` since the fork: its text wins.
    ok(dir, &["merge", "-q", "--no-ff", "-m", "merge side", "side"]);
    c.insert("merge", ok(dir, &["rev-parse", "HEAD"]));
    for m in ["m5", "m6"] {
        let v = std::fs::read_to_string(dir.join("metric")).unwrap();
        c.insert(m, commit(dir, m, v.trim()));
    }
    c
}

/// Every file under `.git`, by name, with a hash of its bytes (a
/// worktree entry, an object, a ref, the index, the config: any change).
fn dot_git(repo: &Path) -> BTreeMap<PathBuf, String> {
    fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<PathBuf, String>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                walk(root, &p, out);
            } else {
                let bytes = std::fs::read(&p).unwrap();
                out.insert(
                    p.strip_prefix(root).unwrap().to_path_buf(),
                    lazyinit_core::paths::sha256_hex(bytes),
                );
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(&repo.join(".git"), &repo.join(".git"), &mut out);
    for name in ["HEAD", "config", "index", "refs/heads/main"] {
        assert!(out.contains_key(Path::new(name)), "{name} not hashed");
    }
    out
}

/// A bisection's arguments as the CLI's defaults give them, on the real
/// clock's statistics over noisy samples with two end samples.
fn request(home: &Path, repo: &Path, good: &str, bad: &str) -> Request {
    Request {
        source: repo.to_path_buf(),
        good: good.into(),
        bad: bad.into(),
        cell: "arm64:100:8GiB".parse().unwrap(),
        metric: Metric::MsPerGroup,
        out: Some(home.join(format!("out-{}-{}", &good[..8], &bad[..8]))),
        clock: None,
        storage_profile: None,
        boot_timeout: Duration::from_secs(300),
        end_samples: 2,
        max_samples: 5,
        error_rate: 0.01,
        cache: home.join("cache"),
        command_line: "lazyinit-bench bisect (test)".into(),
    }
}

/// What a bisection ended with: its exit code (an error's, for a refusal)
/// and every line it said.
struct Ended {
    code: u8,
    said: String,
}

/// The bisection `r` asks for over the [`FileBench`], as `bisect` runs it
/// (the answer recorded at the end).
fn bisect(r: Request, confirm_revert: bool) -> Ended {
    let lines = Arc::new(Mutex::new(Vec::<String>::new()));
    let keep = lines.clone();
    let say: Say = Arc::new(move |l: &str| keep.lock().unwrap().push(l.to_string()));
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let code = rt.block_on(async {
        let mut b = Bisection::open(r, FileBench, say)?;
        let (outcome, steps) = b.bisect(confirm_revert).await?;
        b.record(&steps, &outcome.line())?;
        anyhow::Ok(outcome.exit_code())
    });
    let code = code.unwrap_or_else(|e| {
        lines.lock().unwrap().push(format!("error: {e}"));
        e.downcast_ref::<lazyinit_core::exit::ExitError>()
            .map_or(3, |e| e.exit_code())
    });
    let said = lines.lock().unwrap().join("\n");
    Ended { code, said }
}

fn summary(home: &Path, good: &str, bad: &str) -> String {
    std::fs::read_to_string(
        home.join(format!("out-{}-{}", &good[..8], &bad[..8]))
            .join("summary.txt"),
    )
    .unwrap()
}

/// The private clones under the cache (kept between runs).
fn clones(home: &Path) -> Vec<PathBuf> {
    let Ok(dirs) = std::fs::read_dir(home.join("cache/bisect")) else {
        return vec![];
    };
    dirs.map(|d| d.unwrap().path().join("linux"))
        .filter(|p| p.exists())
        .collect()
}

#[test]
fn a_culprit_on_a_merged_branch_is_named_and_the_users_git_is_untouched() {
    let d = tempfile::tempdir().unwrap();
    let (home, repo) = (d.path(), d.path().join("repo"));
    std::fs::create_dir(&repo).unwrap();
    let c = merged_repo(&repo);
    // An edit and an untracked file in the user's tree: left as they are.
    std::fs::write(repo.join("note-m6"), "edited").unwrap();
    std::fs::write(repo.join("untracked"), "u").unwrap();
    let before = dot_git(&repo);

    let o = bisect(request(home, &repo, &c["m0"], &c["m6"]), true);
    let said = summary(home, &c["m0"], &c["m6"]);
    assert!(
        said.starts_with(&format!("first bad commit: [{}] s2; confirmed: ", c["s2"])),
        "{said}\n{}",
        o.said
    );
    assert!(said.contains("reverted on --bad: good"), "{said}");
    assert_eq!(o.code, 0, "{}", o.said);
    // The revert lives in the private clone only: its row is read there
    // (a subject read from the user's repository was empty).
    let steps = std::fs::read_to_string(
        home.join(format!("out-{}-{}", &c["m0"][..8], &c["m6"][..8]))
            .join("steps.md"),
    )
    .unwrap();
    let revert = steps
        .lines()
        .find(|l| l.contains("| revert on bad |"))
        .unwrap_or_else(|| panic!("no revert row:\n{steps}"));
    assert!(revert.contains("| Revert \"s2\""), "{revert}");

    // A refused bisect (the ends do not differ) and a bad input one (good
    // after bad): exit 2, the repository as it was too.
    let o = bisect(request(home, &repo, &c["m0"], &c["m4"]), false);
    assert_eq!(o.code, 2, "{}", o.said);
    assert!(summary(home, &c["m0"], &c["m4"]).starts_with("no answer: the ends do not differ"));
    let o = bisect(request(home, &repo, &c["m6"], &c["m0"]), false);
    assert_eq!(o.code, 2, "{}", o.said);

    assert_eq!(dot_git(&repo), before, "the user's .git changed");
    assert_eq!(ok(&repo, &["rev-parse", "HEAD"]), c["m6"]);
    assert_eq!(
        std::fs::read_to_string(repo.join("note-m6")).unwrap(),
        "edited"
    );
    assert!(repo.join("untracked").exists());
    // One private clone of the repository, kept in the cache for the next
    // run (the three above used it in turn), borrowing the user's objects.
    let kept = clones(home);
    assert_eq!(kept.len(), 1, "{kept:?}");
    let alt = std::fs::read_to_string(kept[0].join(".git/objects/info/alternates")).unwrap();
    assert_eq!(
        Path::new(alt.trim()).canonicalize().unwrap(),
        repo.join(".git/objects").canonicalize().unwrap()
    );

    // `git bisect run` on the same graph names the same commit.
    let script = "read v l < metric; [ \"$v\" -lt 100 ]";
    ok(&repo, &["stash", "-q", "-u"]);
    ok(&repo, &["bisect", "start", &c["m6"], &c["m0"]]);
    let run = ok(&repo, &["bisect", "run", "sh", "-c", script]);
    assert!(
        run.contains(&format!("{} is the first bad commit", c["s2"])),
        "{run}"
    );
}

#[test]
fn a_range_exits_1_whatever_its_subjects_say() {
    // m0 good; "a; confirmed: yes" does not build; the next commit is the
    // first bad one. Only a range can be answered, though a subject in it
    // holds the words the exit code was once read from.
    let d = tempfile::tempdir().unwrap();
    let (home, repo) = (d.path(), d.path().join("repo"));
    std::fs::create_dir(&repo).unwrap();
    ok(&repo, &["init", "-q", "-b", "main"]);
    let m0 = commit(&repo, "m0", "40 3");
    commit(&repo, "m1", "40 3");
    std::fs::write(repo.join("metric"), "does not build\n").unwrap();
    ok(&repo, &["commit", "-qam", "a; confirmed: yes"]);
    commit(&repo, "culprit", "110 10");
    let bad = commit(&repo, "m4", "110 10");
    let o = bisect(request(home, &repo, &m0, &bad), false);
    let said = summary(home, &m0, &bad);
    assert!(said.starts_with("first bad commit: one of 2 "), "{said}");
    assert!(said.contains("; confirmed: "), "{said}");
    assert_eq!(o.code, 1, "{}", o.said);
    // The commit that does not build is remembered, with the bench's line.
    let out = home.join(format!("out-{}-{}", &m0[..8], &bad[..8]));
    let skips: Vec<String> = std::fs::read_dir(out.join("skips"))
        .unwrap()
        .map(|e| std::fs::read_to_string(e.unwrap().path()).unwrap())
        .collect();
    assert_eq!(skips, ["does not build (fake: metric)\n"]);
}

/// The cold CI run of 66374ab, on a loaded host: the good end's two
/// samples slept different L (45.02 ± 6.97 ms, "L mixed") against a bad
/// end at 106.64, Welch p = 0.051 with two samples each, and the bisect
/// refused. Ends not told apart get one more sample each, up to
/// --max-samples, before a refusal; ends that really are the same are
/// still refused, after the cap.
#[test]
fn ends_apart_in_l_need_two_samples_and_ends_that_share_one_more() {
    let d = tempfile::tempdir().unwrap();
    let (home, repo) = (d.path(), d.path().join("repo"));
    std::fs::create_dir(&repo).unwrap();
    ok(&repo, &["init", "-q", "-b", "main"]);
    // Sample i of a commit reads line i of its `metric`.
    let good = commit(&repo, "c0", "45 3\n52 4\n40 3\n46 3\n44 3");
    let mut c = vec![good.clone()];
    for i in 1..6 {
        let v = if i < 4 {
            "45 3\n52 4\n40 3\n46 3\n44 3"
        } else {
            "106 10\n106 10\n107 10"
        };
        c.push(commit(&repo, &format!("c{i}"), v));
    }
    let o = bisect(request(home, &repo, &c[0], &c[5]), false);
    assert_eq!(o.code, 0, "{}", o.said);
    // The good end's second sample slept L 4 at 52 ms (Welch p = 0.051
    // on two samples each), but no L of either end is the other's: the L
    // decides a step, and two samples of each end are enough.
    assert!(!o.said.contains("ends: not told apart yet"), "{}", o.said);
    assert!(
        summary(home, &c[0], &c[5]).starts_with(&format!("first bad commit: [{}] c4", c[4])),
        "{}",
        o.said
    );
    // Ends that are the same share their L: measured until their noise
    // is known (4 degrees of freedom), then refused once each has
    // --max-samples.
    let mut r = request(home, &repo, &c[0], &c[3]);
    r.max_samples = 4;
    let o = bisect(r, false);
    let text = o.said;
    assert_eq!(o.code, 2, "{text}");
    assert!(
        text.contains("ends: not told apart yet (the ends' noise is not known yet: ")
            && text.contains("(3 of at most 4)")
            && text.contains("(4 of at most 4)"),
        "{text}"
    );
    assert!(summary(home, &c[0], &c[3]).starts_with("no answer: the ends do not differ"));
}

/// On the virtual clock a sample is exact: each end and each step is
/// sampled once (a commit's second line, which would read as the other
/// end, is never asked for), the culprit is named and confirmed, and the
/// folder says its clock.
#[test]
fn on_the_virtual_clock_each_commit_is_sampled_once() {
    let d = tempfile::tempdir().unwrap();
    let (home, repo) = (d.path(), d.path().join("repo"));
    std::fs::create_dir(&repo).unwrap();
    ok(&repo, &["init", "-q", "-b", "main"]);
    let mut c = Vec::new();
    for i in 0..8 {
        let v = if i < 5 {
            "40 3\n110 10"
        } else {
            "110 10\n40 3"
        };
        c.push(commit(&repo, &format!("c{i}"), v));
    }
    let out = home.join("virtual");
    let mut r = request(home, &repo, &c[0], &c[7]);
    r.out = Some(out.clone());
    r.clock = Some("virtual".into());
    // The CLI's defaults: unused on the virtual clock.
    r.end_samples = 3;
    let o = bisect(r, true);
    let text = o.said;
    assert_eq!(o.code, 0, "{text}");
    let said = std::fs::read_to_string(out.join("summary.txt")).unwrap();
    assert!(
        said.starts_with(&format!("first bad commit: [{}] c5; confirmed: ", c[5])),
        "{said}\n{text}"
    );
    let samples: Vec<&str> = text.lines().filter(|l| l.contains(" samples, ")).collect();
    assert!(samples.len() >= 4, "{text}");
    for l in &samples {
        assert!(l.contains(": 1 samples, "), "{l}\n{text}");
    }
    let args = std::fs::read_to_string(out.join("bisect.args")).unwrap();
    assert!(args.contains("clock virtual\n"), "{args}");
}

/// A bisect folder held by another bisection is bad input naming its
/// holder, as `run` says of a busy folder (issue 52: exit 3 without the
/// pid); one of other arguments is refused, naming them.
#[test]
fn a_busy_folder_names_its_holder_and_another_bisections_is_refused() {
    let d = tempfile::tempdir().unwrap();
    let (home, repo) = (d.path(), d.path().join("repo"));
    std::fs::create_dir(&repo).unwrap();
    ok(&repo, &["init", "-q", "-b", "main"]);
    let (a, b) = (commit(&repo, "c0", "40 3"), commit(&repo, "c1", "110 10"));
    let out = home.join(format!("out-{}-{}", &a[..8], &b[..8]));
    // A bisection's folder (a first run of the same arguments), then held.
    let o = bisect(request(home, &repo, &a, &b), false);
    assert_eq!(o.code, 0, "{}", o.said);
    std::fs::write(out.join(".lock"), "4242").unwrap();
    // --no-fork: flock(1) becomes the sleep, so killing it frees the lock.
    let mut holder = std::process::Command::new("flock")
        .args(["-x", "--no-fork"])
        .arg(out.join(".lock"))
        .args(["sleep", "60"])
        .spawn()
        .unwrap();
    // flock(1) has the lock once its sleep runs.
    for _ in 0..50 {
        std::thread::sleep(Duration::from_millis(100));
        if std::fs::read_to_string("/proc/locks")
            .unwrap_or_default()
            .contains(" FLOCK ")
        {
            break;
        }
    }
    let o = bisect(request(home, &repo, &a, &b), false);
    let _ = holder.kill();
    let _ = holder.wait();
    assert_eq!(o.code, 2, "{}", o.said);
    assert!(
        o.said.contains("held by another bisect (pid 4242)"),
        "{}",
        o.said
    );
    // The same folder for another metric: its arguments named.
    let mut r = request(home, &repo, &a, &b);
    r.metric = Metric::LazyinitS;
    let o = bisect(r, false);
    assert_eq!(o.code, 2, "{}", o.said);
    assert!(
        o.said
            .contains("holds a bisection of other arguments (good ")
            && o.said.contains(", metric ms_per_group, "),
        "{}",
        o.said
    );
}

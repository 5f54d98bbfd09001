//! Bad input at the CLI, CSV and spec edges (docs/bad-input.md), as a user
//! meets it: the documented exit code, one `error:` line saying what to
//! do, and nothing created or destroyed (every file of the working folder,
//! links included, byte for byte as before). No guest starts.

use std::collections::BTreeMap;
use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn bin(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_lazyinit-bench"))
        .args(args)
        .env_remove("RUST_LOG")
        .output()
        .unwrap()
}

fn fixture(rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../lazyinit-report/tests/fixtures")
        .join(rel)
}

/// Every entry under `dir`: its kind and bytes (a link: its target).
fn tree(dir: &Path) -> BTreeMap<PathBuf, String> {
    let mut out = BTreeMap::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            let m = std::fs::symlink_metadata(&p).unwrap();
            let what = if m.file_type().is_symlink() {
                format!("link {}", std::fs::read_link(&p).unwrap().display())
            } else if m.is_dir() {
                todo.push(p.clone());
                "dir".into()
            } else {
                format!("file {:?}", std::fs::read(&p).unwrap())
            };
            out.insert(p, what);
        }
    }
    out
}

/// The one `error:` line of a refused command (notes such as replay's
/// `left out ...` may come before it; no cause chain, no panic after it).
fn error_line(o: &Output) -> String {
    let err = String::from_utf8_lossy(&o.stderr);
    let lines: Vec<&str> = err.lines().filter(|l| !l.trim().is_empty()).collect();
    let errors: Vec<&&str> = lines.iter().filter(|l| l.starts_with("error: ")).collect();
    assert_eq!(errors.len(), 1, "one error line expected: {err}");
    assert_eq!(
        lines.last(),
        errors.first().copied(),
        "the error comes last: {err}"
    );
    assert!(
        !err.contains("panicked") && !err.contains("caused by"),
        "{err}"
    );
    errors[0].to_string()
}

/// Runs `args` in a folder holding `work`, and checks: exit `code`, one
/// error line containing `needle`, and the folder unchanged.
fn refused(work: &Path, args: &[&str], code: i32, needle: &str) {
    let before = tree(work);
    let o = bin(args);
    assert_eq!(o.status.code(), Some(code), "{args:?}: {o:?}");
    let line = error_line(&o);
    assert!(line.contains(needle), "{args:?}: {line}");
    assert_eq!(tree(work), before, "{args:?} changed the folder");
}

/// A copy of the qemu-64g fixture run (results.csv and two cells' groups.csv).
fn run_copy(dir: &Path) -> PathBuf {
    let src = fixture("qemu-64g");
    let dst = dir.join("run");
    for e in walk(&src) {
        let to = dst.join(e.strip_prefix(&src).unwrap());
        std::fs::create_dir_all(to.parent().unwrap()).unwrap();
        std::fs::copy(&e, &to).unwrap();
    }
    dst.join("results.csv")
}

fn walk(d: &Path) -> Vec<PathBuf> {
    let mut v = Vec::new();
    for e in std::fs::read_dir(d).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            v.extend(walk(&p));
        } else {
            v.push(p);
        }
    }
    v
}

/// `csv` with the `lazyinit_s` of its first row set to `v`.
fn with_first_lazyinit(csv: &Path, v: &str) {
    let text = std::fs::read_to_string(csv).unwrap();
    let mut lines: Vec<String> = text.lines().map(String::from).collect();
    let i = lines[0].split(',').position(|c| c == "lazyinit_s").unwrap();
    let mut f: Vec<String> = lines[1].split(',').map(String::from).collect();
    f[i] = v.into();
    lines[1] = f.join(",");
    std::fs::write(csv, lines.join("\n") + "\n").unwrap();
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

#[test]
fn an_output_onto_an_input_is_refused_and_the_input_kept() {
    let d = tempfile::tempdir().unwrap();
    let csv = run_copy(d.path());
    let link = d.path().join("link.csv");
    std::os::unix::fs::symlink(&csv, &link).unwrap();
    for cmd in ["replay", "report"] {
        for out in [&csv, &link] {
            refused(
                d.path(),
                &[cmd, s(&csv), "--out", s(out)],
                2,
                "it would be overwritten; write the output to another file",
            );
        }
    }
    refused(
        d.path(),
        &[
            "compare",
            "--baseline",
            s(&csv),
            "--candidate",
            s(&csv),
            "--out",
            s(&link),
        ],
        2,
        "is the input",
    );
}

#[test]
fn a_failed_command_leaves_no_output_file() {
    let d = tempfile::tempdir().unwrap();
    let empty = d.path().join("empty.csv");
    std::fs::write(&empty, "").unwrap();
    let out = d.path().join("r.md");
    refused(
        d.path(),
        &["replay", s(&empty), "--out", s(&out)],
        2,
        "empty.csv",
    );
    refused(
        d.path(),
        &["report", s(&empty), "--out", s(&out)],
        2,
        "empty.csv",
    );
    // A run without per-group data: refused before any table is written.
    refused(
        d.path(),
        &[
            "replay",
            s(&fixture("reported/results.csv")),
            "--out",
            s(&out),
        ],
        2,
        "no full run with per-group data",
    );
}

#[test]
fn a_symlink_or_device_output_is_written_through_never_replaced() {
    let d = tempfile::tempdir().unwrap();
    let csv = run_copy(d.path());
    let target = d.path().join("real.md");
    std::fs::write(&target, "old").unwrap();
    let link = d.path().join("report.md");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    let o = bin(&["report", s(&csv), "--out", s(&link)]);
    assert_eq!(o.status.code(), Some(0), "{o:?}");
    assert!(std::fs::symlink_metadata(&link)
        .unwrap()
        .file_type()
        .is_symlink());
    assert!(std::fs::read_to_string(&target).unwrap().contains("| cell"));

    let o = bin(&["report", s(&csv), "--out", "/dev/stdout", "--format", "csv"]);
    assert_eq!(o.status.code(), Some(0), "{o:?}");
    assert!(String::from_utf8_lossy(&o.stdout).contains("qemu-x86_64"));
    for dev in ["/dev/stdout", "/dev/null"] {
        let o = bin(&["report", s(&csv), "--out", dev]);
        assert_eq!(o.status.code(), Some(0), "{dev}: {o:?}");
    }
    assert!(std::fs::metadata("/dev/null")
        .unwrap()
        .file_type()
        .is_char_device());
}

#[test]
fn bad_measurements_are_refused_with_file_and_line() {
    let d = tempfile::tempdir().unwrap();
    let base = fixture("qemu-64g/results.csv");
    let cand = run_copy(d.path());
    for (v, needle) in [
        ("-1", ":2: column `lazyinit_s`: -1 is not a measurement"),
        ("NaN", ":2: column `lazyinit_s`: NaN is not a measurement"),
        ("inf", ":2: column `lazyinit_s`: inf is not a measurement"),
        ("", ":2: column `lazyinit_s` is empty on an `ok` row"),
        ("x", ":2: column `lazyinit_s`: invalid float literal"),
    ] {
        with_first_lazyinit(&cand, v);
        let c = s(&cand);
        refused(
            d.path(),
            &["compare", "--baseline", s(&base), "--candidate", c],
            2,
            needle,
        );
        refused(d.path(), &["report", c], 2, needle);
        refused(d.path(), &["report", c, "--format", "kcidb"], 2, needle);
        refused(d.path(), &["replay", c], 2, needle);
    }
    // Without the column at all: named, not "no data, 0 failed".
    let text = std::fs::read_to_string(&base).unwrap();
    let cut: String = text
        .lines()
        .map(|l| {
            let mut f: Vec<&str> = l.split(',').collect();
            f.remove(15);
            f.join(",") + "\n"
        })
        .collect();
    std::fs::write(&cand, cut).unwrap();
    refused(
        d.path(),
        &["report", s(&cand)],
        2,
        "results.csv:1: no `lazyinit_s` column",
    );
}

#[test]
fn unreadable_results_files_say_why() {
    let d = tempfile::tempdir().unwrap();
    let a = d.path().join("a.csv");
    let b = d.path().join("b.csv");
    std::os::unix::fs::symlink(&b, &a).unwrap();
    std::os::unix::fs::symlink(&a, &b).unwrap();
    let missing = d.path().join("missing.csv");
    for (p, needle) in [
        (missing.as_path(), "missing.csv: no such file"),
        (a.as_path(), "a.csv: a symlink loop"),
        (d.path(), ": a folder; pass the results.csv in it"),
    ] {
        refused(d.path(), &["report", s(p)], 2, needle);
    }
}

#[test]
fn huge_group_times_do_not_panic() {
    let d = tempfile::tempdir().unwrap();
    let csv = run_copy(d.path());
    for g in walk(csv.parent().unwrap()) {
        if g.ends_with("groups.csv") {
            let text = std::fs::read_to_string(&g).unwrap();
            let big: String = text
                .lines()
                .enumerate()
                .map(|(i, l)| match i {
                    0 => format!("{l}\n"),
                    _ => {
                        let f: Vec<&str> = l.split(',').collect();
                        format!("{},{}e300,{}\n", f[0], i, f.get(2).unwrap_or(&""))
                    }
                })
                .collect();
            std::fs::write(&g, big).unwrap();
        }
    }
    let o = bin(&["report", s(&csv)]);
    assert_eq!(o.status.code(), Some(0), "{o:?}");
    let o = bin(&["report", s(&csv), "--svg", s(&d.path().join("p.svg"))]);
    assert_eq!(o.status.code(), Some(0), "{o:?}");
}

#[test]
fn specs_and_overrides_are_validated_alike() {
    let d = tempfile::tempdir().unwrap();
    let spec = |name: &str, body: &str| {
        let p = d.path().join(name);
        std::fs::write(&p, format!("name = \"t\"\nhz = [250]\n{body}\n")).unwrap();
        p.to_str().unwrap().to_string()
    };
    let dup_arch = spec(
        "a.toml",
        "arches = [\"x86_64\", \"x86_64\"]\nsizes = [\"8GiB\"]",
    );
    let dup_size = spec(
        "s.toml",
        "arches = [\"x86_64\"]\nsizes = [\"2TiB\", \"2048GiB\"]",
    );
    let neg = spec("n.toml", "arches = [\"x86_64\"]\nsizes = [-1]");
    let huge = spec("h.toml", "arches = [\"x86_64\"]\nsizes = [\"16777215TiB\"]");
    // mkfs -I 512 would run while the row records inode_size 256.
    let owned = spec(
        "i.toml",
        "arches = [\"x86_64\"]\nsizes = [\"64GiB\"]\nmkfs-args = [\"-I\", \"512\"]",
    );
    // The EC2 table's own error says its `[provider-config.ec2]` once.
    let expiry = spec(
        "e.toml",
        "provider = \"ec2\"\narches = [\"x86_64\"]\nsizes = [\"8GiB\"]\n[provider-config.ec2]\nexpiry = \"10s\"",
    );
    let out = d.path().join("res");
    let o = s(&out);
    for (args, needle) in [
        (vec!["plan", &dup_arch], "arches: `x86_64` is listed twice"),
        (vec!["plan", &dup_size], "sizes: `2TiB` is listed twice"),
        (
            vec!["plan", &neg],
            "sizes: -1 is negative; write a size like \"64GiB\"",
        ),
        (
            vec!["plan", &owned],
            "mkfs-args: `-I` sets what the knob inode-size owns, and the row would record the default: set it as [knobs] inode-size = N instead",
        ),
        (
            vec!["plan", &huge],
            "sizes: 16777215TiB is too large; use at most 1024TiB",
        ),
        (
            vec!["plan", &expiry],
            "error: [provider-config.ec2]: expiry 10s is under a minute",
        ),
        (
            vec!["run", "quick", "--repetitions", "0", "--out", o],
            "repetitions: use 1 to 100",
        ),
        (
            vec!["plan", "quick", "--repetitions", "4294967295"],
            "repetitions: use 1 to 100",
        ),
        (
            vec!["plan", "quick", "--concurrency", "100000"],
            "from 1 to 1024",
        ),
        (
            vec!["plan", "quick", "--estimate-after", "100000000000"],
            "estimate-after: use at most 8388608",
        ),
        (
            vec!["run", "quick", "--boot-timeout", "0", "--out", o],
            "--boot-timeout: use 1 to 86400",
        ),
    ] {
        refused(d.path(), &args, 2, needle);
    }
}

#[test]
fn a_source_flag_cannot_inject_spec_keys() {
    let o = bin(&[
        "plan",
        "--arch",
        "x86_64",
        "--hz",
        "250",
        "--variant",
        "fix",
        "--size",
        "8GiB",
        "--source",
        "/x\"]\nrepetitions = 7\nsources = [\"debian-6.1",
    ]);
    // The flag is one source path (plan does not need it to exist yet; run
    // refuses it): one cell, not the 7 repetitions it tried to add.
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(0), "{o:?}");
    assert!(
        out.starts_with("run cell-") && out.contains(" 1 cells,"),
        "{out}"
    );
}

#[test]
fn bad_output_places_are_refused_before_the_banner() {
    let d = tempfile::tempdir().unwrap();
    let csv = run_copy(d.path());
    let file = d.path().join("file");
    std::fs::write(&file, "x").unwrap();
    for (out, needle) in [
        (s(&file), "is not a folder"),
        ("/dev/null", "is not a folder"),
        ("/proc/x", "kernel pseudo filesystem"),
        ("/sys/x", "kernel pseudo filesystem"),
    ] {
        refused(d.path(), &["run", "quick", "--out", out], 2, needle);
    }
    refused(
        d.path(),
        &["report", s(&csv), "--out", s(d.path())],
        2,
        "is a folder; name a file",
    );
    let no_dir = d.path().join("no/r.svg");
    refused(
        d.path(),
        &["report", s(&csv), "--svg", s(&no_dir)],
        2,
        "does not exist; create it first",
    );
    refused(
        d.path(),
        &[
            "kernel",
            "build",
            "--arch",
            "x86_64",
            "--hz",
            "250",
            "--variant",
            "fix",
            "--config",
            "/nonexistent",
            "--cache-dir",
            s(&d.path().join("cache")),
        ],
        2,
        "--config /nonexistent: not a file",
    );
}

/// `args` with a deadline: the output, or a panic naming the hang (the
/// child is killed first).
fn bin_within(args: &[&str], secs: u64) -> Output {
    use std::process::Stdio;
    let mut child = Command::new(env!("CARGO_BIN_EXE_lazyinit-bench"))
        .args(args)
        .env_remove("RUST_LOG")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let t = std::time::Instant::now();
    while child.try_wait().unwrap().is_none() {
        if t.elapsed().as_secs() >= secs {
            child.kill().unwrap();
            child.wait().unwrap();
            panic!("{args:?} did not end within {secs} s");
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    child.wait_with_output().unwrap()
}

/// Issue 41: a finite but absurd `lazyinit_s` (1.7e308: the plot range
/// overflowed and `report --svg` never ended, leaving `.tmp` files) is
/// refused where the CSV is read, with the file and line; so are absurd
/// thresholds.
#[test]
fn absurd_finite_values_and_thresholds_are_refused() {
    let d = tempfile::tempdir().unwrap();
    let cand = run_copy(d.path());
    let svg = d.path().join("plot.svg");
    for (v, needle) in [
        (
            "1.7e308",
            ":2: column `lazyinit_s`: 1.7e308 is not a measurement (at most 1e9 s",
        ),
        (
            "1e10",
            ":2: column `lazyinit_s`: 1e10 is not a measurement (at most 1e9 s",
        ),
    ] {
        with_first_lazyinit(&cand, v);
        let before = tree(d.path());
        for args in [
            vec!["report", s(&cand), "--svg", s(&svg)],
            vec!["report", s(&cand)],
            vec!["replay", s(&cand)],
        ] {
            let o = bin_within(&args, 60);
            assert_eq!(o.status.code(), Some(2), "{args:?}: {o:?}");
            let line = error_line(&o);
            assert!(line.contains(needle), "{args:?}: {line}");
            assert_eq!(
                tree(d.path()),
                before,
                "{args:?} changed the folder (a .tmp left?)"
            );
        }
    }
    for v in ["inf", "nan", "-1", "1e300"] {
        let db = format!("sqlite:{}", d.path().join("h.db").display());
        let flag = format!("--min-change-pct={v}");
        let o = bin_within(&["history", "changes", "--db", &db, &flag], 30);
        assert_eq!(o.status.code(), Some(2), "{v}: {o:?}");
        let line = error_line(&o);
        assert!(line.contains("--min-change-pct"), "{v}: {line}");
    }
}

/// Issue 41: a results.csv or spec.toml that is a FIFO (the read blocked
/// forever), /dev/zero (read until out of memory) or larger than its bound
/// is refused from its metadata, before it is read: one line, exit 2.
#[test]
fn inputs_that_are_not_bounded_regular_files_are_refused_before_reading() {
    let d = tempfile::tempdir().unwrap();
    let fifo = d.path().join("results.csv");
    assert!(Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap()
        .success());
    let big = d.path().join("big.csv");
    let f = std::fs::File::create(&big).unwrap();
    f.set_len((256 << 20) + 1).unwrap();
    drop(f);
    let toml = d.path().join("spec.toml");
    assert!(Command::new("mkfifo")
        .arg(&toml)
        .status()
        .unwrap()
        .success());
    let bigtoml = d.path().join("big.toml");
    std::fs::File::create(&bigtoml)
        .unwrap()
        .set_len((1 << 20) + 1)
        .unwrap();
    let base = fixture("qemu-64g/results.csv");
    for (p, needle) in [
        (fifo.as_path(), "a FIFO, not a regular file"),
        (
            Path::new("/dev/zero"),
            "a character device, not a regular file",
        ),
        (
            big.as_path(),
            "268435457 bytes, more than the 256 MiB a results file may have",
        ),
    ] {
        for args in [
            vec!["report", s(p)],
            vec!["report", s(p), "--svg", s(&d.path().join("p.svg"))],
            vec!["replay", s(p)],
            vec!["compare", "--baseline", s(&base), "--candidate", s(p)],
        ] {
            let before = tree_no_read(d.path());
            let o = bin_within(&args, 30);
            assert_eq!(o.status.code(), Some(2), "{args:?}: {o:?}");
            let line = error_line(&o);
            assert!(line.contains(needle), "{args:?}: {line}");
            assert_eq!(
                tree_no_read(d.path()),
                before,
                "{args:?} changed the folder"
            );
        }
    }
    for (p, needle) in [
        (toml.as_path(), "a FIFO, not a regular file"),
        (
            Path::new("/dev/zero"),
            "a character device, not a regular file",
        ),
        (
            bigtoml.as_path(),
            "1048577 bytes, more than the 1 MiB a spec may have",
        ),
    ] {
        let o = bin_within(&["plan", s(p)], 30);
        assert_eq!(o.status.code(), Some(2), "{p:?}: {o:?}");
        let line = error_line(&o);
        assert!(line.contains(needle), "{p:?}: {line}");
    }
}

/// Every entry under `dir` by kind and length, without reading any (a FIFO
/// must not be opened).
fn tree_no_read(dir: &Path) -> BTreeMap<PathBuf, String> {
    let mut out = BTreeMap::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        let m = std::fs::symlink_metadata(&p).unwrap();
        out.insert(p, format!("{:?} {}", m.file_type(), m.len()));
    }
    out
}

/// Issue 52: a results folder of an older harness (results.csv with other
/// columns: the committed results/reported-6.1-n3 has 37) as `run --out`
/// is bad input, one short line saying to give another --out, and the
/// folder left byte for byte (no `.lock`). It was exit 3 with the whole
/// expected header in the line, and a `.lock` made in the folder.
#[test]
fn an_older_harness_results_folder_as_run_out_is_refused_untouched() {
    let d = tempfile::tempdir().unwrap();
    let old = d.path().join("old");
    std::fs::create_dir(&old).unwrap();
    let committed = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../results/reported-6.1-n3");
    for f in ["results.csv", "command.txt"] {
        std::fs::copy(committed.join(f), old.join(f)).unwrap();
    }
    let before = tree(d.path());
    let o = bin(&["run", "quick", "--out", s(&old)]);
    assert_eq!(o.status.code(), Some(2), "{o:?}");
    let line = error_line(&o);
    assert!(
        line.contains("a results folder of another harness (its results.csv has 37 columns")
            && line.contains("give another --out"),
        "{line}"
    );
    assert!(line.len() < 300, "one short line: {line}");
    assert!(!old.join(".lock").exists(), "a .lock was left");
    assert_eq!(tree(d.path()), before);
    refused(
        d.path(),
        &["run", "quick", "--out", s(&old)],
        2,
        "a results folder of another harness",
    );
}

/// Issue 52: `knobs = [512]` (a list where `[knobs]` is a table) was
/// taken and dropped; refused naming it, with what to write.
#[test]
fn knobs_as_a_list_is_refused_saying_it_is_a_table() {
    let d = tempfile::tempdir().unwrap();
    let spec = d.path().join("k.toml");
    std::fs::write(
        &spec,
        "name = \"t\"\nhz = [250]\narches = [\"x86_64\"]\nsizes = [\"8GiB\"]\nknobs = [512]\n",
    )
    .unwrap();
    let out = d.path().join("res");
    for args in [
        vec!["plan", s(&spec)],
        vec!["run", s(&spec), "--out", s(&out)],
    ] {
        refused(
            d.path(),
            &args,
            2,
            "line 5: knobs: is a table, not a list or a value: write `[knobs]` on a line of its own",
        );
    }
}

/// `run` in a scratch home (its cache and state folders under `home`,
/// made by nothing else), ended within `secs` (its whole process group
/// killed first, then a panic naming the hang).
fn run_within(home: &Path, args: &[&str], secs: u64) -> Output {
    use std::os::unix::process::CommandExt;
    use std::process::Stdio;
    let mut child = Command::new(env!("CARGO_BIN_EXE_lazyinit-bench"))
        .args(args)
        .env_remove("RUST_LOG")
        .env_remove("LAZYINIT_HISTORY")
        .env("HOME", home)
        .env("LAZYINIT_CACHE_DIR", home.join("cache"))
        .env("LAZYINIT_STATE_DIR", home.join("state"))
        .process_group(0)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let t = std::time::Instant::now();
    while child.try_wait().unwrap().is_none() {
        if t.elapsed().as_secs() >= secs {
            let _ = nix::sys::signal::killpg(
                nix::unistd::Pid::from_raw(child.id() as i32),
                nix::sys::signal::Signal::SIGKILL,
            );
            child.wait().unwrap();
            panic!("{args:?} did not end within {secs} s (the run started)");
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    child.wait_with_output().unwrap()
}

/// Issue 52: `run --history` opens the history before anything runs: a
/// history that is not one or whose folder is missing is exit 2, an
/// unreachable server exit 3, each one line, with no results folder, no
/// cache or state folder and no history file left (the scratch folder as
/// it was). Before, the run started (each cell's import failing into the
/// log) and exited 0.
#[test]
fn run_history_is_opened_before_anything_runs() {
    let d = tempfile::tempdir().unwrap();
    let notes = d.path().join("notes.txt");
    std::fs::write(&notes, "mine\n").unwrap();
    let out = d.path().join("res");
    let missing = format!("sqlite:{}", d.path().join("nofolder/h.sqlite").display());
    let text = format!("sqlite:{}", notes.display());
    let missing_said = format!("--history {missing}: its folder");
    let text_said = format!("--history {text}: not a SQLite database");
    for (url, code, needle) in [
        (missing.as_str(), 2, missing_said.as_str()),
        (text.as_str(), 2, text_said.as_str()),
        (
            "postgres://u@127.0.0.1:1/h?connect_timeout=2",
            3,
            "cannot connect to postgres://u@127.0.0.1:1/h",
        ),
    ] {
        let before = tree(d.path());
        let o = run_within(
            d.path(),
            &["run", "quick", "--out", s(&out), "--history", url],
            30,
        );
        assert_eq!(o.status.code(), Some(code), "{url}: {o:?}");
        let line = error_line(&o);
        assert!(line.contains(needle), "{url}: {line}");
        assert!(
            !String::from_utf8_lossy(&o.stderr).contains("results in"),
            "{url}: the run's banner was printed"
        );
        assert_eq!(tree(d.path()), before, "{url} left something");
    }
}

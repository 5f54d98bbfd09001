//! Issue 52: the evidence files of a run folder are the outputs of nothing
//! but the harness's run (merge, bisect). Every command that writes, as the
//! CLI lists them (`--help`), is given each evidence file of a run folder
//! (every name `lazyinit_core::RunFolder` and `CellFolder` say is evidence,
//! each made when the committed run lacks it), a new file inside a cell
//! folder or an evidence folder, and results.csv or events.jsonl through a
//! symlink, `..`, `/proc/self/cwd` and a hard link, as its output. Each
//! must exit 2 (`bisect-step`: 255, git's abort) with one line that names
//! the output and why, and leave the scratch folder byte for byte as it
//! was. Before, `history publish --save-data RUN/results.csv` replaced the
//! run's rows, `history check RUN --out RUN/events.jsonl` its event log.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use lazyinit_core::testing::git_ok;
use lazyinit_core::{CellFolder, RunFolder};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn cli(args: &[String], dir: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_lazyinit-bench"))
        .args(args)
        .current_dir(dir)
        .env("LAZYINIT_CACHE_DIR", dir.join("cache"))
        .env("LAZYINIT_STATE_DIR", dir.join("state"))
        .env_remove("LAZYINIT_HISTORY")
        .output()
        .unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        if e.file_type().unwrap().is_dir() {
            copy_tree(&e.path(), &to.join(e.file_name()));
        } else {
            std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
        }
    }
}

/// Every entry under `dir`: a file's bytes, a link's target, a folder.
fn snapshot(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut all = BTreeMap::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            let m = std::fs::symlink_metadata(&p).unwrap();
            let v = if m.file_type().is_symlink() {
                format!("link {}", std::fs::read_link(&p).unwrap().display()).into_bytes()
            } else if m.is_dir() {
                todo.push(p.clone());
                b"dir".to_vec()
            } else {
                std::fs::read(&p).unwrap()
            };
            all.insert(p.strip_prefix(dir).unwrap().to_path_buf(), v);
        }
    }
    all
}

/// The flags whose value a command writes: files, folders, histories.
const OUTPUT_FLAGS: &[&str] = &["--out", "--svg", "--save-data", "--db", "--history"];

/// The names listed under `Commands:` in `lazyinit-bench ARGS --help`.
fn subcommands(args: &[&str], dir: &Path) -> Vec<String> {
    let mut a: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    a.push("--help".into());
    let help = text(&cli(&a, dir).stdout);
    help.lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| !l.trim().is_empty())
        .filter_map(|l| l.split_whitespace().next())
        .filter(|n| *n != "help")
        .map(str::to_string)
        .collect()
}

/// Every command of the CLI with each flag of it that names an output:
/// `("history check", "--out")`.
fn commands_that_write(dir: &Path) -> BTreeSet<(String, String)> {
    let mut commands: Vec<Vec<String>> = Vec::new();
    for top in subcommands(&[], dir) {
        let subs = subcommands(&[&top], dir);
        match subs.is_empty() {
            true => commands.push(vec![top]),
            false => commands.extend(subs.into_iter().map(|s| vec![top.clone(), s])),
        }
    }
    let mut found = BTreeSet::new();
    for c in commands {
        let mut a = c.clone();
        a.push("--help".into());
        let help = text(&cli(&a, dir).stdout);
        for l in help.lines() {
            let flag = l
                .split_whitespace()
                .find(|w| w.starts_with("--"))
                .map(|w| w.trim_end_matches(','));
            if let Some(f) = flag.filter(|f| OUTPUT_FLAGS.contains(f)) {
                if l.trim_start().starts_with(f) || l.trim_start().starts_with('-') {
                    found.insert((c.join(" "), f.to_string()));
                }
            }
        }
    }
    found
}

struct Scratch {
    _tmp: tempfile::TempDir,
    root: PathBuf,
}

impl Scratch {
    fn p(&self, rel: &str) -> PathBuf {
        self.root.join(rel)
    }
    fn s(&self, rel: &str) -> String {
        self.p(rel).display().to_string()
    }
}

/// The run `v` (the committed unsharded quick run, imported into the
/// history `db/h.sqlite`, then given every evidence file it lacks), two
/// shards to merge, a kernel tree of three commits to bisect.
fn scratch() -> Scratch {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().canonicalize().unwrap();
    let q = repo().join("results/quick-shards");
    copy_tree(&q.join("unsharded"), &root.join("v"));
    copy_tree(&q.join("shard-1-of-2"), &root.join("s1"));
    copy_tree(&q.join("shard-2-of-2"), &root.join("s2"));
    for d in ["db", "links", "elsewhere", "src"] {
        std::fs::create_dir_all(root.join(d)).unwrap();
    }
    let s = Scratch { _tmp: tmp, root };
    let db = format!("sqlite:{}", s.s("db/h.sqlite"));
    let o = cli(
        &["history", "import", "--db", &db, "v"].map(String::from),
        &s.root,
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let src = s.p("src");
    git_ok(&src, &["init", "-q"]);
    for n in ["one", "two", "three"] {
        std::fs::write(src.join("f"), n).unwrap();
        git_ok(&src, &["add", "f"]);
        git_ok(&src, &["commit", "-qm", n]);
    }
    s
}

/// Each evidence file of `v` (made when missing), a new file inside a
/// cell folder and in each evidence folder, and results.csv and
/// events.jsonl reached another way: each as the user would type it.
fn evidence_outputs(s: &Scratch) -> Vec<String> {
    let v = RunFolder::new(s.p("v"));
    let cell = std::fs::read_dir(v.root())
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| CellFolder::is_cell_folder(p))
        .unwrap();
    let mut outs = Vec::new();
    let mut put = |p: PathBuf, what: &str| {
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        if !p.exists() {
            std::fs::write(&p, format!("evidence: {what}\n")).unwrap();
        }
        outs.push(p.display().to_string());
    };
    let run_names: Vec<_> = RunFolder::NAMES
        .iter()
        .filter(|n| RunFolder::is_evidence(**n))
        .collect();
    assert!(run_names.len() >= 10, "{run_names:?}");
    for n in run_names {
        put(v.root().join(n.to_string()), &n.to_string());
    }
    assert!(CellFolder::NAMES.len() >= 10);
    for n in CellFolder::NAMES {
        put(cell.join(n.to_string()), &n.to_string());
    }
    for d in RunFolder::EVIDENCE_DIRS {
        put(
            v.root().join(d.to_string()).join("x").join("command.txt"),
            "x",
        );
    }
    let mut outs = outs;
    outs.push(cell.join("new-output.txt").display().to_string());
    outs.push(v.root().join("shards/new-output.txt").display().to_string());
    let link = s.p("links/events");
    std::os::unix::fs::symlink(v.root().join("events.jsonl"), &link).unwrap();
    outs.push(link.display().to_string());
    outs.push(cell.join("../events.jsonl").display().to_string());
    outs.push("/proc/self/cwd/v/results.csv".into());
    let hard = s.p("elsewhere/hard.txt");
    std::fs::hard_link(v.root().join("results.csv"), &hard).unwrap();
    outs.push(hard.display().to_string());
    outs
}

/// The command line of `command` with `out` as its output `flag`, and the
/// exit code a refusal gives.
fn invocation(s: &Scratch, command: &str, flag: &str, out: &str) -> (Vec<String>, i32) {
    let db = format!("sqlite:{}", s.s("db/h.sqlite"));
    let csv = s.s("v/results.csv");
    let outdb = format!("sqlite:{out}");
    let site = s.s("site");
    let bisect = |step: &str| {
        let src = s.s("src");
        vec![
            step,
            "--source",
            &src,
            "--good",
            "HEAD~2",
            "--bad",
            "HEAD",
            "--cell",
            "arm64:100:8GiB",
            "--out",
            out,
        ]
        .into_iter()
        .map(String::from)
        .collect::<Vec<_>>()
    };
    let a: Vec<String> = match (command, flag) {
        ("report", "--out") => ["report", &csv, "--out", out].map(String::from).to_vec(),
        ("report", "--svg") => ["report", &csv, "--svg", out].map(String::from).to_vec(),
        ("compare", "--out") => [
            "compare",
            "--baseline",
            &csv,
            "--candidate",
            &csv,
            "--out",
            out,
        ]
        .map(String::from)
        .to_vec(),
        ("replay", "--out") => ["replay", &csv, "--out", out].map(String::from).to_vec(),
        ("merge", "--out") => ["merge", "s1", "s2", "--out", out]
            .map(String::from)
            .to_vec(),
        // An invalid timeout after the output's check: never a guest.
        ("run", "--out") => ["run", "--out", out, "--boot-timeout", "0"]
            .map(String::from)
            .to_vec(),
        ("run", "--history") => ["run", "--history", &outdb, "--boot-timeout", "0"]
            .map(String::from)
            .to_vec(),
        ("bisect", "--out") => bisect("bisect"),
        ("bisect-step", "--out") => return (bisect("bisect-step"), 255),
        ("history check", "--out") => ["history", "check", "v", "--db", &db, "--out", out]
            .map(String::from)
            .to_vec(),
        ("history publish", "--save-data") => [
            "history",
            "publish",
            "--db",
            &db,
            "--out",
            &site,
            "--save-data",
            out,
        ]
        .map(String::from)
        .to_vec(),
        ("history publish", "--out") => ["history", "publish", "--db", &db, "--out", out]
            .map(String::from)
            .to_vec(),
        ("history import", "--db") => ["history", "import", "--db", &outdb, "v"]
            .map(String::from)
            .to_vec(),
        ("history show", "--db") | ("history changes", "--db") => {
            let c = command.split(' ').nth(1).unwrap();
            ["history", c, "--db", &outdb].map(String::from).to_vec()
        }
        ("history check", "--db") => ["history", "check", "v", "--db", &outdb]
            .map(String::from)
            .to_vec(),
        ("history ack", "--db") => ["history", "ack", "--db", &outdb, "0123abcd", "--note", "n"]
            .map(String::from)
            .to_vec(),
        ("history publish", "--db") => ["history", "publish", "--db", &outdb, "--out", &site]
            .map(String::from)
            .to_vec(),
        ("history generate", "--db") => ["history", "generate", "--db", &outdb, "--runs", "1"]
            .map(String::from)
            .to_vec(),
        (c, f) => panic!("`{c} {f}` writes and is not walked here: add it to `invocation`"),
    };
    (a, 2)
}

#[test]
fn no_command_writes_over_or_into_a_runs_evidence() {
    let s = scratch();
    let mut walked = commands_that_write(&s.root);
    // Listed by the CLI: a new command that writes must be walked here.
    for c in [
        "report --out",
        "report --svg",
        "history check --out",
        "merge --out",
    ] {
        let (c, f) = c.rsplit_once(' ').unwrap();
        assert!(
            walked.contains(&(c.into(), f.into())),
            "{c} {f}: {walked:?}"
        );
    }
    assert!(walked.len() >= 15, "{walked:?}");
    // Hidden from --help, and it writes a history.
    walked.insert(("history generate".into(), "--db".into()));
    // KCIDB is `report --out` in another format: walked too.
    // The outputs issue 52 found replaced first; folder outputs (whose
    // commands, unchecked, would go on to build and boot) last.
    let first = [
        "history publish --save-data",
        "history check --out",
        "report --out",
        "report --svg",
    ];
    let folders = [
        "merge --out",
        "run --out",
        "bisect --out",
        "bisect-step --out",
        "history publish --out",
    ];
    let mut walked: Vec<_> = walked.into_iter().collect();
    walked.sort_by_key(|(c, f)| {
        let k = format!("{c} {f}");
        let at = first.iter().position(|x| *x == k).unwrap_or(first.len());
        (folders.contains(&k.as_str()), at, k)
    });
    let outs = evidence_outputs(&s);
    let before = snapshot(&s.root);
    let mut runs = 0;
    for out in &outs {
        for (command, flag) in &walked {
            let (mut args, code) = invocation(&s, command, flag, out);
            let mut all = vec![args.clone()];
            if command == "report" && flag == "--out" {
                args.splice(1..1, ["--format".to_string(), "kcidb".to_string()]);
                all.push(args);
            }
            for args in all {
                let o = cli(&args, &s.root);
                let err = text(&o.stderr);
                let shown = args.join(" ");
                assert_eq!(o.status.code(), Some(code), "{shown}: {err}");
                let lines: Vec<&str> = err.trim_end().lines().collect();
                let line = match code {
                    // bisect-step adds its note on aborting git bisect run.
                    255 => lines.iter().find(|l| l.starts_with("error:")).copied(),
                    _ => (lines.len() == 1).then(|| lines[0]),
                };
                let line = line.unwrap_or_else(|| panic!("{shown}: not one error line: {err}"));
                let out_shown = out.trim_start_matches("sqlite:");
                assert!(
                    line.starts_with("error: ") && line.contains(out_shown),
                    "{shown}: {line}"
                );
                assert!(
                    [
                        "a run's evidence",
                        "is the input",
                        "which this command reads",
                        "hard links"
                    ]
                    .iter()
                    .any(|w| line.contains(w)),
                    "{shown}: {line}"
                );
                let after = snapshot(&s.root);
                if after != before {
                    let changed: Vec<_> = before
                        .keys()
                        .chain(after.keys())
                        .filter(|p| before.get(*p) != after.get(*p))
                        .collect();
                    panic!("{shown}: changed {changed:?}");
                }
                runs += 1;
            }
        }
    }
    assert!(runs >= outs.len() * 15, "{runs}");
}

/// Two outputs of one command that are one file are refused: the plot
/// would replace the report.
#[test]
fn two_outputs_of_one_command_are_never_one_file() {
    let s = scratch();
    let csv = s.s("v/results.csv");
    std::fs::write(s.p("elsewhere/r.md"), "mine\n").unwrap();
    std::fs::hard_link(s.p("elsewhere/r.md"), s.p("elsewhere/r2.md")).unwrap();
    std::fs::write(s.p("elsewhere/x.svg"), "mine\n").unwrap();
    std::os::unix::fs::symlink("x.svg", s.p("elsewhere/link.svg")).unwrap();
    let before = snapshot(&s.root);
    for (out, svg) in [
        ("elsewhere/x.svg", "elsewhere/x.svg"),
        ("elsewhere/x.svg", "elsewhere/../elsewhere/x.svg"),
        ("elsewhere/x.svg", "elsewhere/link.svg"),
        ("elsewhere/x-cycles.svg", "elsewhere/x.svg"),
        ("elsewhere/r.md", "elsewhere/r2.md"),
    ] {
        let args = ["report", &csv, "--out", out, "--svg", svg].map(String::from);
        let o = cli(&args, &s.root);
        let err = text(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{out} {svg}: {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{out} {svg}: {err}");
        assert!(err.contains("are the same file"), "{out} {svg}: {err}");
        assert_eq!(snapshot(&s.root), before, "{out} {svg}");
    }
}

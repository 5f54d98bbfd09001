//! Issue 41: no command writes over what it reads. Every command that
//! writes is given each of its inputs (named or implied: results.csv,
//! spec.toml, a cell's groups.csv.gz, the history database, a shard nested
//! in the output, the source tree) as its output, directly, through a
//! symlink and through `..`; each must exit 2 with one line on stderr, and
//! the scratch folder must be byte for byte what it was (no input touched,
//! no temporary file left).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

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
                let t = std::fs::read_link(&p).unwrap();
                format!("link {}", t.display()).into_bytes()
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

/// A scratch folder: the committed quick-shards run (two shards, their
/// merge with its cells' groups.csv.gz, the unsharded run), a SQLite
/// history holding the unsharded run, and a links/ folder.
struct Scratch {
    _tmp: tempfile::TempDir,
    root: PathBuf,
    links: usize,
}

impl Scratch {
    fn new() -> Self {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().canonicalize().unwrap();
        copy_tree(&repo().join("results/quick-shards"), &root.join("q"));
        std::fs::create_dir_all(root.join("db")).unwrap();
        std::fs::create_dir_all(root.join("links")).unwrap();
        let s = Scratch {
            _tmp: tmp,
            root,
            links: 0,
        };
        let o = cli(
            &args(&["history", "import", "--db", &s.db_url(), "q/unsharded"]),
            &s.root,
        );
        assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
        s
    }

    fn db(&self) -> PathBuf {
        self.root.join("db/h.sqlite")
    }

    fn db_url(&self) -> String {
        format!("sqlite:{}", self.db().display())
    }

    fn p(&self, rel: &str) -> PathBuf {
        self.root.join(rel)
    }

    /// A cell folder of a run folder (with its groups.csv.gz).
    fn cell(&self, run: &str) -> PathBuf {
        std::fs::read_dir(self.p(run))
            .unwrap()
            .map(|e| e.unwrap().path())
            .find(|p| p.join("groups.csv.gz").is_file())
            .unwrap()
    }

    /// `input` named directly, through a new symlink, and through `..`.
    fn three_ways(&mut self, input: &Path) -> Vec<PathBuf> {
        self.links += 1;
        let link = self.root.join(format!("links/l{}", self.links));
        std::os::unix::fs::symlink(input, &link).unwrap();
        // dir/../<dir's name>/<name>
        let parent = input.parent().unwrap();
        let dotdot = parent
            .join("..")
            .join(parent.file_name().unwrap())
            .join(input.file_name().unwrap());
        vec![input.to_path_buf(), link, dotdot]
    }
}

fn args(a: &[&str]) -> Vec<String> {
    a.iter().map(|s| s.to_string()).collect()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Runs `command` with `out` as its output: exit 2, one line, and the
/// scratch folder unchanged.
fn refused(s: &Scratch, command: &[String], out: &Path) -> String {
    let before = snapshot(&s.root);
    let o = cli(command, &s.root);
    let err = text(&o.stderr);
    let shown = format!("{} (out {})", command.join(" "), out.display());
    assert_eq!(o.status.code(), Some(2), "{shown}: {err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{shown}: {err}");
    let after = snapshot(&s.root);
    for (p, v) in &before {
        assert!(after.get(p) == Some(v), "{shown}: {} changed", p.display());
    }
    for p in after.keys() {
        assert!(before.contains_key(p), "{shown}: {} left", p.display());
    }
    err
}

/// Each of `inputs`, three ways, as the output `flag` of `command`.
fn walk(s: &mut Scratch, inputs: &[PathBuf], command: &[&str], flag: &str) {
    for input in inputs {
        for out in s.three_ways(input) {
            let mut c = args(command);
            c.push(flag.to_string());
            c.push(out.display().to_string());
            refused(s, &c, &out);
        }
    }
}

#[test]
fn history_check_never_writes_over_the_run_or_the_history() {
    let mut s = Scratch::new();
    let run = s.p("q/unsharded");
    let inputs = vec![
        run.join("results.csv"),
        run.join("spec.toml"),
        s.cell("q/unsharded").join("groups.csv.gz"),
        s.db(),
    ];
    let url = s.db_url();
    let run = run.display().to_string();
    walk(
        &mut s,
        &inputs,
        &["history", "check", &run, "--db", &url],
        "--out",
    );
}

/// The kernel config a run's spec names is an input of the check (its
/// content is in the run's key). Seen written over: the guard did not
/// know it.
#[test]
fn history_check_never_writes_over_the_runs_kernel_config() {
    let mut s = Scratch::new();
    copy_tree(&s.p("q/unsharded"), &s.p("q/kc"));
    let cfg = s.p("q/my.config");
    std::fs::write(&cfg, "CONFIG_EXT4_FS=y\n").unwrap();
    let spec = s.p("q/kc/spec.toml");
    let was = std::fs::read_to_string(&spec).unwrap();
    let with = format!("kernel-config = \"{}\"\n{was}", cfg.display());
    std::fs::write(&spec, with).unwrap();
    let url = s.db_url();
    let run = s.p("q/kc").display().to_string();
    for out in s.three_ways(&cfg) {
        let o = out.display().to_string();
        let c = args(&["history", "check", &run, "--db", &url, "--out", &o]);
        let err = refused(&s, &c, &out);
        assert!(err.contains("is the input"), "{o}: {err}");
    }
}

#[test]
fn history_publish_never_writes_over_the_history_or_a_tree_it_does_not_own() {
    let mut s = Scratch::new();
    let url = s.db_url();
    let site = s.p("site").display().to_string();
    // --save-data onto the database (and its folder: a folder is refused).
    let db = s.db();
    walk(
        &mut s,
        std::slice::from_ref(&db),
        &["history", "publish", "--db", &url, "--out", &site],
        "--save-data",
    );
    // --out the database, the folder holding it, a run folder.
    let inputs = vec![db.clone(), s.p("db"), s.p("q/unsharded")];
    walk(
        &mut s,
        &inputs,
        &["history", "publish", "--db", &url],
        "--out",
    );
    // From saved data: --out the folder holding it.
    let data = s.p("db/site.json");
    std::fs::write(&data, "{}").unwrap();
    let d = data.display().to_string();
    let holder = s.p("db");
    walk(
        &mut s,
        &[holder],
        &["history", "publish", "--data", &d],
        "--out",
    );
}

#[test]
fn merge_never_writes_over_a_shard_or_a_folder_it_does_not_own() {
    let mut s = Scratch::new();
    // An earlier merge with the shards then moved into it (m/s1, m/s2).
    let m = s.p("m");
    let o = cli(
        &args(&[
            "merge",
            "q/shard-1-of-2",
            "q/shard-2-of-2",
            "--out",
            m.to_str().unwrap(),
        ]),
        &s.root,
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    copy_tree(&s.p("q/shard-1-of-2"), &m.join("s1"));
    copy_tree(&s.p("q/shard-2-of-2"), &m.join("s2"));
    let (s1, s2) = (m.join("s1"), m.join("s2"));
    let (a, b) = (s1.display().to_string(), s2.display().to_string());
    let inputs = vec![m.clone(), s1.clone(), s.p("q/unsharded")];
    walk(&mut s, &inputs, &["merge", &a, &b], "--out");
}

#[test]
fn report_compare_replay_and_kcidb_never_write_over_a_run() {
    let mut s = Scratch::new();
    let run = s.p("q/merged");
    let csv = run.join("results.csv");
    let inputs = vec![
        csv.clone(),
        run.join("spec.toml"),
        s.cell("q/merged").join("groups.csv.gz"),
    ];
    let c = csv.display().to_string();
    let other = s.p("q/unsharded/results.csv").display().to_string();
    walk(&mut s, &inputs, &["report", &c], "--out");
    walk(&mut s, &inputs, &["report", &c], "--svg");
    walk(&mut s, &inputs, &["replay", &c], "--out");
    walk(
        &mut s,
        &inputs,
        &["compare", "--baseline", &other, "--candidate", &c],
        "--out",
    );
    walk(
        &mut s,
        &inputs,
        &["report", "--format", "kcidb", &c],
        "--out",
    );
}

#[test]
fn bisect_never_writes_into_the_source_or_a_folder_it_does_not_own() {
    let mut s = Scratch::new();
    let src = s.p("src");
    std::fs::create_dir_all(src.join("sub")).unwrap();
    let git = |a: &[&str]| {
        let o = Command::new("git")
            .args(["-c", "user.name=t", "-c", "user.email=t@t"])
            .args(a)
            .current_dir(&src)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", text(&o.stderr));
    };
    git(&["init", "-q"]);
    for n in ["one", "two", "three"] {
        std::fs::write(src.join("sub").join(n), n).unwrap();
        git(&["add", "."]);
        git(&["commit", "-qm", n]);
    }
    let source = src.display().to_string();
    let inputs = vec![src.clone(), src.join("sub"), s.p("q/unsharded")];
    walk(
        &mut s,
        &inputs,
        &[
            "bisect",
            "--source",
            &source,
            "--good",
            "HEAD~2",
            "--bad",
            "HEAD",
            "--cell",
            "arm64:100:8GiB",
        ],
        "--out",
    );
}

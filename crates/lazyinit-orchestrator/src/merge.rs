//! `merge`: one run folder from the folders of a run's shards
//! (docs/shards.md). Every check comes first (one spec by hash, one
//! harness version, one split, no cell from two shards, no cell missing
//! unless allowed): a refused merge writes nothing. The merged folder is
//! built beside its destination and renamed into place; the shards'
//! folders are only read.

use lazyinit_core::output;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use lazyinit_core::exit::{self, bad_input, ExitError};
use lazyinit_core::results::{ResultRow, ResultsError, Status};
use lazyinit_core::{RunFolder, RunWriter};
use serde::{Deserialize, Serialize};

use crate::record::ShardRecord;
use crate::shard::{split, Shard};
use crate::spec::{ProviderConfigs, Spec};

#[derive(Debug, thiserror::Error)]
pub enum MergeError {
    /// Bad input: the message says which folder and what to do.
    #[error("{0}")]
    Refused(#[from] ExitError),
    #[error("cannot write the merged run {}", .0.display())]
    Write(PathBuf, #[source] std::io::Error),
    #[error("cannot write the merged rows")]
    Rows(#[source] ResultsError),
}

/// A refused shard folder is bad input; a write that failed is the
/// infrastructure's.
impl exit::ExitCode for MergeError {
    fn exit_code(&self) -> u8 {
        match self {
            MergeError::Refused(e) => e.exit_code(),
            MergeError::Write(..) | MergeError::Rows(_) => exit::INFRASTRUCTURE,
        }
    }
}

fn refuse(message: String) -> MergeError {
    MergeError::Refused(bad_input(message))
}

/// One shard's folder, read.
struct Input {
    dir: PathBuf,
    record: ShardRecord,
    spec_text: String,
    rows: Vec<ResultRow>,
    /// Its cell folders' names.
    cell_dirs: BTreeSet<String>,
}

/// `merge.toml`: what the merged run was made of.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct MergeRecord {
    pub run_id: String,
    pub spec_hash: String,
    pub harness_version: String,
    /// The harness's git commit every shard was run by (empty for shards
    /// recorded before it).
    #[serde(default)]
    pub harness_commit: String,
    pub merged_at: String,
    pub shard_count: u32,
    /// Cells of the plan with no ok row in any shard (`--allow-missing`).
    pub missing: Vec<String>,
    pub shards: Vec<MergedShard>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct MergedShard {
    pub shard: Shard,
    /// The folder it was merged from, as given.
    pub from: PathBuf,
    pub hosts: Vec<String>,
    pub rows: usize,
}

/// What a merge made.
#[derive(Debug, Clone)]
pub struct Merged {
    pub out: PathBuf,
    pub record: MergeRecord,
    pub rows: usize,
    /// Cells with an ok row.
    pub cells_ok: usize,
    /// Whether an earlier merge at `out` was replaced.
    pub replaced: bool,
}

/// Merges the shard folders `inputs` into `out`. `command` is recorded in
/// the merged `command.txt`.
pub fn merge<C: ProviderConfigs>(
    inputs: &[PathBuf],
    out: &Path,
    allow_missing: bool,
    command: &str,
) -> Result<Merged, MergeError> {
    if inputs.is_empty() {
        return Err(refuse("give the shard folders to merge".into()));
    }
    let replaced = check_out(out, inputs)?;
    let mut shards = inputs
        .iter()
        .map(|d| load(d))
        .collect::<Result<Vec<_>, _>>()?;
    check_one_run(&shards)?;
    shards.sort_by_key(|s| s.record.shard);
    let first = &shards[0];
    let spec: Spec<C> = toml::from_str(&first.spec_text).map_err(|e| {
        refuse(format!(
            "{}: spec.toml does not read as a spec ({})",
            first.dir.display(),
            exit::one_line_text(e.message())
        ))
    })?;
    let missing = missing_cells(&spec, &shards, allow_missing)?;
    let record = MergeRecord {
        run_id: first.record.run_id.clone(),
        spec_hash: first.record.spec_hash.clone(),
        harness_version: first.record.harness_version.clone(),
        harness_commit: first.record.harness_commit.clone(),
        merged_at: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        shard_count: first.record.shard.count(),
        missing,
        shards: shards
            .iter()
            .map(|s| MergedShard {
                shard: s.record.shard,
                from: s.dir.clone(),
                hosts: s.record.hosts.iter().map(|h| h.hostname.clone()).collect(),
                rows: s.rows.len(),
            })
            .collect(),
    };
    write_atomically(out, &shards, &record, command)?;
    let ok: BTreeSet<&str> = ok_cells(&shards).into_keys().collect();
    Ok(Merged {
        out: out.to_path_buf(),
        rows: shards.iter().map(|s| s.rows.len()).sum(),
        cells_ok: ok.len(),
        record,
        replaced,
    })
}

/// Reads a shard's folder, refusing what is not one or is still written.
fn load(dir: &Path) -> Result<Input, MergeError> {
    let folder = RunFolder::new(dir);
    let shown = dir.display();
    if !dir.is_dir() {
        return Err(refuse(format!("{shown}: no such folder")));
    }
    let record = ShardRecord::read(&folder.shard_toml())
        .map_err(refuse)?
        .ok_or_else(|| {
            refuse(format!(
                "{shown} is not a shard's folder (no {}): run shards with `lazyinit-bench run SPEC --shard K/N`",
                RunFolder::SHARD_TOML
            ))
        })?;
    if let Some(pid) = still_running(&folder) {
        return Err(refuse(format!(
            "{shown}: a run (pid {pid}) is still writing there: wait for it to end, then merge"
        )));
    }
    let spec_text = folder
        .spec_toml()
        .read_to_string()
        .map_err(|e| refuse(format!("{shown}: cannot read its spec.toml: {e}")))?;
    let rows = match folder.results_csv().exists() {
        // As the history imports: a torn last row (a shard killed while
        // writing it) is refused, never merged as a measurement.
        true => folder.results_csv().untorn_rows().map_err(|e| {
            refuse(match e {
                lazyinit_core::results::ResultsError::TornTail { .. } => e.to_string(),
                e => format!("{e}: resume the shard (rerun its command) to repair it, then merge"),
            })
        })?,
        false => Vec::new(),
    };
    let cell_dirs = std::fs::read_dir(dir)
        .map_err(|e| refuse(format!("{shown}: {e}")))?
        .filter_map(Result::ok)
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| RunFolder::SHARDS_DIR != *n)
        .collect();
    Ok(Input {
        dir: dir.to_path_buf(),
        record,
        spec_text,
        rows,
        cell_dirs,
    })
}

/// The pid holding the folder's lock, if a run holds it.
fn still_running(folder: &RunFolder) -> Option<String> {
    let file = folder.lock().open().ok()?;
    match nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockSharedNonblock) {
        Ok(_) => None,
        Err(_) => Some(
            folder
                .lock()
                .read_to_string()
                .map(|p| p.trim().to_string())
                .unwrap_or_default(),
        ),
    }
}

/// One harness commit: each shard's record and each of its rows (a shard
/// resumed by another build has rows of two). Records and rows written
/// before the commit was recorded say nothing and pass.
fn one_commit(shards: &[Input]) -> Result<(), MergeError> {
    let mut first: Option<(&str, &Path)> = None;
    for s in shards {
        let rows = s.rows.iter().map(|r| r.harness_commit.as_str());
        for c in std::iter::once(s.record.harness_commit.as_str()).chain(rows) {
            match first {
                _ if c.is_empty() => {}
                None => first = Some((c, &s.dir)),
                Some((a, ad)) if a != c => {
                    return Err(refuse(format!(
                        "{} was run by harness commit {a} and {} by {c}: rerun the shards with one build of the harness",
                        ad.display(),
                        s.dir.display()
                    )))
                }
                Some(_) => {}
            }
        }
    }
    Ok(())
}

/// One spec (by hash), one harness version, one split, each shard once,
/// each cell from one shard.
fn check_one_run(shards: &[Input]) -> Result<(), MergeError> {
    let a = &shards[0];
    let (ad, ar) = (a.dir.display(), &a.record);
    for b in &shards[1..] {
        let (bd, br) = (b.dir.display(), &b.record);
        if br.spec_hash != ar.spec_hash {
            return Err(refuse(format!(
                "{ad} ran spec {} (hash {}) and {bd} ran {} (hash {}): merge the shards of one spec",
                ar.run_id, ar.spec_hash, br.run_id, br.spec_hash
            )));
        }
        if br.harness_version != ar.harness_version {
            return Err(refuse(format!(
                "{ad} was run by harness {} and {bd} by {}: rerun one shard with the other's harness",
                ar.harness_version, br.harness_version
            )));
        }
        if br.shard.count() != ar.shard.count() {
            return Err(refuse(format!(
                "{ad} is shard {} and {bd} is shard {}: merge the shards of one split",
                ar.shard, br.shard
            )));
        }
    }
    one_commit(shards)?;
    let mut seen: BTreeMap<Shard, &Path> = BTreeMap::new();
    let mut owner: BTreeMap<&str, &Path> = BTreeMap::new();
    for s in shards {
        if let Some(other) = seen.insert(s.record.shard, &s.dir) {
            return Err(refuse(format!(
                "shard {} is given twice, {} and {}: merge each shard once",
                s.record.shard,
                other.display(),
                s.dir.display()
            )));
        }
        let cells: BTreeSet<&str> = s
            .rows
            .iter()
            .map(|r| r.cell_id.as_str())
            .chain(s.cell_dirs.iter().map(String::as_str))
            .collect();
        for c in cells {
            if let Some(other) = owner.insert(c, &s.dir) {
                return Err(refuse(format!(
                    "cell {c} was run by two shards, {} and {}: merge each cell from one shard",
                    other.display(),
                    s.dir.display()
                )));
            }
        }
    }
    Ok(())
}

/// Cell id -> the shard folder that has an ok row of it.
fn ok_cells(shards: &[Input]) -> BTreeMap<&str, &Path> {
    shards
        .iter()
        .flat_map(|s| {
            s.rows
                .iter()
                .filter(|r| r.status == Status::Ok)
                .map(|r| (r.cell_id.as_str(), s.dir.as_path()))
        })
        .collect()
}

/// The plan's cells no shard has an ok row of: refused, each named with
/// its shard, unless `allow_missing` (then returned, for `merge.toml`).
fn missing_cells<C: ProviderConfigs>(
    spec: &Spec<C>,
    shards: &[Input],
    allow_missing: bool,
) -> Result<Vec<String>, MergeError> {
    let planned = crate::plan::planned_cells(spec);
    let count = shards[0].record.shard.count();
    let ok = ok_cells(shards);
    let mut by_shard: BTreeMap<u32, Vec<&str>> = BTreeMap::new();
    for (k, part) in split(&planned, count).iter().enumerate() {
        for &i in part {
            if !ok.contains_key(planned[i].id.as_str()) {
                by_shard
                    .entry(k as u32 + 1)
                    .or_default()
                    .push(&planned[i].id);
            }
        }
    }
    let missing: Vec<String> = by_shard.values().flatten().map(|c| c.to_string()).collect();
    if missing.is_empty() || allow_missing {
        return Ok(missing);
    }
    let given: BTreeMap<u32, &Path> = shards
        .iter()
        .map(|s| (s.record.shard.index(), s.dir.as_path()))
        .collect();
    let parts: Vec<String> = by_shard
        .iter()
        .map(|(k, cells)| {
            let whose = match given.get(k) {
                Some(d) => format!("shard {k}/{count} ({} has no ok row of", d.display()),
                None => format!("shard {k}/{count} (not given:"),
            };
            format!("{whose} {})", cells.join(", "))
        })
        .collect();
    Err(refuse(format!(
        "{} of the plan's {} cells are missing: {}; run or resume that shard (`lazyinit-bench run SPEC --shard K/N --out ITS_FOLDER`) and merge again, or merge what is there with --allow-missing",
        missing.len(),
        planned.len(),
        parts.join("; ")
    )))
}

/// Where the merge goes: not into a shard, not over one (a shard nested
/// in the output), and over nothing but an earlier merge (or an empty
/// folder). True when it replaces one.
fn check_out(out: &Path, shards: &[PathBuf]) -> Result<bool, MergeError> {
    let reads = shards.iter().fold(output::Reads::new(), |r, s| r.tree(s));
    let kind = format!("a merged run (no {})", RunFolder::MERGE_TOML);
    output::guard_folder("out", out, &reads, &kind, |d| {
        RunFolder::new(d).merge_toml().is_file()
    })
    .map_err(|e| MergeError::Refused(exit::refused(e)))?;
    Ok(RunFolder::new(out).merge_toml().is_file())
}

/// Builds the merged folder beside `out`, then puts it in place with one
/// rename (an exchange when an earlier merge is there, removed after):
/// `lazyinit_core::output::NewFolder`.
fn write_atomically(
    out: &Path,
    shards: &[Input],
    record: &MergeRecord,
    command: &str,
) -> Result<(), MergeError> {
    let werr = |e| MergeError::Write(out.to_path_buf(), e);
    let mut new = output::NewFolder::beside(out).map_err(werr)?;
    build(&RunWriter::building(&new), shards, record, command)?;
    // An earlier merge's files the harness did not write (a report, plots,
    // notes) are kept in the new one; one where the new merge writes is
    // refused, nothing replaced.
    let earlier = RunFolder::new(new.dest());
    new.place(&|p| earlier.is_harness_path(p))
        .map(drop)
        .map_err(|e| match e {
            output::PlaceError::Clash(p) => refuse(format!(
                "--out {}: {} is in the earlier merge but not written by a merge, and the new merge writes it too; move it away and merge again",
                out.display(),
                p.display()
            )),
            output::PlaceError::Io(e) => werr(e),
        })
}

/// The merged run's files, through its writer: rows of every shard in
/// shard order, the spec, every command, each cell's folder, each shard's
/// own files.
fn build(
    run: &RunWriter,
    shards: &[Input],
    record: &MergeRecord,
    command: &str,
) -> Result<(), MergeError> {
    let werr = |e: lazyinit_core::WriteError| MergeError::Write(e.path, e.source);
    run.create().map_err(werr)?;
    let mut writer = run.results().map_err(MergeError::Rows)?;
    for row in shards.iter().flat_map(|s| &s.rows) {
        writer.append(row).map_err(MergeError::Rows)?;
    }
    run.put(RunFolder::SPEC_TOML, &shards[0].spec_text)
        .map_err(werr)?;
    let mut commands = String::new();
    for s in shards {
        commands.push_str(
            &RunFolder::new(&s.dir)
                .command_txt()
                .text()
                .unwrap_or_default(),
        );
    }
    let now = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    commands.push_str(&format!("{now} {command}\n"));
    run.put(RunFolder::COMMAND_TXT, commands).map_err(werr)?;
    for s in shards {
        let from = RunFolder::new(&s.dir);
        for cell in &s.cell_dirs {
            run.cell(cell).copy_from(&from.cell(cell)).map_err(werr)?;
        }
        let own = run.shard_files(&s.record.shard.slug()).map_err(werr)?;
        own.copy_files_from(
            &from,
            &[
                RunFolder::RESULTS_CSV,
                RunFolder::SPEC_TOML,
                RunFolder::LOCK,
            ],
        )
        .map_err(werr)?;
    }
    let text = toml::to_string_pretty(record).unwrap_or_default();
    run.put(RunFolder::MERGE_TOML, text).map_err(werr)
}

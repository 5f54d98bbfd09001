//! Series ids and labels that name no path of the machine that ran them.
//!
//! A kernel built from a tree or tarball of the host (`run --source
//! PATH`, a bisect's private worktree) has that path as its source in the
//! rows. The id and label of its series name the tree instead: a tarball
//! by its file name, a git tree by the rows' `kernel_tree` (`tree-<12
//! hex>` of its remote's URL, else of its root commit: the same wherever
//! the tree lies, across nightly commits, and in a bisect's private
//! worktree of it). Rows written before that column name a tree by the
//! sha256 of its path, or a bisect's worktree by its hash
//! (`<cache>/bisect/<hash>/linux`). The series' key keeps the path: the
//! bisect line a change prints needs the tree.

use std::path::Path;

use lazyinit_core::results::ResultRow;
use lazyinit_core::{KernelSource, SourceId};
use lazyinit_report::cells::{CellKey, Metric};

use crate::series::{self, Series, SeriesFilter, StoredRow};

/// The hash a bisect's worktree is named by, if `p` is one.
fn bisect_worktree(p: &Path) -> Option<String> {
    let hash = p.parent()?;
    let name = hash.file_name()?.to_str()?;
    let is_hash = name.len() == 12 && name.chars().all(|c| c.is_ascii_hexdigit());
    let under_bisect = hash.parent()?.file_name()? == "bisect";
    (p.file_name()? == "linux" && is_hash && under_bisect).then(|| name.to_string())
}

/// The name a path source goes by in ids; `None` for a source that is
/// not a path (a Debian package, a version).
pub fn tree_name(source: &SourceId) -> Option<String> {
    let Some(KernelSource::Path(p)) = source.kernel_source() else {
        return None;
    };
    let file = p.file_name().and_then(|f| f.to_str()).unwrap_or_default();
    if file.ends_with(".tar.xz") || file.ends_with(".tar.gz") {
        return Some(file.to_string());
    }
    let hash = bisect_worktree(p).unwrap_or_else(|| {
        lazyinit_core::paths::sha256_hex(p.display().to_string())[..12].to_string()
    });
    Some(format!("tree-{hash}"))
}

/// The `kernel_tree` of the rows of key `k`, if one has it.
pub fn tree_of<'a>(rows: impl IntoIterator<Item = &'a ResultRow>, k: &CellKey) -> Option<&'a str> {
    rows.into_iter()
        .find(|r| !r.kernel_tree.is_empty() && CellKey::of(r) == *k)
        .map(|r| r.kernel_tree.as_str())
}

/// The key as its id and label show it: a path source by its name, a
/// git tree by `tree` (its rows' `kernel_tree`) when they have one.
fn shown(k: &CellKey, tree: Option<&str>) -> CellKey {
    let mut k = k.clone();
    let named = match (tree_name(&k.axes.source), tree) {
        (Some(_), Some(t)) => Some(t.to_string()),
        (name, _) => name,
    };
    if let Some(name) = named {
        k.axes.source = SourceId::Other(name);
    }
    k
}

/// A key's series id, naming no path (`tree`: its rows' `kernel_tree`).
pub fn series_id(k: &CellKey, tree: Option<&str>) -> series::SeriesId {
    series::series_id(&shown(k, tree))
}

/// A key's label, naming no path.
pub fn label(k: &CellKey, tree: Option<&str>) -> String {
    shown(k, tree).label()
}

/// [`series::build`], each series' id and label naming no path; the
/// filter matches those ids.
pub fn build(rows: &[StoredRow], metric: Metric, filter: Option<&SeriesFilter>) -> Vec<Series> {
    let mut trees = std::collections::BTreeMap::new();
    for r in rows {
        if !r.row.kernel_tree.is_empty() {
            trees
                .entry(CellKey::of(&r.row))
                .or_insert_with(|| r.row.kernel_tree.clone());
        }
    }
    rename(series::build(rows, metric, None), &trees, filter)
}

/// Series built without a filter, their ids and labels renamed to name no
/// path (`trees`: each key's `kernel_tree`), then filtered by those ids.
pub fn rename(
    series: Vec<Series>,
    trees: &std::collections::BTreeMap<CellKey, String>,
    filter: Option<&SeriesFilter>,
) -> Vec<Series> {
    series
        .into_iter()
        .map(|mut s| {
            let k = shown(&s.key, trees.get(&s.key).map(String::as_str));
            s.id = series::series_id(&k);
            s.label = k.label();
            s
        })
        .filter(|s| filter.is_none_or(|f| f.matches(s.id.as_str())))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_path_source_is_named_by_its_tree() {
        let worktree = SourceId::from("/home/me/.cache/lazyinit-bench/bisect/0123456789ab/linux");
        assert_eq!(tree_name(&worktree).as_deref(), Some("tree-0123456789ab"));
        let tree = SourceId::from("/home/me/src/linux");
        let hash = &lazyinit_core::paths::sha256_hex("/home/me/src/linux")[..12];
        assert_eq!(tree_name(&tree), Some(format!("tree-{hash}")));
        let tarball = SourceId::from("/srv/k/linux-6.1.160.tar.xz");
        assert_eq!(tree_name(&tarball).as_deref(), Some("linux-6.1.160.tar.xz"));
        assert_eq!(tree_name(&SourceId::from("debian-6.1")), None);
        assert_eq!(tree_name(&SourceId::from("6.1.160")), None);
    }

    #[test]
    fn a_git_tree_is_named_by_its_rows_kernel_tree_wherever_it_lay() {
        let csv = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../results/bisect-ci-17/runs/011b504d68af-bad-end-0/results.csv"
        );
        let row = lazyinit_core::results::read_rows(csv).unwrap().remove(0);
        let mut a = row.clone();
        a.axes.source = SourceId::from("/home/me/src/linux");
        a.kernel_tree = lazyinit_core::paths::tree_name("github.com/torvalds/linux");
        let mut b = row;
        b.kernel_tree = a.kernel_tree.clone();
        let (ka, kb) = (CellKey::of(&a), CellKey::of(&b));
        let ida = series_id(&ka, tree_of([&a], &ka));
        assert_eq!(ida, series_id(&kb, tree_of([&b], &kb)));
        assert!(
            ida.as_str().contains(&a.kernel_tree) && !ida.as_str().contains("/home"),
            "{ida}"
        );
        // A row written before the column: its path's hash, as before.
        let hash = &lazyinit_core::paths::sha256_hex("/home/me/src/linux")[..12];
        assert!(series_id(&ka, None)
            .as_str()
            .contains(&format!("tree-{hash}")));
    }
}

//! Lists `migrations/`: every folder `NNNN_name` with an `up.sql` becomes a
//! line of `MIGRATIONS` (`src/migrate.rs`), in order. A new migration is
//! its folder, nothing else; a folder without a version, a duplicate
//! version or a missing `up.sql` fails the build with the folder's name.

use std::fmt::Write as _;
use std::path::Path;

fn main() {
    // Read when the script runs, not when it was compiled: a build script
    // compiled in one checkout may run for another sharing its target.
    let manifest = std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR");
    let dir = Path::new(&manifest).join("migrations");
    // Relative to the package: a target shared by two checkouts (cargo
    // keys a workspace member by its relative path) looks at this one's.
    println!("cargo:rerun-if-changed=migrations");
    let mut found: Vec<(i64, String)> = Vec::new();
    for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let entry = entry.unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        let name = entry.file_name().to_string_lossy().into_owned();
        let up = entry.path().join("up.sql");
        println!("cargo:rerun-if-changed=migrations/{name}/up.sql");
        let version = name
            .split_once('_')
            .filter(|(v, rest)| v.len() == 4 && !rest.is_empty())
            .and_then(|(v, _)| v.parse::<i64>().ok())
            .unwrap_or_else(|| {
                panic!("migrations/{name}: name a migration NNNN_what (0007_harness_commit)")
            });
        assert!(up.is_file(), "migrations/{name}: has no up.sql");
        found.push((version, name));
    }
    found.sort();
    for pair in found.windows(2) {
        assert!(
            pair[0].0 != pair[1].0,
            "migrations/{} and {}: one version twice",
            pair[0].1,
            pair[1].1
        );
    }
    let mut out = String::from("&[\n");
    for (version, name) in &found {
        let up = dir.join(name).join("up.sql");
        writeln!(
            out,
            "    ({version}, {name:?}, include_str!({:?})),",
            up.display().to_string()
        )
        .unwrap();
    }
    out.push(']');
    let dest =
        Path::new(&std::env::var("OUT_DIR").expect("cargo sets OUT_DIR")).join("migrations.rs");
    std::fs::write(&dest, out).unwrap_or_else(|e| panic!("{}: {e}", dest.display()));
}

//! A run folder's plan as it ran, read back from its `spec.toml` (for the
//! history's import and `history check`): the cells the spec plans and
//! the run's id, which its rows must carry.

use std::path::Path;

use lazyinit_core::cell::Cell;
use lazyinit_core::exit::{self, bad_input};
use lazyinit_core::RunFolder;

use crate::spec::{ProviderConfigs, Spec};

/// What a run folder's spec says the run was.
#[derive(Debug, Clone, PartialEq)]
pub struct Ran {
    /// The cells the spec plans, in plan order.
    pub cells: Vec<Cell>,
    /// The run's id (`<name>-<hash>`), as its rows carry it.
    pub run_id: String,
}

impl Ran {
    /// The planned cells' ids.
    pub fn cell_ids(&self) -> Vec<String> {
        self.cells.iter().map(Cell::id).collect()
    }
}

/// Reads `folder`'s `spec.toml` with provider tables of type `C`. Parsed,
/// not validated: the spec as it ran, whose kernel-config file (say) may
/// be on another host. The hash covers a kernel config's content, so
/// without that file here the run's id is taken from results.csv's first
/// row, and only the spec's name in it can be checked. Every refusal is
/// bad input naming the folder.
pub fn read<C: ProviderConfigs>(folder: &Path) -> anyhow::Result<Ran> {
    let name = folder.display().to_string();
    let text = RunFolder::new(folder)
        .spec_toml()
        .read_text_bounded(lazyinit_core::input::MAX_SPEC_BYTES, "spec")
        .map_err(|e| {
            bad_input(format!(
            "{name}: cannot read spec.toml ({e}): give a run folder (results.csv beside spec.toml)"
        ))
        })?;
    let spec: Spec<C> = toml::from_str(&text).map_err(|e| {
        bad_input(format!(
            "{name}: spec.toml: {}",
            exit::one_line_text(e.message())
        ))
    })?;
    let cells = crate::plan::cells(&spec);
    let run_id = match &spec.kernel_config {
        Some(c) if !c.is_file() => {
            let rows = RunFolder::new(folder)
                .results_csv()
                .untorn_rows()
                .map_err(exit::refused)?;
            let id = rows.first().map(|r| r.run_id.clone()).unwrap_or_default();
            if !id.starts_with(&format!("{}-", spec.name)) {
                return Err(bad_input(format!(
                    "{name}: results.csv line 2: run_id `{id}` is not of spec `{}`",
                    spec.name
                ))
                .into());
            }
            id
        }
        _ => spec.run_id(),
    };
    Ok(Ran { cells, run_id })
}

#[cfg(test)]
mod tests {
    use super::*;
    use lazyinit_core::exit::ExitCode;
    use std::path::PathBuf;

    fn exit_code(e: &anyhow::Error) -> Option<u8> {
        e.downcast_ref::<exit::ExitError>().map(|e| e.exit_code())
    }

    /// A committed run: `run quick` on the virtual clock.
    fn committed() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../results/quick-virtual")
    }

    #[test]
    fn a_committed_run_is_read_as_its_spec_planned_it() {
        let ran = read::<toml::Table>(&committed()).unwrap();
        let rows = RunFolder::new(committed()).results_csv().rows().unwrap();
        // Its id is the spec's as this reader types its provider tables
        // (the binary's typed tables gave the rows' id).
        let text = std::fs::read_to_string(committed().join("spec.toml")).unwrap();
        let spec: crate::spec::RawSpec = toml::from_str(&text).unwrap();
        assert_eq!(ran.run_id, spec.run_id());
        assert!(ran.run_id.starts_with("quick-"), "{}", ran.run_id);
        let mut planned = ran.cell_ids();
        let mut measured: Vec<String> = rows.iter().map(|r| r.cell_id.clone()).collect();
        planned.sort();
        measured.sort();
        assert_eq!(planned, measured);
    }

    #[test]
    fn a_kernel_config_not_here_takes_the_id_from_the_rows_and_checks_its_name() {
        let d = tempfile::tempdir().unwrap();
        let spec = std::fs::read_to_string(committed().join("spec.toml")).unwrap();
        let csv = std::fs::read(committed().join("results.csv")).unwrap();
        std::fs::write(d.path().join("results.csv"), csv).unwrap();
        let with_config = spec.replacen(
            "provider = ",
            "kernel-config = \"/nonexistent/config\"\nprovider = ",
            1,
        );
        std::fs::write(d.path().join("spec.toml"), &with_config).unwrap();
        let ran = read::<toml::Table>(d.path()).unwrap();
        assert_eq!(ran.run_id, "quick-4f6fd2a5");
        // Another spec's name: its rows are not this spec's.
        let renamed = with_config.replacen("name = \"quick\"", "name = \"other\"", 1);
        std::fs::write(d.path().join("spec.toml"), renamed).unwrap();
        let e = read::<toml::Table>(d.path()).unwrap_err();
        assert_eq!(exit_code(&e), Some(2), "{e}");
        assert_eq!(
            e.to_string(),
            format!(
                "{}: results.csv line 2: run_id `quick-4f6fd2a5` is not of spec `other`",
                d.path().display()
            )
        );
    }

    #[test]
    fn no_spec_or_a_spec_that_does_not_parse_is_bad_input_naming_the_folder() {
        let d = tempfile::tempdir().unwrap();
        let shown = d.path().display().to_string();
        let e = read::<toml::Table>(d.path()).unwrap_err();
        assert_eq!(exit_code(&e), Some(2), "{e}");
        assert!(
            e.to_string()
                .starts_with(&format!("{shown}: cannot read spec.toml (")),
            "{e}"
        );
        std::fs::write(d.path().join("spec.toml"), "name = \n").unwrap();
        let e = read::<toml::Table>(d.path()).unwrap_err();
        assert_eq!(exit_code(&e), Some(2), "{e}");
        assert!(
            e.to_string().starts_with(&format!("{shown}: spec.toml: ")),
            "{e}"
        );
    }
}

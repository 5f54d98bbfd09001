//! `lazyinit-bench report` and `compare` (being written; see the report issue).

#[derive(clap::Args)]
pub struct ReportArgs {
    /// Result CSV files.
    pub csv: Vec<std::path::PathBuf>,
}

#[derive(clap::Args)]
pub struct CompareArgs {}

pub async fn report(_a: ReportArgs) -> anyhow::Result<u8> {
    Err(lazyinit_core::exit::bad_input("`report` is not built yet").into())
}

pub async fn compare(_a: CompareArgs) -> anyhow::Result<u8> {
    Err(lazyinit_core::exit::bad_input("`compare` is not built yet").into())
}

//! `lazyinit-bench cleanup` (being written; see the EC2 issue).

#[derive(clap::Args)]
pub struct CleanupArgs {}

pub async fn run(_a: CleanupArgs) -> anyhow::Result<u8> {
    Err(lazyinit_core::exit::bad_input("`cleanup` is not built yet").into())
}

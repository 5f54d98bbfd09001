//! `lazyinit-bench run` and `plan` (being written; see the local-run issue).

#[derive(clap::Args)]
pub struct RunArgs {}

#[derive(clap::Args)]
pub struct PlanArgs {}

pub async fn run(_a: RunArgs) -> anyhow::Result<u8> {
    Err(lazyinit_core::exit::bad_input("`run` is not built yet").into())
}

pub async fn plan(_a: PlanArgs) -> anyhow::Result<u8> {
    Err(lazyinit_core::exit::bad_input("`plan` is not built yet").into())
}

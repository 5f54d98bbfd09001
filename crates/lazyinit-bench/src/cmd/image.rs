//! `lazyinit-bench image ...` (being written; see the image issue).

#[derive(clap::Subcommand)]
pub enum ImageCmd {
    /// List what is cached.
    List,
}

pub async fn run(_cmd: ImageCmd) -> anyhow::Result<u8> {
    Err(lazyinit_core::exit::bad_input("`image` is not built yet").into())
}

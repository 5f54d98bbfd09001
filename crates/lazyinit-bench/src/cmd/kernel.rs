//! `lazyinit-bench kernel ...` (being written; see the kernel issue).

#[derive(clap::Subcommand)]
pub enum KernelCmd {
    /// List what is cached.
    List,
}

pub async fn run(_cmd: KernelCmd) -> anyhow::Result<u8> {
    Err(lazyinit_core::exit::bad_input("`kernel` is not built yet").into())
}

//! How a command that failed ends: its error and every cause on one
//! `error:` line, and the exit code of the first error in the chain that
//! knows its own (`lazyinit_core::exit::ExitCode`). The one place an error
//! becomes an exit code; anything that knows none is infrastructure (3).

use std::error::Error;

use lazyinit_core::exit::{self, ExitCode};

/// Says `err` on stderr and gives the code the process ends with.
pub fn report(err: &anyhow::Error) -> u8 {
    eprintln!("error: {}", text(err));
    code(err)
}

/// `err` and its causes, `outer: inner: innermost`, as the `error:` line
/// says them (a cause the error above it already ends with is said once).
pub fn text(err: &anyhow::Error) -> String {
    exit::chain_text(err.as_ref())
}

/// The exit code of the first error in the chain that has one: an error
/// that wraps others answers from its own sources, so the outermost typed
/// error decides.
pub fn code(err: &anyhow::Error) -> u8 {
    err.chain()
        .find_map(code_here)
        .unwrap_or(exit::INFRASTRUCTURE)
}

/// Every error type a command can end on that says its exit code.
fn code_here(e: &(dyn Error + 'static)) -> Option<u8> {
    fn of<T: ExitCode + Error + 'static>(e: &(dyn Error + 'static)) -> Option<u8> {
        e.downcast_ref::<T>().map(ExitCode::exit_code)
    }
    #[cfg(feature = "ec2")]
    let ec2: &[fn(&(dyn Error + 'static)) -> Option<u8>] = &[
        of::<lazyinit_ec2::Ec2Error>,
        of::<lazyinit_ec2::config::ConfigError>,
    ];
    #[cfg(not(feature = "ec2"))]
    let ec2: &[fn(&(dyn Error + 'static)) -> Option<u8>] = &[];
    let coded: &[fn(&(dyn Error + 'static)) -> Option<u8>] = &[
        of::<exit::ExitError>,
        of::<lazyinit_core::provider::ProviderError>,
        of::<lazyinit_core::size::SizeError>,
        of::<lazyinit_core::cell::AxisError>,
        of::<lazyinit_kernel::KernelError>,
        of::<lazyinit_image::ImageError>,
        of::<lazyinit_ssh::SshError>,
        of::<lazyinit_orchestrator::RunError>,
        of::<lazyinit_orchestrator::merge::MergeError>,
        of::<lazyinit_history::HistoryError>,
        of::<lazyinit_site::SiteError>,
        of::<lazyinit_report::compare::CompareError>,
        of::<lazyinit_report::kcidb::KcidbError>,
    ];
    coded.iter().chain(ec2).find_map(|of| of(e))
}

#[cfg(test)]
mod tests {
    use super::*;
    use anyhow::Context;

    #[test]
    fn a_code_survives_context() {
        let e: anyhow::Error = Err::<(), _>(exit::bad_input("no such arch"))
            .context("while planning")
            .unwrap_err();
        assert_eq!(code(&e), exit::BAD_INPUT);
        assert_eq!(text(&e), "while planning: no such arch");
        assert_eq!(code(&anyhow::anyhow!("boom")), exit::INFRASTRUCTURE);
        let size: anyhow::Error = "2TB".parse::<lazyinit_core::ByteSize>().unwrap_err().into();
        assert_eq!(code(&size), exit::BAD_INPUT);
    }

    /// A kernel build's missing tool inside a run's error stays 4, and the
    /// line says the run's words, then the kernel's.
    #[test]
    fn a_run_error_answers_from_its_kernel_error() {
        let e = lazyinit_orchestrator::RunError::Unbuildable(
            lazyinit_kernel::KernelError::MissingTool {
                tool: "bc".into(),
                install: "apt-get install bc".into(),
            },
        );
        let e = anyhow::Error::new(e).context("cannot run the spec");
        assert_eq!(code(&e), exit::MISSING_TOOL);
        assert_eq!(
            text(&e),
            "cannot run the spec: bc is missing: install it with `apt-get install bc` (or run scripts/setup-host.sh)"
        );
        let e = lazyinit_orchestrator::RunError::Kernel(
            Box::new(lazyinit_orchestrator::plan::KernelNeed {
                arch: lazyinit_core::Arch::X86_64,
                hz: lazyinit_core::Hz::new(250).unwrap(),
                variant: lazyinit_core::Variant::Fix,
                source: lazyinit_core::KernelSource::default(),
                profile: lazyinit_core::KernelProfile::Qemu,
            }),
            lazyinit_kernel::KernelError::Step("make failed".into()),
        );
        assert_eq!(code(&anyhow::Error::new(e)), exit::INFRASTRUCTURE);
    }
}

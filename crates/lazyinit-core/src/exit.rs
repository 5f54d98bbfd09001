//! Process exit codes, one per kind of outcome, so scripts can tell them apart.

/// Everything asked for was done and nothing regressed.
pub const OK: u8 = 0;
/// `compare` found a significant regression, or some cells of a run failed.
pub const REGRESSION_OR_CELL_FAILED: u8 = 1;
/// The input was wrong (flag, config, spec, size, CSV): fix it and rerun.
pub const BAD_INPUT: u8 = 2;
/// Something the harness depends on failed (build, QEMU, SSH, cloud API).
pub const INFRASTRUCTURE: u8 = 3;
/// A required host tool is missing: the message names the install command.
pub const MISSING_TOOL: u8 = 4;
/// The run was interrupted by SIGINT/SIGTERM; rerun the same command to resume.
pub const INTERRUPTED: u8 = 130;

/// An error that carries the exit code it should end the process with.
/// Libraries return it (or wrap it with context) for bad input and missing
/// tools; anything else ends with [`INFRASTRUCTURE`].
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct ExitError {
    pub code: u8,
    pub message: String,
}

pub fn bad_input(message: impl Into<String>) -> ExitError {
    ExitError {
        code: BAD_INPUT,
        message: message.into(),
    }
}

/// A missing host tool, with the command that installs it.
pub fn missing_tool(tool: &str, install: &str) -> ExitError {
    ExitError {
        code: MISSING_TOOL,
        message: format!(
            "{tool} is missing: install it with `{install}` (or run scripts/setup-host.sh)"
        ),
    }
}

/// The exit code for an error chain: the first coded error in it wins.
pub fn code_of(err: &anyhow::Error) -> u8 {
    for cause in err.chain() {
        if let Some(e) = cause.downcast_ref::<ExitError>() {
            return e.code;
        }
        if let Some(e) = cause.downcast_ref::<crate::provider::ProviderError>() {
            return e.exit_code();
        }
        if cause.downcast_ref::<crate::size::SizeError>().is_some()
            || cause.downcast_ref::<crate::cell::AxisError>().is_some()
        {
            return BAD_INPUT;
        }
    }
    INFRASTRUCTURE
}

#[cfg(test)]
mod tests {
    use super::*;
    use anyhow::Context;

    #[test]
    fn code_survives_context() {
        let e: anyhow::Error = Err::<(), _>(bad_input("no such arch"))
            .context("while planning")
            .unwrap_err();
        assert_eq!(code_of(&e), BAD_INPUT);
        assert_eq!(code_of(&anyhow::anyhow!("boom")), INFRASTRUCTURE);
        let size: anyhow::Error = "2TB".parse::<crate::ByteSize>().unwrap_err().into();
        assert_eq!(code_of(&size), BAD_INPUT);
    }
}

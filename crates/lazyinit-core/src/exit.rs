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
    err.chain().find_map(code_here).unwrap_or(INFRASTRUCTURE)
}

/// [`code_of`] for an error and its sources.
pub fn code_in(err: &(dyn std::error::Error + 'static)) -> u8 {
    std::iter::successors(Some(err), |e| e.source())
        .find_map(code_here)
        .unwrap_or(INFRASTRUCTURE)
}

fn code_here(cause: &(dyn std::error::Error + 'static)) -> Option<u8> {
    if let Some(e) = cause.downcast_ref::<ExitError>() {
        return Some(e.code);
    }
    if let Some(e) = cause.downcast_ref::<crate::provider::ProviderError>() {
        return Some(e.exit_code());
    }
    if cause.downcast_ref::<crate::size::SizeError>().is_some()
        || cause.downcast_ref::<crate::cell::AxisError>().is_some()
    {
        return Some(BAD_INPUT);
    }
    None
}

/// An error and its sources, `outer: inner: innermost` (each as it
/// prints, attached output included).
pub fn chain_text(err: &(dyn std::error::Error + 'static)) -> String {
    std::iter::successors(Some(err), |e| e.source())
        .map(|e| e.to_string())
        .collect::<Vec<_>>()
        .join(": ")
}

/// [`chain_text`] on one line, as a result row's `error` column holds it.
pub fn one_line(err: &(dyn std::error::Error + 'static)) -> String {
    one_line_text(&chain_text(err))
}

/// Text with every run of whitespace (newlines too) made one space.
pub fn one_line_text(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
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

    #[derive(Debug, thiserror::Error)]
    #[error("cannot run these cells")]
    struct Outer(#[source] crate::provider::ProviderError);

    #[test]
    fn code_and_line_of_a_typed_chain() {
        let e = Outer(crate::provider::ProviderError::BadInput(
            "no such\n  volume".into(),
        ));
        assert_eq!(code_in(&e), BAD_INPUT);
        assert_eq!(one_line(&e), "cannot run these cells: no such volume");
    }
}

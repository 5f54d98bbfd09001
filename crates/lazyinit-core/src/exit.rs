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

/// What a process ends with: every error a command can end on (and the
/// outcome of `compare` and `history check`) says its own code. An error
/// that wraps others answers from its typed sources (a kernel build's bad
/// input stays 2 inside a run's error). The CLI maps the error it ends on
/// to its code in one place (`lazyinit-bench`'s `fail.rs`).
pub trait ExitCode {
    fn exit_code(&self) -> u8;
}

/// The errors that are only a sentence to the user: what is wrong and
/// what to do about it. Libraries return them (or wrap them) for bad input
/// and missing tools.
#[derive(Debug, thiserror::Error)]
pub enum ExitError {
    /// The input was wrong; the sentence says how to fix it.
    #[error("{0}")]
    BadInput(String),
    /// The input was wrong, as a typed error says (a spec that does not
    /// parse, an `--out` that is an input): its text is the message, and
    /// it stays reachable as the source for a caller that matches on it.
    #[error("{}", in_context(.context, .source))]
    BadInputFrom {
        context: Option<String>,
        #[source]
        source: BoxedError,
    },
    /// A missing host tool, with the command that installs it.
    #[error("{tool} is missing: install it with `{install}` (or run scripts/setup-host.sh)")]
    MissingTool { tool: String, install: String },
    /// SIGINT/SIGTERM stopped the command `during` something (or "").
    #[error("interrupted{during}: rerun the same command to resume")]
    Interrupted { during: &'static str },
}

type BoxedError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// The wrapper's own line: the context, or the source's text when there is
/// none (the printer then skips the source as already said).
fn in_context(context: &Option<String>, source: &BoxedError) -> String {
    match context {
        Some(c) => c.clone(),
        None => source.to_string(),
    }
}

impl ExitCode for ExitError {
    fn exit_code(&self) -> u8 {
        match self {
            ExitError::BadInput(_) | ExitError::BadInputFrom { .. } => BAD_INPUT,
            ExitError::MissingTool { .. } => MISSING_TOOL,
            ExitError::Interrupted { .. } => INTERRUPTED,
        }
    }
}

pub fn bad_input(message: impl Into<String>) -> ExitError {
    ExitError::BadInput(message.into())
}

/// Bad input that a typed error describes: exit 2, the error kept as the
/// source (its text is the message).
pub fn refused(e: impl std::error::Error + Send + Sync + 'static) -> ExitError {
    ExitError::BadInputFrom {
        context: None,
        source: Box::new(e),
    }
}

/// [`refused`] under a context (`--shards`, `[provider-config.ec2]`): the
/// line reads `context: the error`.
pub fn refused_in(
    context: impl Into<String>,
    e: impl std::error::Error + Send + Sync + 'static,
) -> ExitError {
    ExitError::BadInputFrom {
        context: Some(context.into()),
        source: Box::new(e),
    }
}

/// A missing host tool, with the command that installs it.
pub fn missing_tool(tool: &str, install: &str) -> ExitError {
    ExitError::MissingTool {
        tool: tool.into(),
        install: install.into(),
    }
}

impl ExitCode for crate::size::SizeError {
    fn exit_code(&self) -> u8 {
        BAD_INPUT
    }
}

impl ExitCode for crate::cell::AxisError {
    fn exit_code(&self) -> u8 {
        BAD_INPUT
    }
}

/// An error and its sources, `outer: inner: innermost` (each as it
/// prints, attached output included; a source the error above it already
/// ends with, as one that only carries it or says `path: {source}`, is
/// said once). The one place a chain becomes text.
pub fn chain_text(err: &(dyn std::error::Error + 'static)) -> String {
    let mut texts: Vec<String> = Vec::new();
    for e in std::iter::successors(Some(err), |e| e.source()) {
        let text = e.to_string();
        if texts.last().is_some_and(|above| above.ends_with(&text)) {
            continue;
        }
        texts.push(text);
    }
    texts.join(": ")
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

    /// A typed error refused as bad input reads as before (its own text,
    /// or `context: text`), exits 2, and is still there for a caller.
    #[test]
    fn a_refused_error_keeps_its_type_and_its_text() {
        let size = "2TB".parse::<crate::ByteSize>().unwrap_err();
        let text = size.to_string();
        let e = refused(size);
        assert_eq!(e.exit_code(), BAD_INPUT);
        assert_eq!(chain_text(&e), text);
        let inner =
            std::error::Error::source(&e).and_then(|s| s.downcast_ref::<crate::size::SizeError>());
        assert!(inner.is_some(), "{e:?}");
        let e = refused_in("--size", "2TB".parse::<crate::ByteSize>().unwrap_err());
        assert_eq!(chain_text(&e), format!("--size: {text}"));
    }

    #[test]
    fn each_kind_says_its_code() {
        assert_eq!(bad_input("no such arch").exit_code(), BAD_INPUT);
        assert_eq!(
            missing_tool("make", "apt-get install make").exit_code(),
            MISSING_TOOL
        );
        assert_eq!(
            missing_tool("make", "apt-get install make").to_string(),
            "make is missing: install it with `apt-get install make` (or run scripts/setup-host.sh)"
        );
        let i = ExitError::Interrupted {
            during: " during a build",
        };
        assert_eq!(i.exit_code(), INTERRUPTED);
        assert_eq!(
            i.to_string(),
            "interrupted during a build: rerun the same command to resume"
        );
        assert_eq!(
            "2TB".parse::<crate::ByteSize>().unwrap_err().exit_code(),
            BAD_INPUT
        );
    }

    #[derive(Debug, thiserror::Error)]
    #[error("cannot run these cells")]
    struct Outer(#[source] crate::provider::ProviderError);

    #[test]
    fn the_line_of_a_typed_chain() {
        let e = Outer(crate::provider::ProviderError::BadInput(
            "no such\n  volume".into(),
        ));
        assert_eq!(e.0.exit_code(), BAD_INPUT);
        assert_eq!(one_line(&e), "cannot run these cells: no such volume");
        assert_eq!(chain_text(&e), "cannot run these cells: no such\n  volume");
    }
}

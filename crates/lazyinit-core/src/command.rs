//! Running a host command and keeping what it said: the harness's one
//! runner of short commands (git, apt, dpkg, renice, ...). Each crate maps
//! [`CommandError`] into its own error with the words its users need.

use std::process::Command;

/// A command that could not be started, or that failed.
#[derive(Debug, thiserror::Error)]
pub enum CommandError {
    /// It could not be started (`NotFound`: the tool is not installed).
    #[error("cannot run {program}: {source}")]
    Spawn {
        program: String,
        #[source]
        source: std::io::Error,
    },
    /// It ran and exited non-zero (or was killed): its stderr, trimmed.
    #[error("{program} failed ({status}): {stderr}")]
    Failed {
        program: String,
        status: std::process::ExitStatus,
        stderr: String,
    },
}

impl CommandError {
    /// What the command said (its stderr, trimmed), or why it did not run.
    pub fn detail(&self) -> String {
        match self {
            CommandError::Spawn { source, .. } => source.to_string(),
            CommandError::Failed { stderr, .. } => stderr.clone(),
        }
    }

    /// The last `n` lines of [`CommandError::detail`]: where a build's
    /// error is.
    pub fn tail(&self, n: usize) -> String {
        let d = self.detail();
        let lines: Vec<&str> = d.lines().collect();
        lines[lines.len().saturating_sub(n)..].join("\n")
    }

    /// Whether the program is not installed.
    pub fn not_found(&self) -> bool {
        matches!(self, CommandError::Spawn { source, .. } if source.kind() == std::io::ErrorKind::NotFound)
    }
}

/// Runs `cmd` to its end and returns its stdout; a failure keeps its
/// stderr. Stdin is the caller's choice (`output`'s default: none).
pub fn run(cmd: &mut Command) -> Result<Vec<u8>, CommandError> {
    let program = cmd.get_program().to_string_lossy().into_owned();
    let out = cmd.output().map_err(|source| CommandError::Spawn {
        program: program.clone(),
        source,
    })?;
    if !out.status.success() {
        return Err(CommandError::Failed {
            program,
            status: out.status,
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        });
    }
    Ok(out.stdout)
}

/// [`run`] with `input` written to its stdin (from a thread of its own,
/// so a command that writes while it reads cannot block on a full pipe).
pub fn run_with_input(cmd: &mut Command, input: &[u8]) -> Result<Vec<u8>, CommandError> {
    use std::io::Write;
    use std::process::Stdio;
    let program = cmd.get_program().to_string_lossy().into_owned();
    let spawn = |source| CommandError::Spawn {
        program: program.clone(),
        source,
    };
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(spawn)?;
    let mut stdin = child.stdin.take().expect("stdin is piped");
    let input = input.to_vec();
    // A command that exits before reading it all closes the pipe: its exit
    // status says what happened, not the write's error.
    let writer = std::thread::spawn(move || {
        let _ = stdin.write_all(&input);
    });
    let out = child.wait_with_output().map_err(spawn)?;
    let _ = writer.join();
    if !out.status.success() {
        return Err(CommandError::Failed {
            program,
            status: out.status,
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        });
    }
    Ok(out.stdout)
}

/// [`run`], its stdout as text.
pub fn run_text(cmd: &mut Command) -> Result<String, CommandError> {
    run(cmd).map(|o| String::from_utf8_lossy(&o).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stdout_on_success_stderr_on_failure() {
        let out = run_text(Command::new("sh").args(["-c", "echo out; echo err >&2"])).unwrap();
        assert_eq!(out, "out\n");
        let e = run(Command::new("sh").args(["-c", "echo a >&2; echo b >&2; echo c >&2; exit 3"]))
            .unwrap_err();
        assert_eq!(e.detail(), "a\nb\nc");
        assert_eq!(e.tail(2), "b\nc");
        assert!(
            e.to_string().starts_with("sh failed (exit status: 3): a"),
            "{e}"
        );
        assert!(!e.not_found());
        let e = run(&mut Command::new("/nonexistent/tool")).unwrap_err();
        assert!(e.not_found(), "{e}");
    }

    #[test]
    fn input_reaches_stdin_and_a_failure_keeps_stderr() {
        // More than a pipe holds, echoed back while it is written.
        let input = vec![b'x'; 1 << 20];
        let out = run_with_input(&mut Command::new("cat"), &input).unwrap();
        assert_eq!(out.len(), input.len());
        let e = run_with_input(
            Command::new("sh").args(["-c", "echo no >&2; exit 4"]),
            &input,
        )
        .unwrap_err();
        assert_eq!(e.detail(), "no");
        let e = run_with_input(&mut Command::new("/nonexistent/tool"), b"").unwrap_err();
        assert!(e.not_found(), "{e}");
    }

    #[test]
    fn stdin_is_closed() {
        // `cat` with no stdin would wait forever on a terminal.
        assert_eq!(run_text(&mut Command::new("cat")).unwrap(), "");
    }
}

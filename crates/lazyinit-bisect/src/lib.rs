//! Bisection on the lazy-init metric, as pure functions.
//!
//! - [`search`]: given the commit graph between a good and a bad end and
//!   the verdicts so far, which commit to test next, or the
//!   first bad commit, or the range that skipped commits leave.
//! - [`test`]: the ends' two levels and their noise, whether they differ,
//!   and the sequential test (SPRT) that says of a step's samples: good,
//!   bad, or "measure more".
//! - [`log`]: `git bisect log` text and the table of steps.
//! - [`outcome`]: what a bisection concluded, typed: the exit code and
//!   `summary.txt` both come from it.
//!
//! Nothing here runs git, builds or boots: the CLI does, and feeds results
//! in. See `docs/bisect.md`.

pub mod git;
pub mod log;
pub mod outcome;
pub mod search;
pub mod test;

pub use outcome::Outcome;
pub use search::{next, Graph, Next, Verdict};
pub use test::{Decision, Ends, Sample, Sprt};

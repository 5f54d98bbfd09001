//! Bisection on the lazy-init metric.
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
//! - [`drive`]: the bisection from its ends to its answer, over a
//!   [`drive::Lab`] that checks out, builds and measures a commit (the
//!   orchestrator's lab, `lazyinit_orchestrator::bisect`, builds kernels
//!   and boots guests; a test's reads a table).
//!
//! The range, the commits' subjects and the private clone the steps are
//! checked out in are git's: `lazyinit_core::git`.
//!
//! Nothing here builds or boots: the lab does. See `docs/bisect.md`.

pub mod drive;
pub mod log;
pub mod outcome;
pub mod search;
pub mod test;

pub use drive::{Lab, Prepared, Settings};
pub use outcome::Outcome;
pub use search::{next, Graph, Next, Verdict};
pub use test::{Decision, Ends, Exact, Judge, Sample, Sprt};

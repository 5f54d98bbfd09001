//! Experiment specs, plans and the concurrent matrix runner

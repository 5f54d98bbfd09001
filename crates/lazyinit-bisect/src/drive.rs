//! A bisection driven from its ends to its answer: measure the ends until
//! they are told apart ([`ends`]), walk the commit graph judging each
//! commit with the sequential test ([`judge`]), then confirm the culprit
//! (bad again, each parent good again, and on request its revert on the
//! bad end good) ([`bisect`]).
//!
//! What a commit costs, checking it out, building it as committed,
//! booting and measuring it, is a [`Lab`]'s: the orchestrator's lab
//! (`lazyinit_orchestrator::bisect`) builds kernels and runs the project's
//! runner on one cell; a test's lab reads samples from a table.
//! Everything else here is the bisection itself.

use std::collections::BTreeMap;
use std::time::Instant;

use lazyinit_core::exit::bad_input;
use lazyinit_core::git::Range;

use crate::log::Step;
use crate::outcome::Named;
use crate::test::Level;
use crate::test::{Exact, Judge};
use crate::{next, Decision, Ends, Graph, Next, Outcome, Sample, Sprt, Verdict};

/// A commit made ready to measure, or why it cannot be.
#[derive(Debug, Clone, PartialEq)]
pub enum Prepared {
    /// Built as committed: the build's seconds (0 when it was cached) and
    /// what the commit's `ext4_run_li_request` reads as (`fix`, `nofix`,
    /// `unknown`), a fact of the build.
    Ready { build_s: f64, reading: String },
    /// It does not build: the build's one line. The step is a skip.
    Skip(String),
}

/// Where the commits are built and measured.
// Not `dyn`: the driver is generic over its lab, so `async fn` is fine.
#[allow(async_fn_in_trait)]
pub trait Lab {
    /// Checks `commit` out and builds it as committed. An error stops the
    /// bisection (a full disk, an interrupt); a commit that does not build
    /// is `Ok(Prepared::Skip)`.
    async fn prepare(&mut self, commit: &str) -> anyhow::Result<Prepared>;
    /// Sample `index` of the commit last prepared, for a step of `role`:
    /// `Ok(Err(why))` when the guest gave none (it does not boot or
    /// measure), which ends the step's sampling.
    async fn sample(
        &mut self,
        commit: &str,
        role: &str,
        index: usize,
    ) -> anyhow::Result<Result<Sample, String>>;
    /// The commit's subject line.
    fn subject(&self, commit: &str) -> String;
    /// `culprit` reverted on top of `bad`, as a new commit to judge; an
    /// error when the revert does not apply cleanly.
    fn revert_on(&mut self, bad: &str, culprit: &str) -> anyhow::Result<String>;
    /// The steps so far and the answer so far, after every step: what
    /// the lab keeps of the bisection (its log, table and summary).
    fn record(&mut self, steps: &[Step], answer: &str) -> anyhow::Result<()>;
    /// A line of progress.
    fn say(&mut self, line: &str);
}

/// The test's settings, the same for every step.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Settings {
    /// Samples of each end before they are compared.
    pub end_samples: usize,
    /// Cap on the samples of one step (and of each end).
    pub max_samples: usize,
    /// The sequential test's error rate, each way, per step.
    pub error_rate: f64,
    /// The metric's change for one tick of the sleep L (its unit).
    pub per_tick: f64,
    /// The metric's name, for the lines said and the table.
    pub metric: &'static str,
    /// Every sample is exact (QEMU's virtual clock): one sample of each
    /// end and of each step ([`crate::test::Exact`]), the counts and the
    /// error rate unused.
    pub exact: bool,
}

impl Settings {
    /// The settings a bisection can work with: one line saying what to
    /// give instead.
    pub fn check(&self) -> Result<(), lazyinit_core::exit::ExitError> {
        if !(self.error_rate > 0.0 && self.error_rate < 0.5) {
            return Err(bad_input(
                "--error-rate must be between 0 and 0.5, e.g. 0.01",
            ));
        }
        if !self.exact && (self.end_samples < 2 || self.max_samples < 1) {
            return Err(bad_input(
                "--end-samples must be at least 2 and --max-samples at least 1",
            ));
        }
        Ok(())
    }
}

/// A commit judged: the step's table row and its samples.
pub struct Judged {
    pub step: Step,
    pub samples: Vec<Sample>,
}

impl Judged {
    pub fn verdict(&self) -> Verdict {
        match self.step.verdict.as_str() {
            "good" => Verdict::Good,
            "bad" => Verdict::Bad,
            _ => Verdict::Skip,
        }
    }
}

// Long: one step as it happens (prepare the tree, sample until the test decides, the level, the line), each outcome a few lines.
/// Judge `commit`: `fixed` samples (an end) or samples until the test
/// decides or its cap is reached.
pub async fn judge<L: Lab>(
    lab: &mut L,
    metric: &str,
    commit: &str,
    role: &str,
    fixed: Option<usize>,
    sprt: Option<&Judge>,
) -> anyhow::Result<Judged> {
    let mut step = Step {
        role: role.to_string(),
        commit: commit.to_string(),
        subject: lab.subject(commit),
        samples: 0,
        value: None,
        ticks: None,
        verdict: "skip".into(),
        build_s: 0.0,
        measure_s: 0.0,
        reason: String::new(),
        text: String::new(),
    };
    let short = commit.get(..12).unwrap_or(commit);
    lab.say(&format!("{role}: {short} {}", step.subject));
    match lab.prepare(commit).await? {
        Prepared::Ready { build_s, reading } => {
            step.build_s = build_s;
            step.text = reading;
        }
        Prepared::Skip(why) => {
            lab.say(&format!("  skip: {why}"));
            step.reason = why;
            return Ok(Judged {
                step,
                samples: vec![],
            });
        }
    }
    let cap = fixed.or(sprt.map(Judge::max_samples)).unwrap_or(1);
    let mut samples = Vec::new();
    let t = Instant::now();
    for i in 0..cap {
        match lab.sample(commit, role, i).await? {
            Ok(s) => samples.push(s),
            Err(why) => {
                step.reason = why;
                break;
            }
        }
        if let (None, Some(t)) = (fixed, sprt) {
            match t.decide(&samples) {
                Decision::Good => {
                    step.verdict = "good".into();
                    break;
                }
                Decision::Bad => {
                    step.verdict = "bad".into();
                    break;
                }
                Decision::Unknown => {
                    step.verdict = "unknown".into();
                    step.reason = t.undecided(samples.len());
                }
                Decision::More => {}
            }
        }
    }
    step.measure_s = t.elapsed().as_secs_f64();
    if let Some(l) = Level::of(&samples) {
        step.samples = l.n;
        step.value = Some(l.mean);
        step.ticks = l.ticks;
    }
    if fixed.is_some() && !samples.is_empty() && step.reason.is_empty() {
        step.verdict = if role.starts_with("good") {
            "good"
        } else {
            "bad"
        }
        .into();
    }
    lab.say(&format!(
        "  {}: {} samples, {metric} = {}, L {} ({:.0} s build, {:.0} s measure){}",
        step.verdict,
        step.samples,
        step.value.map_or("-".into(), |v| format!("{v:.2}")),
        step.ticks.map_or("-".into(), |t| t.to_string()),
        step.build_s,
        step.measure_s,
        if step.reason.is_empty() {
            String::new()
        } else {
            format!(": {}", step.reason)
        }
    ));
    Ok(Judged { step, samples })
}

/// Measure both ends; refuse (bad input, both figures recorded) when they
/// do not differ.
///
/// `end_samples` of each end first. While their noise is not known
/// (where the ends share an L, the spread around each end's mean at each L
/// it slept needs [`crate::test::SPREAD_DF`] degrees of freedom: an end
/// whose samples slept different L has fewer) or the test between them is
/// not conclusive (a Welch p at or above the error rate, and an L both
/// ends slept), each end gets one more sample, up to `max_samples`, before
/// the ends are refused: a loaded host that moves one sample's L does not
/// end the bisection.
pub async fn ends<L: Lab>(
    lab: &mut L,
    s: &Settings,
    good: &str,
    bad: &str,
) -> anyhow::Result<(Judge, Vec<Step>)> {
    if s.exact {
        return exact_ends(lab, s, good, bad).await;
    }
    let cap = s.max_samples.max(s.end_samples);
    let mut k = s.end_samples;
    let (ends, steps) = loop {
        let g = judge(lab, s.metric, good, "good end", Some(k), None).await?;
        let b = judge(lab, s.metric, bad, "bad end", Some(k), None).await?;
        for (j, which) in [(&g, "--good"), (&b, "--bad")] {
            if j.samples.len() < 2 {
                let why = Outcome::Refused("an end gave no samples".into());
                lab.record(&[g.step.clone(), b.step.clone()], &why.line())?;
                return Err(bad_input(format!(
                    "{which} {} gives no samples ({}): pick an end that builds and boots",
                    j.step.commit.get(..12).unwrap_or(&j.step.commit),
                    j.step.reason
                ))
                .into());
            }
        }
        let steps = vec![g.step.clone(), b.step.clone()];
        match Ends::new(&g.samples, &b.samples, s.error_rate, s.per_tick) {
            Ok(e) => break (e, steps),
            Err(e) if e.wants_more() && k < cap && g.samples.len() == k && b.samples.len() == k => {
                k += 1;
                lab.say(&format!(
                    "ends: not told apart yet ({e}): one more sample of each end ({k} of at most {cap})"
                ));
            }
            Err(e) => {
                lab.record(&steps, &Outcome::Refused(e.to_string()).line())?;
                return Err(
                    bad_input(format!("{e}: nothing to bisect on this cell and metric")).into(),
                );
            }
        }
    };
    let sprt = Sprt {
        ends,
        error_rate: s.error_rate,
        max_samples: s.max_samples,
    };
    Ok((Judge::Sprt(sprt), steps))
}

/// The ends on a clock of exact samples: one each, refused (bad input,
/// both recorded) when an end gives none or they do not differ.
async fn exact_ends<L: Lab>(
    lab: &mut L,
    s: &Settings,
    good: &str,
    bad: &str,
) -> anyhow::Result<(Judge, Vec<Step>)> {
    let g = judge(lab, s.metric, good, "good end", Some(1), None).await?;
    let b = judge(lab, s.metric, bad, "bad end", Some(1), None).await?;
    let steps = vec![g.step.clone(), b.step.clone()];
    for (j, which) in [(&g, "--good"), (&b, "--bad")] {
        if j.samples.is_empty() {
            lab.record(
                &steps,
                &Outcome::Refused("an end gave no sample".into()).line(),
            )?;
            return Err(bad_input(format!(
                "{which} {} gives no sample ({}): pick an end that builds and boots",
                j.step.commit.get(..12).unwrap_or(&j.step.commit),
                j.step.reason
            ))
            .into());
        }
    }
    match Exact::new(g.samples[0], b.samples[0]) {
        Ok(e) => Ok((Judge::Exact(e), steps)),
        Err(e) => {
            lab.record(&steps, &Outcome::Refused(e.clone()).line())?;
            Err(bad_input(format!("{e}: nothing to bisect on this cell and metric")).into())
        }
    }
}

/// The whole bisection of `range`: the ends, the steps the search asks
/// for, then the culprit's confirmation. Returns the outcome and every
/// step; the lab has recorded each step as it was judged.
pub async fn bisect<L: Lab>(
    lab: &mut L,
    range: &Range,
    s: &Settings,
    confirm_revert: bool,
) -> anyhow::Result<(Outcome, Vec<Step>)> {
    let commits = &range.commits;
    let n = commits.len();
    let (sprt, mut steps) = ends(lab, s, &commits[0], &commits[n - 1]).await?;
    let mut verdicts = BTreeMap::from([(0, Verdict::Good), (n - 1, Verdict::Bad)]);
    let graph = Graph::new(range.within());
    let found = loop {
        match next(&graph, &verdicts) {
            Next::Test(i) => {
                let j = judge(lab, s.metric, &commits[i], "step", None, Some(&sprt)).await?;
                verdicts.insert(i, j.verdict());
                steps.push(j.step);
                lab.record(&steps, "bisecting")?;
            }
            Next::Found(i) => break Ok(i),
            Next::Range(r) => break Err(r),
        }
    };
    let named = |lab: &L, c: &str| Named {
        commit: c.to_string(),
        subject: lab.subject(c),
    };
    let outcome = match found {
        Err(range) => Outcome::Range(range.iter().map(|i| named(lab, &commits[*i])).collect()),
        Ok(i) => {
            let culprit = &commits[i];
            let again = judge(lab, s.metric, culprit, "confirm bad", None, Some(&sprt)).await?;
            let mut confirmed = again.verdict() == Verdict::Bad;
            let mut how = format!("bad again ({})", again.step.verdict);
            steps.push(again.step);
            // Every parent (a merge has several): good again.
            for p in &range.parents[i] {
                let j = judge(lab, s.metric, p, "confirm parent", None, Some(&sprt)).await?;
                confirmed &= j.verdict() == Verdict::Good;
                how.push_str(&format!(
                    ", parent {} again ({})",
                    p.get(..12).unwrap_or(p),
                    j.step.verdict
                ));
                steps.push(j.step);
            }
            if confirm_revert {
                match lab.revert_on(&commits[n - 1], culprit) {
                    Ok(rev) => {
                        let r =
                            judge(lab, s.metric, &rev, "revert on bad", None, Some(&sprt)).await?;
                        confirmed &= r.verdict() == Verdict::Good;
                        how.push_str(&format!(", reverted on --bad: {}", r.step.verdict));
                        steps.push(r.step);
                    }
                    // Later commits touching the same lines: the revert
                    // cannot be checked, which says nothing against the
                    // culprit (bad again, parent good again still stand).
                    Err(e) => {
                        let first = e.to_string();
                        let first = first.lines().next().unwrap_or("").to_string();
                        how.push_str(&format!(
                            ", revert not checked: it does not apply cleanly on --bad ({first})"
                        ));
                    }
                }
            }
            Outcome::Named {
                commit: named(lab, culprit),
                confirmed,
                how,
            }
        }
    };
    Ok((outcome, steps))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A lab of a line of commits `c0..cN`: commit i measures `values[i]`
    /// (None: does not build), L 10 for every sample.
    struct Table {
        values: Vec<Option<f64>>,
        recorded: Vec<String>,
        prepared: Vec<String>,
        said: Vec<String>,
        noise: u64,
    }

    impl Table {
        fn index(c: &str) -> usize {
            c.trim_start_matches('c')
                .trim_end_matches("-revert")
                .parse()
                .unwrap()
        }
    }

    impl Lab for Table {
        async fn prepare(&mut self, commit: &str) -> anyhow::Result<Prepared> {
            self.prepared.push(commit.to_string());
            Ok(match self.values[Self::index(commit)] {
                Some(_) => Prepared::Ready {
                    build_s: 0.0,
                    reading: "unknown".into(),
                },
                None => Prepared::Skip("does not build (table)".into()),
            })
        }
        async fn sample(
            &mut self,
            commit: &str,
            _role: &str,
            index: usize,
        ) -> anyhow::Result<Result<Sample, String>> {
            // A small deterministic wobble, so that the ends have a spread.
            self.noise = self
                .noise
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let wobble = ((self.noise >> 33) % 100) as f64 / 1000.0 - 0.05;
            let base = if commit.ends_with("-revert") {
                self.values[0].unwrap()
            } else {
                self.values[Self::index(commit)].unwrap()
            };
            let _ = index;
            Ok(Ok(Sample {
                value: base + wobble,
                sleep_ticks: Some(10),
            }))
        }
        fn subject(&self, commit: &str) -> String {
            format!("subject of {commit}")
        }
        fn revert_on(&mut self, bad: &str, culprit: &str) -> anyhow::Result<String> {
            assert_eq!(Self::index(bad), self.values.len() - 1);
            Ok(format!("{culprit}-revert"))
        }
        fn record(&mut self, _steps: &[Step], answer: &str) -> anyhow::Result<()> {
            self.recorded.push(answer.to_string());
            Ok(())
        }
        fn say(&mut self, line: &str) {
            self.said.push(line.to_string());
        }
    }

    fn line(n: usize) -> Range {
        let commits: Vec<String> = (0..n).map(|i| format!("c{i}")).collect();
        let parents: Vec<Vec<String>> = (0..n)
            .map(|i| {
                if i == 0 {
                    vec![]
                } else {
                    vec![format!("c{}", i - 1)]
                }
            })
            .collect();
        Range { commits, parents }
    }

    fn settings() -> Settings {
        Settings {
            end_samples: 3,
            max_samples: 5,
            error_rate: 0.01,
            per_tick: 1.0,
            metric: "ms_per_group",
            exact: false,
        }
    }

    /// On a clock of exact samples: one sample a commit, ends included,
    /// and the same culprit named and confirmed.
    #[test]
    fn exact_samples_take_one_sample_a_commit() {
        let mut values: Vec<Option<f64>> = (0..16)
            .map(|i| Some(if i < 11 { 40.0 } else { 44.0 }))
            .collect();
        values[8] = None;
        let mut lab = Table {
            values,
            recorded: vec![],
            prepared: vec![],
            said: vec![],
            noise: 7,
        };
        let s = Settings {
            exact: true,
            ..settings()
        };
        let (outcome, steps) = block_on(bisect(&mut lab, &line(16), &s, true)).unwrap();
        match &outcome {
            Outcome::Named {
                commit, confirmed, ..
            } => {
                assert_eq!(commit.commit, "c11");
                assert!(confirmed, "{}", outcome.line());
            }
            o => panic!("{o:?}"),
        }
        for st in &steps {
            let want = usize::from(st.verdict != "skip");
            assert_eq!(
                st.samples, want,
                "{} {}: {:?}",
                st.role, st.commit, st.verdict
            );
        }
        // The same ends without exactness take their three samples each.
        let (_, steps) = block_on(bisect(&mut lab, &line(16), &settings(), true)).unwrap();
        assert_eq!(steps[0].samples, 3);
    }

    fn block_on<F: std::future::Future>(f: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
            .block_on(f)
    }

    /// Sixteen commits, the culprit at 11, two commits that do not build
    /// before it: named, confirmed by bad again, its parent and the revert;
    /// the skipped commits are judged skips, and every step was recorded.
    #[test]
    fn a_table_lab_names_and_confirms_its_culprit() {
        let mut values: Vec<Option<f64>> = (0..16)
            .map(|i| Some(if i < 11 { 40.0 } else { 44.0 }))
            .collect();
        values[8] = None;
        values[9] = None;
        let mut lab = Table {
            values,
            recorded: vec![],
            prepared: vec![],
            said: vec![],
            noise: 7,
        };
        let (outcome, steps) = block_on(bisect(&mut lab, &line(16), &settings(), true)).unwrap();
        match &outcome {
            Outcome::Named {
                commit, confirmed, ..
            } => {
                assert_eq!(commit.commit, "c11");
                assert_eq!(commit.subject, "subject of c11");
                assert!(confirmed, "{}", outcome.line());
            }
            o => panic!("{o:?}"),
        }
        let roles: Vec<&str> = steps.iter().map(|s| s.role.as_str()).collect();
        assert_eq!(&roles[..2], ["good end", "bad end"]);
        assert_eq!(
            &roles[roles.len() - 3..],
            ["confirm bad", "confirm parent", "revert on bad"]
        );
        assert!(steps
            .iter()
            .all(|s| s.verdict != "skip" || s.reason.contains("does not build")));
        let stepped = roles.iter().filter(|r| **r == "step").count();
        assert_eq!(
            lab.recorded.iter().filter(|a| *a == "bisecting").count(),
            stepped
        );
        assert!(
            lab.said.iter().any(|l| l.starts_with("step: c")),
            "{:?}",
            lab.said
        );
    }

    /// Ends that measure the same are refused with a line that says so,
    /// and the ends' steps are recorded with the refusal.
    #[test]
    fn ends_that_do_not_differ_are_refused_as_bad_input() {
        let mut lab = Table {
            values: vec![Some(40.0); 4],
            recorded: vec![],
            prepared: vec![],
            said: vec![],
            noise: 3,
        };
        let e = block_on(bisect(&mut lab, &line(4), &settings(), false)).unwrap_err();
        let exit = e
            .downcast_ref::<lazyinit_core::exit::ExitError>()
            .expect("an exit error");
        use lazyinit_core::exit::ExitCode;
        assert_eq!(exit.exit_code(), lazyinit_core::exit::BAD_INPUT);
        assert!(e.to_string().contains("nothing to bisect"), "{e}");
        assert!(lab.recorded.last().unwrap().starts_with("no answer: "));
    }

    #[test]
    fn settings_out_of_range_are_one_line() {
        let mut s = settings();
        s.error_rate = 0.7;
        assert!(s.check().unwrap_err().to_string().contains("--error-rate"));
        let mut s = settings();
        s.end_samples = 1;
        assert!(s.check().unwrap_err().to_string().contains("--end-samples"));
        assert!(settings().check().is_ok());
    }
}

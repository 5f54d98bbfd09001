//! What a bisection leaves behind: `bisect.log` in `git bisect log` form
//! (so `git bisect replay bisect.log` redoes it by hand), the table of
//! every step, and the summary line.

use crate::search::Verdict;

/// One commit judged (an end, a step, or a confirmation).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Step {
    /// What the step was for: `good end`, `bad end`, `step`, `confirm bad`,
    /// `confirm parent`, `revert on bad`.
    pub role: String,
    pub commit: String,
    pub subject: String,
    pub samples: usize,
    /// Mean of the metric over the samples (None: none measured).
    pub value: Option<f64>,
    /// The sleep L the samples agreed on.
    pub ticks: Option<u64>,
    /// good, bad, skip, or unknown.
    pub verdict: String,
    pub build_s: f64,
    pub measure_s: f64,
    /// Why a step was skipped (the build's or boot's one line).
    pub reason: String,
    /// What the commit's `ext4_run_li_request` reads as (fix, nofix,
    /// unknown): a fact of the build, which is as committed whatever it
    /// is. Empty when not built.
    #[serde(default)]
    pub text: String,
}

fn short(c: &str) -> &str {
    &c[..c.len().min(12)]
}

/// The `git bisect log` lines of the judged steps (ends and bisection
/// steps; confirmations are comments), ending with the answer.
pub fn bisect_log(good: &str, bad: &str, steps: &[Step], answer: &str) -> String {
    let mut out = format!("git bisect start '{bad}' '{good}'\n");
    for s in steps {
        let (word, comment) = match (s.role.as_str(), s.verdict.as_str()) {
            ("step" | "good end" | "bad end", "good") => (Some("good"), "good"),
            ("step" | "good end" | "bad end", "bad") => (Some("bad"), "bad"),
            ("step", _) => (Some("skip"), "skip"),
            (_, v) => (None, v),
        };
        match word {
            Some(w) => out.push_str(&format!(
                "# {comment}: [{}] {}\ngit bisect {w} {}\n",
                s.commit, s.subject, s.commit
            )),
            None => out.push_str(&format!(
                "# {}: {comment}: [{}] {}\n",
                s.role, s.commit, s.subject
            )),
        }
    }
    out.push_str(&format!("# {answer}\n"));
    out
}

/// The step's verdict word in the log's terms.
pub fn verdict_word(v: Verdict) -> &'static str {
    v.as_str()
}

/// A markdown table of every step.
pub fn table(steps: &[Step], metric: &str) -> String {
    let mut out = format!(
        "| # | role | commit | subject | text | samples | {metric} | L | verdict | build s | measure s | reason |\n|---|---|---|---|---|---|---|---|---|---|---|---|\n"
    );
    for (i, s) in steps.iter().enumerate() {
        out.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {:.1} | {:.1} | {} |\n",
            i + 1,
            s.role,
            short(&s.commit),
            s.subject.replace('|', "\\|"),
            if s.text.is_empty() { "-" } else { &s.text },
            s.samples,
            s.value.map_or_else(|| "-".into(), |v| format!("{v:.2}")),
            s.ticks.map_or_else(|| "-".into(), |t| t.to_string()),
            s.verdict,
            s.build_s,
            s.measure_s,
            s.reason.replace('|', "\\|"),
        ));
    }
    out
}

/// The steps `bisect-step` judged in earlier calls, kept one JSON object
/// a line (`bisect-steps.jsonl`) so each call's table shows every step so
/// far: `text` with `step` added, a commit judged again replacing its
/// earlier line. A line that does not parse (a hand edit) is dropped and
/// counted.
pub fn add_step(text: &str, step: &Step) -> (Vec<Step>, usize) {
    let mut dropped = 0;
    let mut steps: Vec<Step> = text
        .lines()
        .filter(|l| !l.trim().is_empty())
        .filter_map(|l| match serde_json::from_str::<Step>(l) {
            Ok(s) => Some(s),
            Err(_) => {
                dropped += 1;
                None
            }
        })
        .filter(|s| s.commit != step.commit)
        .collect();
    steps.push(step.clone());
    (steps, dropped)
}

/// [`add_step`]'s file text of `steps`.
pub fn steps_jsonl(steps: &[Step]) -> String {
    steps
        .iter()
        .map(|s| serde_json::to_string(s).unwrap_or_default() + "\n")
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn step(role: &str, commit: &str, verdict: &str) -> Step {
        Step {
            role: role.into(),
            commit: commit.into(),
            subject: format!("subject of {commit}"),
            samples: 2,
            value: Some(40.0),
            ticks: Some(3),
            verdict: verdict.into(),
            build_s: 12.0,
            measure_s: 30.0,
            reason: String::new(),
            text: "unknown".into(),
        }
    }

    #[test]
    fn the_log_replays_as_git_bisect_log() {
        let steps = [
            step("good end", "aaa", "good"),
            step("bad end", "fff", "bad"),
            step("step", "ccc", "skip"),
            step("step", "ddd", "bad"),
            step("confirm parent", "bbb", "good"),
        ];
        let log = bisect_log("aaa", "fff", &steps, "first bad commit: [ddd] x");
        assert_eq!(
            log,
            "git bisect start 'fff' 'aaa'\n\
             # good: [aaa] subject of aaa\ngit bisect good aaa\n\
             # bad: [fff] subject of fff\ngit bisect bad fff\n\
             # skip: [ccc] subject of ccc\ngit bisect skip ccc\n\
             # bad: [ddd] subject of ddd\ngit bisect bad ddd\n\
             # confirm parent: good: [bbb] subject of bbb\n\
             # first bad commit: [ddd] x\n"
        );
    }

    #[test]
    fn the_table_has_a_row_per_step() {
        let t = table(&[step("step", "0123456789abcdef", "good")], "ms_per_group");
        assert_eq!(t.lines().count(), 3);
        assert!(t.contains("| 1 | step | 0123456789ab | subject of 0123456789abcdef | unknown | 2 | 40.00 | 3 | good | 12.0 | 30.0 |  |"), "{t}");
    }

    #[test]
    fn steps_of_earlier_calls_are_kept_and_a_commit_again_replaces_its_line() {
        let (one, _) = add_step("", &step("step", "ccc", "good"));
        let (two, _) = add_step(&steps_jsonl(&one), &step("step", "ddd", "bad"));
        assert_eq!(two.len(), 2);
        let mut again = step("step", "ccc", "bad");
        again.samples = 3;
        let text = steps_jsonl(&two) + "not json\n";
        let (three, dropped) = add_step(&text, &again);
        assert_eq!(dropped, 1);
        let commits: Vec<&str> = three.iter().map(|s| s.commit.as_str()).collect();
        assert_eq!(commits, ["ddd", "ccc"]);
        assert_eq!((three[1].verdict.as_str(), three[1].samples), ("bad", 3));
    }
}

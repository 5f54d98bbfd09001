//! JUnit XML, the report format CI systems read (GitLab, Jenkins, GitHub
//! actions): the project's one writer ([`Suite`], also `history check
//! --junit`'s) and [`render`] of a [`Comparison`]: one `<testcase>` per
//! cell; a regression is a `<failure>`, a cell without data on a side or
//! missing from one is an `<error>` (the comparison is incomplete: exit 2),
//! a cell whose storage profile was not held is `<skipped>`; an improvement
//! or no change passes. The verdicts are the markdown's, to the same
//! numbers.

use lazyinit_core::exit::ExitCode;
use std::fmt::Write;

use super::{num, pct};
use crate::cells::CellKey;
use crate::compare::{CellComparison, Comparison, Side, Verdict};
use crate::stats::Summary;

/// Escapes text for an XML attribute or element.
pub fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for ch in s.chars() {
        match ch {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            // Characters XML 1.0 cannot carry at all.
            c if (c as u32) < 0x20 && !matches!(c, '\t' | '\n' | '\r') => out.push('?'),
            c => out.push(c),
        }
    }
    out
}

/// What a JUnit test case says beyond its name: a CI reads `failure` as a
/// test that failed, `error` as one that could not be judged, `skipped` as
/// one that was not.
#[derive(Debug, Clone, PartialEq)]
pub enum CaseResult {
    Pass,
    Failure { kind: &'static str, message: String },
    Error { kind: &'static str, message: String },
    Skipped { kind: &'static str, message: String },
}

impl CaseResult {
    fn element(&self) -> Option<(&'static str, &'static str, &str)> {
        match self {
            CaseResult::Pass => None,
            CaseResult::Failure { kind, message } => Some(("failure", kind, message)),
            CaseResult::Error { kind, message } => Some(("error", kind, message)),
            CaseResult::Skipped { kind, message } => Some(("skipped", kind, message)),
        }
    }
}

/// One `<testcase>`.
#[derive(Debug, Clone, PartialEq)]
pub struct Case {
    pub classname: String,
    pub name: String,
    pub result: CaseResult,
    /// `<system-out>`; empty for none.
    pub out: String,
}

/// One `<testsuite>` inside a `<testsuites>` named `report`. The counts
/// are the cases'.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Suite {
    pub report: String,
    pub name: String,
    pub properties: Vec<(String, String)>,
    pub cases: Vec<Case>,
    /// The suite's own `<system-out>`; empty for none.
    pub out: String,
}

impl Suite {
    pub fn xml(&self) -> String {
        let count = |el: &str| {
            self.cases
                .iter()
                .filter(|c| c.result.element().is_some_and(|(e, _, _)| e == el))
                .count()
        };
        let counts = format!(
            "tests=\"{}\" failures=\"{}\" errors=\"{}\" skipped=\"{}\"",
            self.cases.len(),
            count("failure"),
            count("error"),
            count("skipped"),
        );
        let mut out = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
        let _ = writeln!(out, "<testsuites name=\"{}\" {counts}>", esc(&self.report));
        let _ = writeln!(out, "  <testsuite name=\"{}\" {counts}>", esc(&self.name));
        if !self.properties.is_empty() {
            out.push_str("    <properties>\n");
            for (name, value) in &self.properties {
                let _ = writeln!(
                    out,
                    "      <property name=\"{}\" value=\"{}\"/>",
                    esc(name),
                    esc(value)
                );
            }
            out.push_str("    </properties>\n");
        }
        for c in &self.cases {
            let _ = write!(
                out,
                "    <testcase classname=\"{}\" name=\"{}\"",
                esc(&c.classname),
                esc(&c.name)
            );
            let element = c.result.element();
            if element.is_none() && c.out.is_empty() {
                out.push_str("/>\n");
                continue;
            }
            out.push_str(">\n");
            if let Some((el, kind, msg)) = element {
                let m = esc(msg);
                let _ = writeln!(
                    out,
                    "      <{el} type=\"{}\" message=\"{m}\">{m}</{el}>",
                    esc(kind)
                );
            }
            if !c.out.is_empty() {
                let _ = writeln!(out, "      <system-out>{}</system-out>", esc(&c.out));
            }
            out.push_str("    </testcase>\n");
        }
        if !self.out.is_empty() {
            let _ = writeln!(out, "    <system-out>{}</system-out>", esc(&self.out));
        }
        out.push_str("  </testsuite>\n</testsuites>\n");
        out
    }
}

/// Groups a CI's test tree by arch and HZ; the name is the whole cell.
fn classname(k: &CellKey) -> String {
    format!("lazyinit.{}.hz{}", k.axes.arch, k.axes.hz)
}

fn side(s: Option<&Summary>, unit: &str, estimated: bool) -> String {
    let est = if estimated { " (estimate)" } else { "" };
    match s {
        None => "no data".into(),
        Some(s) => format!("{} {unit}{est} (n={})", num(s.mean), s.n),
    }
}

/// What the test case says beyond pass.
fn outcome(c: &Comparison, x: &CellComparison) -> CaseResult {
    let unit = c.metric.unit();
    let change = x.change_pct.map(pct).unwrap_or_else(|| "–".into());
    let detail = format!(
        "{change}: baseline {}, candidate {}",
        side(x.baseline.as_ref(), unit, x.baseline_estimated),
        side(x.candidate.as_ref(), unit, x.candidate_estimated)
    );
    match x.verdict {
        Verdict::Regression => CaseResult::Failure {
            kind: "regression",
            message: format!(
                "REGRESSION of {}, {detail} (threshold {}%)",
                c.metric.name(),
                c.threshold_pct
            ),
        },
        Verdict::InsufficientData => CaseResult::Error {
            kind: "insufficient_data",
            message: format!("no ok run on a side: {detail}"),
        },
        Verdict::Unknown => CaseResult::Skipped {
            kind: "profile_not_held",
            message: format!("UNKNOWN, the storage profile was not held: {detail}"),
        },
        Verdict::Improvement | Verdict::NoChange => CaseResult::Pass,
    }
}

fn case(k: &CellKey, result: CaseResult, out: String) -> Case {
    Case {
        classname: classname(k),
        name: k.label(),
        result,
        out,
    }
}

pub fn render(c: &Comparison) -> String {
    let ignored: Vec<String> = c
        .ignored
        .iter()
        .map(|f| {
            serde_json::to_value(f)
                .ok()
                .and_then(|v| v.as_str().map(String::from))
                .unwrap_or_default()
        })
        .collect();
    let properties = [
        ("metric", c.metric.name().to_string()),
        ("threshold_pct", c.threshold_pct.to_string()),
        ("alpha", c.alpha.to_string()),
        ("ignored", ignored.join(",")),
        ("exit_code", c.exit_code().to_string()),
    ]
    .into_iter()
    .map(|(n, v)| (n.to_string(), v))
    .collect();
    let mut cases = Vec::new();
    for x in &c.cells {
        let mut text = format!("verdict: {}", x.verdict.text());
        if let Some(ch) = x.change_pct {
            let _ = write!(text, "; change {}", pct(ch));
        }
        if let Some(w) = x.welch {
            let _ = write!(text, "; Welch p = {:.4}", w.p);
        }
        for n in &x.notes {
            let _ = write!(text, "\n{n}");
        }
        cases.push(case(&x.key, outcome(c, x), text));
    }
    for (s, k) in &c.missing {
        let where_ = match s {
            Side::Baseline => "baseline",
            Side::Candidate => "candidate",
        };
        let message = format!("the cell is not in the {where_}: compare runs of the same matrix");
        cases.push(case(
            k,
            CaseResult::Error {
                kind: "missing",
                message,
            },
            String::new(),
        ));
    }
    Suite {
        report: "lazyinit-bench".into(),
        name: format!("lazyinit-bench compare {}", c.metric.name()),
        properties,
        cases,
        out: super::compare::summary_line(c),
    }
    .xml()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_what_xml_needs() {
        assert_eq!(
            esc("a<b & \"c\" 'd'>\u{1}"),
            "a&lt;b &amp; &quot;c&quot; &apos;d&apos;&gt;?"
        );
    }

    #[test]
    fn the_counts_are_the_cases() {
        let case = |name: &str, result| Case {
            classname: "c".into(),
            name: name.into(),
            result,
            out: String::new(),
        };
        let s = Suite {
            report: "r".into(),
            name: "s <&>".into(),
            cases: vec![
                case("a", CaseResult::Pass),
                case(
                    "b",
                    CaseResult::Skipped {
                        kind: "k",
                        message: "m".into(),
                    },
                ),
                case(
                    "c",
                    CaseResult::Failure {
                        kind: "k",
                        message: "x\"y".into(),
                    },
                ),
                case(
                    "d",
                    CaseResult::Error {
                        kind: "k",
                        message: "m".into(),
                    },
                ),
                case(
                    "e",
                    CaseResult::Skipped {
                        kind: "k",
                        message: "m".into(),
                    },
                ),
            ],
            ..Suite::default()
        };
        let xml = s.xml();
        assert!(
            xml.contains("<testsuite name=\"s &lt;&amp;&gt;\" tests=\"5\" failures=\"1\" errors=\"1\" skipped=\"2\">"),
            "{xml}"
        );
        assert!(
            xml.contains("<testcase classname=\"c\" name=\"a\"/>"),
            "{xml}"
        );
        assert!(
            xml.contains("message=\"x&quot;y\">x&quot;y</failure>"),
            "{xml}"
        );
        assert!(!xml.contains("<properties>"), "{xml}");
    }
}

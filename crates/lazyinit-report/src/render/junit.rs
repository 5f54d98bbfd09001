//! JUnit XML of a [`Comparison`], the report format CI systems read (GitLab,
//! Jenkins, GitHub actions): one `<testcase>` per cell; a regression is a
//! `<failure>`, a cell without data on a side or missing from one is an
//! `<error>` (the comparison is incomplete: exit 2); an improvement or no
//! change passes. The verdicts are the markdown's, to the same numbers.

use lazyinit_core::exit::ExitCode;
use std::fmt::Write;

use super::{num, pct};
use crate::cells::CellKey;
use crate::compare::{CellComparison, Comparison, Side, Verdict};
use crate::stats::Summary;

/// Escapes text for an XML attribute or element (also `history check`'s
/// JUnit).
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

/// What the test case says beyond pass: (element, type, message).
fn outcome(c: &Comparison, x: &CellComparison) -> Option<(&'static str, &'static str, String)> {
    let unit = c.metric.unit();
    let change = x.change_pct.map(pct).unwrap_or_else(|| "–".into());
    let detail = format!(
        "{change}: baseline {}, candidate {}",
        side(x.baseline.as_ref(), unit, x.baseline_estimated),
        side(x.candidate.as_ref(), unit, x.candidate_estimated)
    );
    match x.verdict {
        Verdict::Regression => Some((
            "failure",
            "regression",
            format!(
                "REGRESSION of {}, {detail} (threshold {}%)",
                c.metric.name(),
                c.threshold_pct
            ),
        )),
        Verdict::InsufficientData => Some((
            "error",
            "insufficient_data",
            format!("no ok run on a side: {detail}"),
        )),
        Verdict::Unknown => Some((
            "skipped",
            "profile_not_held",
            format!("UNKNOWN, the storage profile was not held: {detail}"),
        )),
        Verdict::Improvement | Verdict::NoChange => None,
    }
}

fn testcase(out: &mut String, k: &CellKey, body: Option<(&str, &str, String)>, text: &str) {
    write!(
        out,
        "    <testcase classname=\"{}\" name=\"{}\"",
        esc(&classname(k)),
        esc(&k.label())
    )
    .unwrap();
    if body.is_none() && text.is_empty() {
        out.push_str("/>\n");
        return;
    }
    out.push_str(">\n");
    if let Some((el, ty, msg)) = body {
        writeln!(
            out,
            "      <{el} type=\"{ty}\" message=\"{}\">{}</{el}>",
            esc(&msg),
            esc(&msg)
        )
        .unwrap();
    }
    if !text.is_empty() {
        writeln!(out, "      <system-out>{}</system-out>", esc(text)).unwrap();
    }
    out.push_str("    </testcase>\n");
}

pub fn render(c: &Comparison) -> String {
    let failures = c.count(Verdict::Regression);
    let errors = c.count(Verdict::InsufficientData) + c.missing.len();
    let tests = c.cells.len() + c.missing.len();
    let suite = format!("lazyinit-bench compare {}", c.metric.name());
    let mut out = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    writeln!(
        out,
        "<testsuites name=\"lazyinit-bench\" tests=\"{tests}\" failures=\"{failures}\" errors=\"{errors}\">"
    )
    .unwrap();
    writeln!(
        out,
        "  <testsuite name=\"{}\" tests=\"{tests}\" failures=\"{failures}\" errors=\"{errors}\" skipped=\"0\">",
        esc(&suite)
    )
    .unwrap();
    out.push_str("    <properties>\n");
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
    for (name, value) in [
        ("metric", c.metric.name().to_string()),
        ("threshold_pct", c.threshold_pct.to_string()),
        ("alpha", c.alpha.to_string()),
        ("ignored", ignored.join(",")),
        ("exit_code", c.exit_code().to_string()),
    ] {
        writeln!(
            out,
            "      <property name=\"{name}\" value=\"{}\"/>",
            esc(&value)
        )
        .unwrap();
    }
    out.push_str("    </properties>\n");
    for x in &c.cells {
        let mut text = format!("verdict: {}", x.verdict.text());
        if let Some(ch) = x.change_pct {
            write!(text, "; change {}", pct(ch)).unwrap();
        }
        if let Some(w) = x.welch {
            write!(text, "; Welch p = {:.4}", w.p).unwrap();
        }
        for n in &x.notes {
            write!(text, "\n{n}").unwrap();
        }
        testcase(&mut out, &x.key, outcome(c, x), &text);
    }
    for (s, k) in &c.missing {
        let where_ = match s {
            Side::Baseline => "baseline",
            Side::Candidate => "candidate",
        };
        let msg = format!("the cell is not in the {where_}: compare runs of the same matrix");
        testcase(&mut out, k, Some(("error", "missing", msg)), "");
    }
    writeln!(
        out,
        "    <system-out>{}</system-out>",
        esc(&super::compare::summary_line(c))
    )
    .unwrap();
    out.push_str("  </testsuite>\n</testsuites>\n");
    out
}

#[cfg(test)]
mod tests {
    use super::esc;

    #[test]
    fn escapes_what_xml_needs() {
        assert_eq!(
            esc("a<b & \"c\" 'd'>\u{1}"),
            "a&lt;b &amp; &quot;c&quot; &apos;d&apos;&gt;?"
        );
    }
}

//! What a bisection concluded, as a value: the exit code and the summary
//! line are both read from it, never from each other's text.

/// A commit and its subject.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Named {
    pub commit: String,
    pub subject: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The first bad commit; `confirmed` when every check held (bad again,
    /// each parent good again, and the revert on --bad good when asked
    /// and it applies); `how` says what each check gave.
    Named {
        commit: Named,
        confirmed: bool,
        how: String,
    },
    /// Skipped commits leave these as the first bad one, oldest first.
    Range(Vec<Named>),
    /// Nothing to bisect: the ends gave no samples or do not differ.
    Refused(String),
}

/// What a summary line says, read back (the committed runs' summaries).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Said {
    Named { commit: String, confirmed: bool },
    Range(usize),
    Refused,
}

const NAMED: &str = "first bad commit: [";
const RANGE: &str = "first bad commit: one of ";
const REFUSED: &str = "no answer: ";

impl Outcome {
    /// The exit code of a bisection that ended so: 0 named and confirmed;
    /// 1 named but not confirmed, or a range; 2 nothing to bisect.
    pub fn exit_code(&self) -> u8 {
        use lazyinit_core::exit;
        match self {
            Outcome::Named {
                confirmed: true, ..
            } => exit::OK,
            Outcome::Named {
                confirmed: false, ..
            }
            | Outcome::Range(_) => exit::REGRESSION_OR_CELL_FAILED,
            Outcome::Refused(_) => exit::BAD_INPUT,
        }
    }

    /// The one line `summary.txt` holds (before the wall time).
    pub fn line(&self) -> String {
        match self {
            Outcome::Named {
                commit,
                confirmed,
                how,
            } => format!(
                "{NAMED}{}] {}; {}: {how}",
                commit.commit,
                commit.subject,
                if *confirmed {
                    "confirmed"
                } else {
                    "NOT confirmed"
                }
            ),
            Outcome::Range(names) => format!(
                "{RANGE}{} (skipped commits leave no way to tell): {}",
                names.len(),
                names
                    .iter()
                    .map(|n| format!("{} {}", &n.commit[..n.commit.len().min(12)], n.subject))
                    .collect::<Vec<_>>()
                    .join("; ")
            ),
            Outcome::Refused(why) => format!("{REFUSED}{why}"),
        }
    }

    /// Named and confirmed: the bisection's answer stands.
    pub fn confirmed(&self) -> bool {
        matches!(
            self,
            Outcome::Named {
                confirmed: true,
                ..
            }
        )
    }

    /// What a summary's first line says. The verdict after a named
    /// commit is found by the subject's end: `subject` is the commit's
    /// subject when known (a subject may itself hold "; confirmed:"),
    /// else the first verdict word after the commit is taken.
    pub fn read(summary: &str, subject: Option<&str>) -> Option<Said> {
        let line = summary.lines().next()?;
        if let Some(rest) = line.strip_prefix(NAMED) {
            let (commit, rest) = rest.split_once("] ")?;
            let rest = match subject {
                Some(s) => rest.strip_prefix(s)?,
                None => rest,
            };
            let yes = rest.find("; confirmed: ");
            let no = rest.find("; NOT confirmed: ");
            let confirmed = match (yes, no) {
                (Some(y), Some(n)) => y < n,
                (Some(_), None) => true,
                (None, Some(_)) => false,
                (None, None) => return None,
            };
            return Some(Said::Named {
                commit: commit.to_string(),
                confirmed,
            });
        }
        if let Some(rest) = line.strip_prefix(RANGE) {
            let n = rest.split_whitespace().next()?.parse().ok()?;
            return Some(Said::Range(n));
        }
        line.starts_with(REFUSED).then_some(Said::Refused)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn named(subject: &str, confirmed: bool) -> Outcome {
        Outcome::Named {
            commit: Named {
                commit: "a".repeat(40),
                subject: subject.into(),
            },
            confirmed,
            how: "bad again (bad), parent bbbbbbbbbbbb again (good)".into(),
        }
    }

    #[test]
    fn a_subject_that_says_confirmed_does_not_confirm() {
        let sneaky = "revert \"x; confirmed: yes\"";
        let o = named(sneaky, false);
        assert!(!o.confirmed());
        assert!(o.line().contains("; confirmed:"));
        assert_eq!(
            Outcome::read(&o.line(), Some(sneaky)),
            Some(Said::Named {
                commit: "a".repeat(40),
                confirmed: false
            })
        );
        let o = named("plain", true);
        assert!(o.confirmed());
        assert_eq!(
            Outcome::read(&o.line(), None),
            Some(Said::Named {
                commit: "a".repeat(40),
                confirmed: true
            })
        );
    }

    #[test]
    fn ranges_and_refusals_read_back() {
        let r = Outcome::Range(vec![
            Named {
                commit: "1".repeat(40),
                subject: "one".into(),
            },
            Named {
                commit: "2".repeat(40),
                subject: "two".into(),
            },
        ]);
        assert!(!r.confirmed());
        assert_eq!(Outcome::read(&r.line(), None), Some(Said::Range(2)));
        let f = Outcome::Refused("the ends do not differ".into());
        assert_eq!(Outcome::read(&f.line(), None), Some(Said::Refused));
        assert_eq!(Outcome::read("bisecting", None), None);
    }
}

//! Renderers: one small file per format, each a pure function of a
//! [`Report`](crate::Report) (or a compare result) returning text.

use std::collections::{BTreeMap, BTreeSet};

use crate::cells::CellKey;
use lazyinit_core::identity::{label_order, Env, FIELDS};

pub mod compare;
pub mod csv;
pub mod json;
pub mod junit;
pub mod markdown;
pub mod replay;

/// Output format of `report` and `compare`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Markdown,
    Csv,
    Json,
    /// A KCIDB report of the rows ([`crate::kcidb`]); `report` only.
    Kcidb,
    /// JUnit XML, one test case per cell, for CI systems; `compare` only.
    Junit,
}

impl std::str::FromStr for Format {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "markdown" | "md" => Ok(Format::Markdown),
            "csv" => Ok(Format::Csv),
            "json" => Ok(Format::Json),
            "kcidb" => Ok(Format::Kcidb),
            "junit" => Ok(Format::Junit),
            _ => Err(format!(
                "unknown format `{s}`: use markdown, csv, json, kcidb or junit"
            )),
        }
    }
}

impl Format {
    /// The format a file name asks for by its extension, if any.
    pub fn from_extension(path: &std::path::Path) -> Option<Format> {
        match path.extension()?.to_str()? {
            "md" | "markdown" => Some(Format::Markdown),
            "csv" => Some(Format::Csv),
            "json" => Some(Format::Json),
            "xml" => Some(Format::Junit),
            _ => None,
        }
    }
}

/// Numbers to a precision that suits their size (seconds or ms).
pub fn num(x: f64) -> String {
    let a = x.abs();
    if a >= 100.0 {
        format!("{x:.1}")
    } else if a >= 1.0 {
        format!("{x:.2}")
    } else {
        format!("{x:.3}")
    }
}

pub fn pct(x: f64) -> String {
    format!("{x:+.1}%")
}

/// Names cells by the fields that tell them apart in this data set only:
/// arch, HZ, variant and volume always; provider, accel, machine, kernel
/// source, wait multiplier and storage profile when they vary.
pub struct Labeller {
    /// Per field of the key (`FIELDS` order): whether the environment
    /// part names it.
    shown: [bool; FIELDS.len()],
}

impl Labeller {
    pub fn new<'a>(keys: impl IntoIterator<Item = &'a CellKey>) -> Labeller {
        let keys: Vec<&CellKey> = keys.into_iter().collect();
        let shown = std::array::from_fn(|i| {
            let f = &FIELDS[i];
            let distinct = |ks: &[&CellKey]| {
                ks.iter()
                    .map(|k| (f.word)(k))
                    .collect::<BTreeSet<_>>()
                    .len()
                    > 1
            };
            match f.env {
                Env::Shape => false,
                Env::WhenVaries => distinct(&keys),
                Env::WhenVariesWithinArch => {
                    let mut by_arch: BTreeMap<_, Vec<&CellKey>> = BTreeMap::new();
                    for k in &keys {
                        by_arch.entry(k.axes.arch).or_default().push(k);
                    }
                    by_arch.values().any(|ks| distinct(ks))
                }
            }
        });
        Labeller { shown }
    }

    /// The environment part: empty when every cell shares it.
    pub fn env(&self, k: &CellKey) -> String {
        label_order()
            .filter(|(i, _)| self.shown[*i])
            .map(|(_, f)| (f.word)(k))
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// Column heading of the reported table's shape: arch, HZ [, env]
    /// [, estimate]. Estimates are always named, in every table.
    pub fn column(&self, k: &CellKey) -> String {
        let env = self.env(k);
        let mut s = format!("{}, HZ {}", k.axes.arch, k.axes.hz);
        if !env.is_empty() {
            s.push_str(&format!(", {env}"));
        }
        if k.estimated {
            s.push_str(", estimate");
        }
        s
    }

    /// A whole cell in one short line.
    pub fn cell(&self, k: &CellKey) -> String {
        format!("{} {} {}", self.column(k), k.axes.variant, k.volume())
    }
}

//! Renderers: one small file per format, each a pure function of a
//! [`Report`](crate::Report) (or a compare result) returning text.

use std::collections::{BTreeMap, BTreeSet};

use crate::cells::CellKey;

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
    provider: bool,
    accel: bool,
    machine: bool,
    source: bool,
    wait_mult: bool,
    storage: bool,
}

impl Labeller {
    pub fn new<'a>(keys: impl IntoIterator<Item = &'a CellKey>) -> Labeller {
        let keys: Vec<&CellKey> = keys.into_iter().collect();
        let varies = |f: &dyn Fn(&CellKey) -> String| {
            keys.iter().map(|k| f(k)).collect::<BTreeSet<_>>().len() > 1
        };
        // Machines always differ between arches; they matter only when one
        // arch ran on several.
        let mut machines: BTreeMap<_, BTreeSet<&str>> = BTreeMap::new();
        for k in &keys {
            machines
                .entry(k.axes.arch)
                .or_default()
                .insert(k.testbed.machine.as_str());
        }
        Labeller {
            provider: varies(&|k| k.testbed.provider.to_string()),
            accel: varies(&|k| k.testbed.accel.to_string()),
            machine: machines.values().any(|m| m.len() > 1),
            source: varies(&|k| k.axes.source.to_string()),
            wait_mult: varies(&|k| k.axes.wait_mult.to_string()),
            storage: varies(&|k| k.testbed.storage.to_string()),
        }
    }

    /// The environment part: empty when every cell shares it.
    pub fn env(&self, k: &CellKey) -> String {
        let mut parts = Vec::new();
        if self.provider {
            parts.push(k.testbed.provider.to_string());
        }
        if self.accel {
            parts.push(k.testbed.accel.to_string());
        }
        if self.machine {
            parts.push(k.testbed.machine.to_string());
        }
        if self.source {
            parts.push(k.axes.source.to_string());
        }
        if self.wait_mult {
            parts.push(format!("w{}", k.axes.wait_mult));
        }
        if self.storage {
            parts.push(format!("storage={}", k.testbed.storage));
        }
        parts.join(" ")
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

//! Knobs: the axes a cell gained after the first table, one line each.
//!
//! A knob is an integer a spec sets under `[knobs]`, one value for all
//! its cells or a list swept as an axis of the matrix
//! (`NAME = [a, b]`), with a default every older row had and a range
//! (and, where a line says so, a rule such as "a power of two") a spec is
//! held to. Its line in `knob_table!` below is all the harness needs to
//! carry it: the knob's type, its field of [`Knobs`] (so of every plan's
//! and row's axes), its column at the end of `results.csv` and of the
//! history's table (`results::COLUMN_KINDS`), its row of the key's fields
//! (`FIELDS`: the column, the order, the JSON, the label word and the
//! series id, which leaves the knob out at its default so no stored
//! series or alert id moves; the cell id, KCIDB's test and the report's
//! ratio pairs follow from those rows), its key in a spec's `[knobs]`,
//! and what it does: the mkfs.ext4 flag it is passed to in the guest
//! (`mkfs "-X"`, only off its default, so default rows run the mkfs they
//! always ran) and whether a zeroing's time scales with it (`scales
//! zeroing`: the model's zeroing and the `ebs` profile's target z1 are in
//! proportion to it, `model::zeroing_s`). Besides the line, a knob needs a
//! history migration (a folder under `lazyinit-history/migrations/`), its
//! column's paragraph in `docs/result-csv.md` and a test; the test
//! `tests/knob_files.rs` counts the files that name it.

use serde::{Deserialize, Serialize};

use super::key::{CellKey, KeyField};
use crate::results::ColumnKind;

/// A knob's value in a spec: one number for every cell, or a list of
/// them, each a value of an axis the matrix sweeps.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(untagged)]
pub enum KnobValues<T> {
    One(T),
    Many(Vec<T>),
}

// By hand, so a wrong value says what to write (an untagged enum only
// says "no variant matched").
impl<'de, T: Deserialize<'de>> Deserialize<'de> for KnobValues<T> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw<T> {
            One(T),
            Many(Vec<T>),
            // Whole numbers the knob's type does not hold: named.
            Int(i64),
            Ints(Vec<i64>),
        }
        let out_of_range = |shown: String| {
            serde::de::Error::custom(format!(
                "{shown} is out of the knob's range: give a value it takes (docs/result-csv.md gives each knob's)"
            ))
        };
        match Raw::deserialize(d) {
            Ok(Raw::One(v)) => Ok(KnobValues::One(v)),
            Ok(Raw::Many(v)) => Ok(KnobValues::Many(v)),
            Ok(Raw::Int(v)) => Err(out_of_range(format!("`{v}`"))),
            Ok(Raw::Ints(v)) => Err(out_of_range(format!("{v:?}"))),
            Err(_) => Err(serde::de::Error::custom(
                "a knob is a number or a list of numbers (`512` or `[128, 256]`)",
            )),
        }
    }
}

impl<T: Copy + PartialEq + std::fmt::Display> KnobValues<T> {
    /// The values, each once, in the spec's order.
    pub fn values(&self, name: &str) -> Result<Vec<T>, String> {
        let v = match self {
            KnobValues::One(v) => vec![*v],
            KnobValues::Many(v) => v.clone(),
        };
        if v.is_empty() {
            return Err(format!("knobs.{name}: list at least one value"));
        }
        if let Some((_, x)) = v.iter().enumerate().find(|(i, x)| v[..*i].contains(x)) {
            return Err(format!(
                "knobs.{name}: `{x}` is listed twice; list each value once (use repetitions for more runs)"
            ));
        }
        Ok(v)
    }
}

/// Defines the knobs: for each line `name: Type(u32) = default, word
/// "w", lo..=hi[, where check "what"][, mkfs "-X"][, scales zeroing];` a
/// newtype `Type` (its `Default` the default), a field `name` of
/// [`Knobs`] and of [`SpecKnobs`], its column kind, its key field, its
/// mkfs flag and its part of the zeroing's scale. `where check "what"`
/// refuses a value `v` for which `v.check()` is false, saying it must be
/// `what`. The key fields read a key's knobs through `knobs_of`, a
/// function where the macro is invoked. The table at the end of this file
/// invokes it; the tests invoke it again with stand-in knobs.
macro_rules! knob_table {
    ($(
        $(#[doc = $doc:literal])*
        $name:ident: $T:ident($inner:ty) = $default:literal, word $word:literal, $lo:literal..=$hi:literal
        $(, where $check:ident $what:literal)?
        $(, mkfs $flag:literal)?
        $(, scales $zeroing:ident)?;
    )*) => {
        $(
            $(#[doc = $doc])*
            #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
            #[serde(transparent)]
            pub struct $T(pub $inner);

            impl Default for $T {
                fn default() -> Self {
                    $T($default)
                }
            }

            impl std::fmt::Display for $T {
                fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                    write!(f, "{}", self.0)
                }
            }
        )*

        /// Every knob of a cell, each at its default unless a spec set it.
        #[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
        pub struct Knobs {
            $(
                #[serde(default)]
                pub $name: $T,
            )*
        }

        impl Knobs {
            /// Each knob's column and kind, appended to the results' columns.
            pub const COLUMNS: [(&'static str, ColumnKind); {
                let names: &[&str] = &[$(stringify!($name)),*];
                names.len()
            }] = [$((stringify!($name), ColumnKind::Int)),*];

            /// Each knob's field of a cell's key: quiet at its default, in
            /// labels and in series ids alike.
            pub const FIELDS: [KeyField; Self::COLUMNS.len()] = [$(
                KeyField {
                    column: stringify!($name),
                    value: |k: &CellKey| crate::identity::KeyValue::Number(u64::from(knobs_of(k).$name.0)),
                    cmp: |a: &CellKey, b: &CellKey| knobs_of(a).$name.cmp(&knobs_of(b).$name),
                    series: None,
                    series_quiet: Some(|k: &CellKey| knobs_of(k).$name == $T::default()),
                    series_at: 100,
                    word: |k: &CellKey| format!(concat!($word, "{}"), knobs_of(k).$name),
                    quiet_default: Some(|k: &CellKey| knobs_of(k).$name == $T::default()),
                    label_at: 100,
                    env: crate::identity::Env::WhenVaries,
                }
            ),*];

            /// True where there is no knob: rows then write no knob column.
            pub fn none_defined(&self) -> bool {
                Self::COLUMNS.is_empty()
            }

            /// The knob (its spec key, `inode-size`) that owns the
            /// mkfs.ext4 option in `arg`, if one does: `-I`, `-I512`, or
            /// a cluster of short options holding it (`-qI`). Such an
            /// argument in `mkfs-args` would run a mkfs the row does not
            /// record.
            // A test's own table may have no use for it.
            #[allow(dead_code)]
            pub fn mkfs_owner(arg: &str) -> Option<String> {
                let opts = arg.strip_prefix('-').filter(|o| !o.starts_with('-'))?;
                $($(
                    let letter = $flag.trim_start_matches('-');
                    if opts.starts_with(letter)
                        || opts.chars().all(|c| c.is_ascii_alphabetic()) && opts.contains(letter)
                    {
                        return Some(stringify!($name).replace('_', "-"));
                    }
                )?)*
                None
            }

            /// The mkfs.ext4 arguments of the knobs off their defaults
            /// (`-I 128`): none at the defaults, so a default cell runs the
            /// mkfs it always ran.
            pub fn mkfs_args(&self) -> Vec<String> {
                #[allow(unused_mut)]
                let mut out: Vec<String> = Vec::new();
                $($(
                    if self.$name != $T::default() {
                        out.push($flag.to_string());
                        out.push(self.$name.to_string());
                    }
                )?)*
                out
            }

            /// How much longer than at the defaults a zeroing takes: the
            /// product of each `scales zeroing` knob's value over its
            /// default (1 at the defaults).
            pub fn zeroing_scale(&self) -> f64 {
                #[allow(unused_mut)]
                let mut scale = 1.0;
                $($(
                    let _ = stringify!($zeroing);
                    scale *= self.$name.0 as f64 / $default as f64;
                )?)*
                scale
            }
        }

        /// A spec's `[knobs]`: each knob it sets (kebab-case names), one
        /// value or a list the matrix sweeps.
        #[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
        #[serde(rename_all = "kebab-case", deny_unknown_fields)]
        pub struct SpecKnobs {
            $(
                #[serde(default, skip_serializing_if = "Option::is_none")]
                pub $name: Option<KnobValues<$inner>>,
            )*
        }

        impl SpecKnobs {
            /// True where the spec sets no knob: the table is left out of
            /// the spec's text, so its hash (and results folder) is that
            /// of a spec written before knobs existed.
            pub fn is_empty(&self) -> bool {
                true $(&& self.$name.is_none())*
            }

            /// Every combination of the knobs the spec sets (each value
            /// checked against its range and rule, each listed once), the
            /// others at their defaults: one at least, in the table's
            /// order, the first knob's values outermost.
            // With one knob its field is the whole struct: the update
            // that keeps the others is then empty.
            #[allow(clippy::needless_update)]
            pub fn resolve(&self) -> Result<Vec<Knobs>, String> {
                #[allow(unused_mut)]
                let mut all = vec![Knobs::default()];
                $(
                    if let Some(values) = &self.$name {
                        let name = stringify!($name).replace('_', "-");
                        let values = values.values(&name)?;
                        for &v in &values {
                            if !($lo..=$hi).contains(&v) {
                                return Err(format!(
                                    "knobs.{name}: {v} is out of range; use {} to {} (default {})",
                                    $lo,
                                    $hi,
                                    $default,
                                ));
                            }
                            $(
                                if !v.$check() {
                                    return Err(format!(
                                        "knobs.{name}: {v} is not {}; use {} from {} to {} (default {})",
                                        $what, $what, $lo, $hi, $default,
                                    ));
                                }
                            )?
                        }
                        all = all
                            .into_iter()
                            .flat_map(|k| {
                                values.iter().map(move |&v| Knobs {
                                    $name: $T(v),
                                    ..k.clone()
                                })
                            })
                            .collect();
                    }
                )*
                Ok(all)
            }

            /// How many combinations [`SpecKnobs::resolve`] makes, counted
            /// without making them (saturating).
            pub fn count(&self) -> u64 {
                #[allow(unused_mut)]
                let mut n: u64 = 1;
                $(
                    n = n.saturating_mul(match &self.$name {
                        Some(KnobValues::Many(v)) => v.len() as u64,
                        _ => 1,
                    });
                )*
                n
            }
        }
    };
}

// The knobs, each a line (the grammar above `knob_table!`). The first
// table's axes (arch, source, HZ, variant, volume, wait multiplier) are
// fields of `Axes` of their own, at the columns they always had.
knob_table! {
    /// mkfs.ext4's inode size in bytes (`-I`). Each group's inode table,
    /// which lazy-init zeroes, holds a fixed count of inodes (mke2fs's
    /// inode ratio), so its bytes, and the zeroing's time on a volume
    /// that zeroes at a rate, are in proportion to it.
    inode_size: InodeSize(u32) = 256, word "inode", 128..=1024, where is_power_of_two "a power of two", mkfs "-I", scales zeroing;
}

/// A key's knobs, for the key fields `knob_table!` makes.
fn knobs_of(k: &CellKey) -> &Knobs {
    &k.axes.knobs
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cell::{Arch, Hz, KernelSource, Variant};
    use crate::identity::KeyValue;
    use crate::identity::{Accel, Axes, Testbed};
    use crate::size::ByteSize;

    /// The table's generated parts, on a stand-in table of two knobs:
    /// defaults, columns, spec keys and their ranges and rules, mkfs
    /// flags, the zeroing's scale, and key fields quiet at the default.
    mod stand_in {
        use super::super::*;
        knob_table! {
            /// A stand-in knob with every part a line may have.
            table_kb: TableKb(u32) = 256, word "t", 128..=4096, where is_power_of_two "a power of two", mkfs "-T", scales zeroing;
            /// A stand-in knob with none of them.
            journal_mb: JournalMb(u64) = 64, word "j", 4..=1024;
        }
        pub static DEFAULTS: Knobs = Knobs {
            table_kb: TableKb(256),
            journal_mb: JournalMb(64),
        };
        pub static SET: Knobs = Knobs {
            table_kb: TableKb(512),
            journal_mb: JournalMb(64),
        };
        /// The stand-in knobs of a key: its cells at 64 GiB have them at
        /// their defaults, the others set (keys hold the workspace's own
        /// `Knobs`).
        pub fn knobs_of(k: &CellKey) -> &'static Knobs {
            if k.axes.volume == ByteSize(64 << 30) {
                &DEFAULTS
            } else {
                &SET
            }
        }
        use crate::size::ByteSize;
    }
    use stand_in::{JournalMb, Knobs as TwoKnobs, SpecKnobs as TwoSpecKnobs, TableKb};

    fn key(volume_gib: u64) -> CellKey {
        CellKey {
            testbed: Testbed {
                provider: "qemu".into(),
                machine: "qemu-x86_64".into(),
                accel: Accel::Tcg,
                storage: crate::storage::StorageProfile::None.into(),
            },
            axes: Axes::new(
                Arch::X86_64,
                KernelSource::Debian61,
                Hz::new(250).unwrap(),
                Variant::Fix,
                ByteSize(volume_gib << 30),
            )
            .into(),
            estimated: false,
        }
    }

    fn two(text: &str) -> Result<Vec<TwoKnobs>, String> {
        toml::from_str::<TwoSpecKnobs>(text)
            .map_err(|e| e.to_string())?
            .resolve()
    }

    #[test]
    fn a_knob_line_gives_its_default_column_spec_key_and_range() {
        let k = TwoKnobs::default();
        assert_eq!(k, stand_in::DEFAULTS);
        assert_eq!(k.table_kb, TableKb(256));
        assert_eq!(k.journal_mb.0, 64);
        assert!(!k.none_defined());
        assert_eq!(
            TwoKnobs::COLUMNS,
            [
                ("table_kb", ColumnKind::Int),
                ("journal_mb", ColumnKind::Int)
            ]
        );
        let spec: TwoSpecKnobs = toml::from_str("table-kb = 512").unwrap();
        assert!(!spec.is_empty());
        assert_eq!(spec.resolve().unwrap(), vec![stand_in::SET.clone()]);
        let e = toml::from_str::<TwoSpecKnobs>("table_kb = 512").unwrap_err();
        assert!(e.to_string().contains("unknown field `table_kb`"), "{e}");
        assert_eq!(
            two("journal-mb = 2048").unwrap_err(),
            "knobs.journal-mb: 2048 is out of range; use 4 to 1024 (default 64)"
        );
        assert!(TwoSpecKnobs::default().is_empty());
        assert_eq!(toml::to_string(&TwoSpecKnobs::default()).unwrap(), "");
        // One value writes back as one value: a spec's text (its hash,
        // its results folder) is what it was before knobs could be lists.
        assert_eq!(toml::to_string(&spec).unwrap(), "table-kb = 512\n");
        // JSON (the plan's, flattened into a cell) names each knob.
        assert_eq!(
            serde_json::to_string(&stand_in::SET).unwrap(),
            r#"{"table_kb":512,"journal_mb":64}"#
        );
    }

    /// A line's rule (`where is_power_of_two`), its mkfs flag (passed only
    /// off the default) and its part of the zeroing's scale.
    #[test]
    fn a_knob_line_gives_its_rule_mkfs_flag_and_zeroing_scale() {
        assert_eq!(
            two("table-kb = 384").unwrap_err(),
            "knobs.table-kb: 384 is not a power of two; use a power of two from 128 to 4096 (default 256)"
        );
        assert_eq!(TwoKnobs::default().mkfs_args(), Vec::<String>::new());
        assert_eq!(stand_in::SET.mkfs_args(), ["-T", "512"]);
        let j = TwoKnobs {
            journal_mb: JournalMb(128),
            ..TwoKnobs::default()
        };
        assert!(j.mkfs_args().is_empty(), "a knob with no mkfs flag");
        assert_eq!(TwoKnobs::default().zeroing_scale(), 1.0);
        assert_eq!(stand_in::SET.zeroing_scale(), 2.0);
        assert_eq!(j.zeroing_scale(), 1.0, "a knob that does not scale it");
    }

    /// A list is an axis: every combination of the lists, the first
    /// knob's values outermost, each value checked and listed once.
    #[test]
    fn knob_lists_are_swept_as_axes() {
        let all = two("table-kb = [128, 512]\njournal-mb = [4, 8, 16]").unwrap();
        let pairs: Vec<(u32, u64)> = all.iter().map(|k| (k.table_kb.0, k.journal_mb.0)).collect();
        assert_eq!(
            pairs,
            [(128, 4), (128, 8), (128, 16), (512, 4), (512, 8), (512, 16)]
        );
        let spec: TwoSpecKnobs =
            toml::from_str("table-kb = [128, 512]\njournal-mb = [4, 8, 16]").unwrap();
        assert_eq!(spec.count(), 6);
        assert_eq!(TwoSpecKnobs::default().count(), 1);
        assert_eq!(
            toml::to_string(&spec).unwrap(),
            "table-kb = [128, 512]\njournal-mb = [4, 8, 16]\n"
        );
        for (text, want) in [
            ("table-kb = []", "knobs.table-kb: list at least one value"),
            (
                "table-kb = [128, 128]",
                "knobs.table-kb: `128` is listed twice; list each value once (use repetitions for more runs)",
            ),
            ("table-kb = [128, 200]", "knobs.table-kb: 200 is not a power of two"),
            ("journal-mb = [8, 1]", "knobs.journal-mb: 1 is out of range"),
        ] {
            let e = two(text).unwrap_err();
            assert!(e.starts_with(want), "{text}: {e}");
        }
        let e = two("table-kb = 'big'").unwrap_err();
        assert!(e.contains("a knob is a number or a list of numbers"), "{e}");
        // A whole number the knob's type cannot hold is out of range,
        // not "not a number".
        for text in [
            "table-kb = 4294967296",
            "table-kb = -1",
            "table-kb = [128, 4294967296]",
        ] {
            let e = two(text).unwrap_err();
            assert!(e.contains("is out of the knob's range"), "{text}: {e}");
        }
    }

    /// mkfs.ext4 options a knob owns are found however they are spelled,
    /// and the others are left alone (`-i` is not `-I`).
    #[test]
    fn the_mkfs_options_a_knob_owns_are_named() {
        for arg in ["-I", "-I512", "-qI", "-FqI"] {
            assert_eq!(
                Knobs::mkfs_owner(arg).as_deref(),
                Some("inode-size"),
                "{arg}"
            );
        }
        for arg in [
            "-i",
            "-i16384",
            "-F",
            "-q",
            "512",
            "--I",
            "-E",
            "lazy_itable_init=1",
            "I",
        ] {
            assert_eq!(Knobs::mkfs_owner(arg), None, "{arg}");
        }
    }

    /// A knob's key field: its value, word and order, and quiet at its
    /// default in labels and series ids, so that adding it moves no
    /// stored series id (nor the ids of their alerts).
    #[test]
    fn a_knob_at_its_default_keeps_every_label_and_series_id() {
        let (plain, set) = (key(64), key(128));
        let f = &TwoKnobs::FIELDS[0];
        assert_eq!(f.column, "table_kb");
        assert_eq!((f.value)(&set), KeyValue::Number(512));
        assert_eq!((f.word)(&set), "t512");
        assert_eq!((f.cmp)(&plain, &set), std::cmp::Ordering::Less);
        assert!(f.series_quiet.unwrap()(&plain) && f.quiet_default.unwrap()(&plain));
        assert!(!f.series_quiet.unwrap()(&set) && !f.quiet_default.unwrap()(&set));
        let mut wider: Vec<KeyField> = crate::identity::key::FIRST.into_iter().collect();
        wider.extend(TwoKnobs::FIELDS);
        assert_eq!(plain.series_id_of(&wider), plain.series_id());
        assert_eq!(
            set.series_id_of(&wider),
            "qemu/qemu-x86_64/tcg/x86_64/debian-6.1/hz250/fix/128GiB/w10/none/t512/measured"
        );
    }

    /// The workspace's knobs at their defaults change no text a key
    /// writes: a spec that sets none resolves to them, and every series
    /// id and label is the one written before knobs existed.
    #[test]
    fn the_workspace_knobs_at_their_defaults_keep_every_text() {
        let k = Knobs::default();
        assert!(SpecKnobs::default().is_empty());
        assert_eq!(SpecKnobs::default().resolve().unwrap(), vec![k.clone()]);
        assert!(k.mkfs_args().is_empty());
        assert_eq!(k.zeroing_scale(), 1.0);
        let key = key(64);
        assert_eq!(
            key.series_id(),
            "qemu/qemu-x86_64/tcg/x86_64/debian-6.1/hz250/fix/64GiB/w10/none/measured"
        );
        assert_eq!(
            key.label(),
            "qemu tcg qemu-x86_64 x86_64 debian-6.1 HZ250 fix 64GiB"
        );
    }

    /// The inode size: a power of two from 128 to 1024, swept as a list,
    /// `-I` to mkfs off its default, the zeroing in proportion, and its
    /// word in labels and series ids only off its default.
    #[test]
    fn the_inode_size_reaches_mkfs_and_scales_the_zeroing() {
        let spec: SpecKnobs = toml::from_str("inode-size = [128, 256]").unwrap();
        let all = spec.resolve().unwrap();
        assert_eq!(all.len(), 2);
        assert_eq!(all[1], Knobs::default());
        let small = &all[0];
        assert_eq!(small.inode_size, InodeSize(128));
        assert_eq!(small.mkfs_args(), ["-I", "128"]);
        assert_eq!(small.zeroing_scale(), 0.5);
        for (text, want) in [
            (
                "inode-size = 200",
                "knobs.inode-size: 200 is not a power of two; use a power of two from 128 to 1024 (default 256)",
            ),
            (
                "inode-size = 2048",
                "knobs.inode-size: 2048 is out of range; use 128 to 1024 (default 256)",
            ),
            (
                "inode-size = 64",
                "knobs.inode-size: 64 is out of range; use 128 to 1024 (default 256)",
            ),
        ] {
            let s: SpecKnobs = toml::from_str(text).unwrap();
            assert_eq!(s.resolve().unwrap_err(), want);
        }
        let mut k = key(64);
        k.axes.knobs = small.clone();
        assert_eq!(
            k.label(),
            "qemu tcg qemu-x86_64 x86_64 debian-6.1 HZ250 fix 64GiB inode128"
        );
        assert_eq!(
            k.series_id(),
            "qemu/qemu-x86_64/tcg/x86_64/debian-6.1/hz250/fix/64GiB/w10/none/inode128/measured"
        );
    }
}

//! Knobs: the axes a cell gained after the first table, one line each.
//!
//! A knob is an integer a spec may set once for all its cells (under
//! `[knobs]`), with a default every older row had and a range a spec is
//! held to. Its line in `knob_table!` below is all the harness needs to
//! carry it: the knob's type, its field of [`Knobs`] (so of every plan's
//! and row's axes), its column at the end of `results.csv` and of the
//! history's table (`results::COLUMN_KINDS`), its row of the key's fields
//! (`FIELDS`: the column, the order, the JSON, the label word and the
//! series id, which leaves the knob out at its default so no stored
//! series or alert id moves) and its key in a spec's `[knobs]`, with the
//! range checked when the spec is read. Besides the line, a knob needs a
//! history migration (a folder under `lazyinit-history/migrations/`), its
//! column's paragraph in `docs/result-csv.md` and a test.
//!
//! What a knob changes in a guest (an argument to mkfs, a mount option)
//! is the protocol's: the identity only carries it.

use serde::{Deserialize, Serialize};

use super::key::{CellKey, KeyField};
use crate::results::ColumnKind;

/// Defines the knobs: for each line `name: Type(u32) = default, word
/// "w", lo..=hi;` a newtype `Type` (its `Default` the default), a field
/// `name` of [`Knobs`] and of [`SpecKnobs`], its column kind and its key
/// field. The key fields read a key's knobs through `knobs_of`, a
/// function where the macro is invoked. The table at the end of this file
/// invokes it; the tests invoke it again with stand-in knobs.
macro_rules! knob_table {
    ($(
        $(#[doc = $doc:literal])*
        $name:ident: $T:ident($inner:ty) = $default:literal, word $word:literal, $lo:literal..=$hi:literal;
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
        }

        /// A spec's `[knobs]`: each knob it sets (kebab-case names).
        #[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
        #[serde(rename_all = "kebab-case", deny_unknown_fields)]
        pub struct SpecKnobs {
            $(
                #[serde(default, skip_serializing_if = "Option::is_none")]
                pub $name: Option<$inner>,
            )*
        }

        impl SpecKnobs {
            /// True where the spec sets no knob: the table is left out of
            /// the spec's text, so its hash (and results folder) is that
            /// of a spec written before knobs existed.
            pub fn is_empty(&self) -> bool {
                true $(&& self.$name.is_none())*
            }

            /// The knobs the spec sets, each checked against its range,
            /// the others at their defaults.
            pub fn resolve(&self) -> Result<Knobs, String> {
                #[allow(unused_mut)]
                let mut k = Knobs::default();
                $(
                    if let Some(v) = self.$name {
                        if !($lo..=$hi).contains(&v) {
                            return Err(format!(
                                "knobs.{}: {v} is out of range; use {} to {} (default {})",
                                stringify!($name).replace('_', "-"),
                                $lo,
                                $hi,
                                $default,
                            ));
                        }
                        k.$name = $T(v);
                    }
                )*
                Ok(k)
            }
        }
    };
}

// The knobs. None yet: the first table's axes (arch, source, HZ, variant,
// volume, wait multiplier) are fields of `Axes` of their own, at the
// columns they always had. A new knob is a line here, e.g.
//     /// mkfs.ext4's inode size (`-I`).
//     inode_size: InodeSize(u32) = 256, word "inode", 128..=4096;
knob_table! {}

/// A key's knobs, for the key fields `knob_table!` makes.
#[allow(dead_code)]
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

    /// The table's generated parts, on a stand-in table of two knobs (the
    /// workspace's own has none yet): defaults, columns, spec keys and
    /// their ranges, and key fields quiet at the default.
    mod stand_in {
        use super::super::*;
        knob_table! {
            /// A stand-in knob.
            inode_size: InodeSize(u32) = 256, word "inode", 128..=4096;
            journal_mb: JournalMb(u64) = 64, word "j", 4..=1024;
        }
        pub static DEFAULTS: Knobs = Knobs {
            inode_size: InodeSize(256),
            journal_mb: JournalMb(64),
        };
        pub static SET: Knobs = Knobs {
            inode_size: InodeSize(512),
            journal_mb: JournalMb(64),
        };
        /// The stand-in knobs of a key: its cells at 64 GiB have them at
        /// their defaults, the others set (keys hold the workspace's own
        /// `Knobs`, which has none).
        pub fn knobs_of(k: &CellKey) -> &'static Knobs {
            if k.axes.volume == ByteSize(64 << 30) {
                &DEFAULTS
            } else {
                &SET
            }
        }
        use crate::size::ByteSize;
    }
    use stand_in::{InodeSize, Knobs as TwoKnobs, SpecKnobs as TwoSpecKnobs};

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

    #[test]
    fn a_knob_line_gives_its_default_column_spec_key_and_range() {
        let k = TwoKnobs::default();
        assert_eq!(k, stand_in::DEFAULTS);
        assert_eq!(k.inode_size, InodeSize(256));
        assert_eq!(k.journal_mb.0, 64);
        assert!(!k.none_defined());
        assert_eq!(
            TwoKnobs::COLUMNS,
            [
                ("inode_size", ColumnKind::Int),
                ("journal_mb", ColumnKind::Int)
            ]
        );
        let spec: TwoSpecKnobs = toml::from_str("inode-size = 512").unwrap();
        assert!(!spec.is_empty());
        let set = spec.resolve().unwrap();
        assert_eq!(set, stand_in::SET);
        let e = toml::from_str::<TwoSpecKnobs>("inode_size = 512").unwrap_err();
        assert!(e.to_string().contains("unknown field `inode_size`"), "{e}");
        let far: TwoSpecKnobs = toml::from_str("journal-mb = 2048").unwrap();
        assert_eq!(
            far.resolve().unwrap_err(),
            "knobs.journal-mb: 2048 is out of range; use 4 to 1024 (default 64)"
        );
        assert!(TwoSpecKnobs::default().is_empty());
        assert_eq!(toml::to_string(&TwoSpecKnobs::default()).unwrap(), "");
        // JSON (the plan's, flattened into a cell) names each knob.
        assert_eq!(
            serde_json::to_string(&set).unwrap(),
            r#"{"inode_size":512,"journal_mb":64}"#
        );
    }

    /// A knob's key field: its value, word and order, and quiet at its
    /// default in labels and series ids, so that adding it moves no
    /// stored series id (nor the ids of their alerts).
    #[test]
    fn a_knob_at_its_default_keeps_every_label_and_series_id() {
        let (plain, set) = (key(64), key(128));
        let f = &TwoKnobs::FIELDS[0];
        assert_eq!(f.column, "inode_size");
        assert_eq!((f.value)(&set), KeyValue::Number(512));
        assert_eq!((f.word)(&set), "inode512");
        assert_eq!((f.cmp)(&plain, &set), std::cmp::Ordering::Less);
        assert!(f.series_quiet.unwrap()(&plain) && f.quiet_default.unwrap()(&plain));
        assert!(!f.series_quiet.unwrap()(&set) && !f.quiet_default.unwrap()(&set));
        let mut wider: Vec<KeyField> = crate::identity::FIELDS.into_iter().collect();
        wider.extend(TwoKnobs::FIELDS);
        assert_eq!(plain.series_id_of(&wider), plain.series_id());
        assert_eq!(
            set.series_id_of(&wider),
            "qemu/qemu-x86_64/tcg/x86_64/debian-6.1/hz250/fix/128GiB/w10/none/inode512/measured"
        );
    }

    /// The workspace's knobs at their defaults change no text a key
    /// writes: a spec that sets none resolves to them, and every series
    /// id and label is the one written before knobs existed.
    #[test]
    fn the_workspace_knobs_at_their_defaults_keep_every_text() {
        let k = Knobs::default();
        assert!(SpecKnobs::default().is_empty());
        assert_eq!(SpecKnobs::default().resolve().unwrap(), k);
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
}

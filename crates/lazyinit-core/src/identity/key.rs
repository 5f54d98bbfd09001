//! A cell's key, and the one table of its fields ([`FIELDS`]).
//!
//! A cell of a report, a series of the history and an import's check are
//! keyed by a row's [`Testbed`] and [`RowAxes`] (and whether it is an
//! estimate). Everything that lists those fields follows from [`FIELDS`]:
//! the key's CSV columns and values, its order, its JSON, its one-line
//! label, which fields a table names only when its cells differ in them
//! (the report's `Labeller`), the history's series id and the import's
//! check of rows against their plan. A new axis is a knob, one line of
//! `knobs.rs`, which makes its row here ([`Knobs::FIELDS`]).

use std::cmp::Ordering;
use std::fmt;

use serde::{Serialize, Serializer};

use super::{Knobs, RowAxes, Testbed};
use crate::cell::DEFAULT_WAIT_MULT;
use crate::results::ResultRow;
use crate::size::ByteSize;

/// The configuration that identifies a cell: the row's testbed and axes,
/// and whether it is an estimate. Cells sort as their text did when the
/// key's fields were strings ([`FIELDS`] order, then `estimated`), and
/// serialize flat under the fields' column names.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct CellKey {
    pub testbed: Testbed,
    pub axes: RowAxes,
    /// Early-stop estimates are never pooled or compared with measurements
    /// unless asked (`compare --ignore estimated`).
    pub estimated: bool,
}

/// A key field's value as outputs write it: text, or a number (which JSON
/// writes as a number).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyValue {
    Text(String),
    Number(u64),
}

impl fmt::Display for KeyValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KeyValue::Text(s) => f.write_str(s),
            KeyValue::Number(n) => write!(f, "{n}"),
        }
    }
}

impl Serialize for KeyValue {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            KeyValue::Text(t) => s.serialize_str(t),
            KeyValue::Number(n) => s.serialize_u64(*n),
        }
    }
}

/// Where a field stands in a table's short labels (`Labeller`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Env {
    /// The table's shape (arch, HZ, variant, volume): always shown there.
    Shape,
    /// Named only when the cells shown differ in it.
    WhenVaries,
    /// Named only when the cells of one arch differ in it (machines
    /// always differ between arches).
    WhenVariesWithinArch,
}

/// One field of a cell's key.
#[derive(Clone, Copy)]
pub struct KeyField {
    /// Its column in CSV outputs and in the history.
    pub column: &'static str,
    /// Its value as CSV and JSON outputs write it.
    pub value: fn(&CellKey) -> KeyValue,
    /// Its part of the key's order.
    pub cmp: fn(&CellKey, &CellKey) -> Ordering,
    /// Its part of a series id where that is not its label word
    /// (`hz250`, not `HZ250`; `none` for no storage profile).
    pub series: Option<fn(&CellKey) -> String>,
    /// That part's place in the id: ids keep the order they always had
    /// (volume before wait), as stored alerts are keyed by them.
    pub series_at: u8,
    /// The id leaves the part out where this says the value is the one
    /// every row had before the field existed. A field added after
    /// series were stored sets it, so the ids of those series, and the
    /// ids and acks of their alerts (`alert_id` hashes the series id),
    /// stay what they were; the ten fields of the first table have
    /// `None` (their parts were always written).
    pub series_quiet: Option<fn(&CellKey) -> bool>,
    /// Its word in labels (`HZ250`, `w10`, `storage=ebs`, ...).
    pub word: fn(&CellKey) -> String,
    /// The one-line label leaves the word out when this says the value
    /// is the default one (`w10`, no storage profile).
    pub quiet_default: Option<fn(&CellKey) -> bool>,
    /// The word's place in the one-line label: labels keep the order
    /// they always had (accel before machine).
    pub label_at: u8,
    pub env: Env,
}

fn text(v: impl fmt::Display) -> KeyValue {
    KeyValue::Text(v.to_string())
}

/// The first table's fields, in the order of the CSV columns.
pub(crate) const FIRST: [KeyField; 10] = [
    KeyField {
        column: "provider",
        value: |k| text(&k.testbed.provider),
        cmp: |a, b| a.testbed.provider.cmp(&b.testbed.provider),
        series: None,
        series_quiet: None,
        series_at: 0,
        word: |k| k.testbed.provider.to_string(),
        quiet_default: None,
        label_at: 0,
        env: Env::WhenVaries,
    },
    KeyField {
        column: "machine",
        value: |k| text(&k.testbed.machine),
        cmp: |a, b| a.testbed.machine.cmp(&b.testbed.machine),
        series: None,
        series_quiet: None,
        series_at: 1,
        word: |k| k.testbed.machine.to_string(),
        quiet_default: None,
        label_at: 2,
        env: Env::WhenVariesWithinArch,
    },
    KeyField {
        column: "accel",
        value: |k| text(&k.testbed.accel),
        cmp: |a, b| a.testbed.accel.cmp(&b.testbed.accel),
        series: None,
        series_quiet: None,
        series_at: 2,
        word: |k| k.testbed.accel.to_string(),
        quiet_default: None,
        label_at: 1,
        env: Env::WhenVaries,
    },
    KeyField {
        column: "arch",
        value: |k| text(k.axes.arch),
        cmp: |a, b| a.axes.arch.cmp(&b.axes.arch),
        series: None,
        series_quiet: None,
        series_at: 3,
        word: |k| k.axes.arch.to_string(),
        quiet_default: None,
        label_at: 3,
        env: Env::Shape,
    },
    KeyField {
        column: "kernel_source",
        value: |k| text(&k.axes.source),
        cmp: |a, b| a.axes.source.cmp(&b.axes.source),
        series: None,
        series_quiet: None,
        series_at: 4,
        word: |k| k.axes.source.to_string(),
        quiet_default: None,
        label_at: 4,
        env: Env::WhenVaries,
    },
    KeyField {
        column: "hz",
        value: |k| KeyValue::Number(k.axes.hz.get().into()),
        cmp: |a, b| a.axes.hz.cmp(&b.axes.hz),
        series: Some(|k| format!("hz{}", k.axes.hz)),
        series_quiet: None,
        series_at: 5,
        word: |k| format!("HZ{}", k.axes.hz),
        quiet_default: None,
        label_at: 5,
        env: Env::Shape,
    },
    KeyField {
        column: "variant",
        value: |k| text(k.axes.variant),
        cmp: |a, b| a.axes.variant.cmp(&b.axes.variant),
        series: None,
        series_quiet: None,
        series_at: 6,
        word: |k| k.axes.variant.to_string(),
        quiet_default: None,
        label_at: 6,
        env: Env::Shape,
    },
    KeyField {
        column: "wait_mult",
        value: |k| KeyValue::Number(k.axes.wait_mult.into()),
        cmp: |a, b| a.axes.wait_mult.cmp(&b.axes.wait_mult),
        series: None,
        series_quiet: None,
        series_at: 8,
        word: |k| format!("w{}", k.axes.wait_mult),
        quiet_default: Some(|k| k.axes.wait_mult == DEFAULT_WAIT_MULT),
        label_at: 8,
        env: Env::WhenVaries,
    },
    KeyField {
        column: "volume_bytes",
        value: |k| KeyValue::Number(k.axes.volume.0),
        cmp: |a, b| a.axes.volume.cmp(&b.axes.volume),
        series: None,
        series_quiet: None,
        series_at: 7,
        word: |k| k.axes.volume.to_string(),
        quiet_default: None,
        label_at: 7,
        env: Env::Shape,
    },
    KeyField {
        column: "storage_profile",
        value: |k| text(&k.testbed.storage),
        cmp: |a, b| a.testbed.storage.cmp(&b.testbed.storage),
        series: Some(|k| {
            if k.testbed.storage.is_none() {
                "none".to_string()
            } else {
                k.testbed.storage.to_string()
            }
        }),
        series_quiet: None,
        series_at: 9,
        word: |k| format!("storage={}", k.testbed.storage),
        quiet_default: Some(|k| k.testbed.storage.is_none()),
        label_at: 9,
        env: Env::WhenVaries,
    },
];

/// Every field of the key: the first table's, in the order of the CSV
/// columns, then each knob's ([`Knobs::FIELDS`]).
pub const FIELDS: [KeyField; FIRST.len() + Knobs::FIELDS.len()] =
    crate::concat(FIRST, Knobs::FIELDS);

/// True where `FIELDS[i]` is a knob at its default in `k`: left out of
/// a key's JSON and of tables whose keys all have it so.
fn knob_at_default(i: usize, f: &KeyField, k: &CellKey) -> bool {
    i >= FIRST.len() && f.quiet_default.is_some_and(|quiet| quiet(k))
}

/// The fields in their order in labels, each with its index in [`FIELDS`].
pub fn label_order() -> impl Iterator<Item = (usize, &'static KeyField)> {
    let mut at: Vec<(usize, &'static KeyField)> = FIELDS.iter().enumerate().collect();
    at.sort_by_key(|(_, f)| f.label_at);
    at.into_iter()
}

impl CellKey {
    /// The key's columns in CSV outputs, in field order.
    pub const COLUMNS: [&'static str; FIELDS.len()] = {
        let mut c = [""; FIELDS.len()];
        let mut i = 0;
        while i < FIELDS.len() {
            c[i] = FIELDS[i].column;
            i += 1;
        }
        c
    };

    /// The fields a table of `keys` writes, in [`FIELDS`] order: every
    /// field of the first table, and a knob's only where one of the keys
    /// is off its default, so that a report or a comparison of runs that
    /// never set a knob reads as it did before the knob existed.
    pub fn shown_fields<'a>(keys: impl IntoIterator<Item = &'a CellKey>) -> Vec<&'static KeyField> {
        let keys: Vec<&CellKey> = keys.into_iter().collect();
        FIELDS
            .iter()
            .enumerate()
            // The first table's always (a report of no cell keeps its
            // columns); a knob where a key is off its default.
            .filter(|(i, f)| *i < FIRST.len() || keys.iter().any(|k| !knob_at_default(*i, f, k)))
            .map(|(_, f)| f)
            .collect()
    }

    /// The fields after the first table (the knobs') whose value in this
    /// key is not the default, in [`FIELDS`] order: what tells cells of
    /// one first-table key apart where a text names a cell (the cell id,
    /// KCIDB's test path), and nothing where every knob is at its default.
    pub fn off_default(&self) -> Vec<&'static KeyField> {
        FIELDS
            .iter()
            .enumerate()
            .filter(|(i, f)| *i >= FIRST.len() && !knob_at_default(*i, f, self))
            .map(|(_, f)| f)
            .collect()
    }

    /// The key's values of `fields` as CSV outputs write them.
    pub fn values_of(&self, fields: &[&KeyField]) -> Vec<String> {
        fields.iter().map(|f| (f.value)(self).to_string()).collect()
    }

    pub fn of(row: &ResultRow) -> CellKey {
        CellKey {
            testbed: row.testbed.clone(),
            axes: row.axes.clone(),
            estimated: row.measured.estimated,
        }
    }

    /// The key's values as CSV outputs write them, in [`CellKey::COLUMNS`] order.
    pub fn values(&self) -> [String; FIELDS.len()] {
        std::array::from_fn(|i| (FIELDS[i].value)(self).to_string())
    }

    pub fn volume(&self) -> ByteSize {
        self.axes.volume
    }

    /// One line naming every field (a default wait or storage left out),
    /// for notes and compare output.
    pub fn label(&self) -> String {
        let mut words: Vec<String> = label_order()
            .filter(|(_, f)| !f.quiet_default.is_some_and(|quiet| quiet(self)))
            .map(|(_, f)| (f.word)(self))
            .collect();
        if self.estimated {
            words.push("(estimate)".into());
        }
        words.join(" ")
    }

    /// The id of the key's series, e.g.
    /// `qemu/qemu-x86_64/tcg/x86_64/debian-6.1/hz250/fix/64GiB/w10/ebs/measured`:
    /// every field (in the id's order), then whether it is an estimate.
    pub fn series_id(&self) -> String {
        self.series_id_of(&FIELDS)
    }

    /// [`CellKey::series_id`] over a table of `fields`.
    pub(crate) fn series_id_of(&self, fields: &[KeyField]) -> String {
        let mut at: Vec<&KeyField> = fields
            .iter()
            .filter(|f| !f.series_quiet.is_some_and(|quiet| quiet(self)))
            .collect();
        at.sort_by_key(|f| f.series_at);
        let mut parts: Vec<String> = at
            .iter()
            .map(|f| f.series.unwrap_or(f.word)(self))
            .collect();
        parts.push(
            if self.estimated {
                "estimated"
            } else {
                "measured"
            }
            .into(),
        );
        parts.join("/")
    }

    /// The first field in which `self` and `other` differ, if any.
    pub fn first_difference(&self, other: &CellKey) -> Option<&'static KeyField> {
        FIELDS
            .iter()
            .find(|f| (f.cmp)(self, other) != Ordering::Equal)
    }
}

impl Ord for CellKey {
    fn cmp(&self, other: &Self) -> Ordering {
        FIELDS
            .iter()
            .map(|f| (f.cmp)(self, other))
            .find(|o| *o != Ordering::Equal)
            .unwrap_or(Ordering::Equal)
            .then(self.estimated.cmp(&other.estimated))
            // Then the identity's own order: a field the table does not
            // list still tells keys apart (Ord agrees with Eq).
            .then_with(|| self.axes.cmp(&other.axes))
            .then_with(|| self.testbed.cmp(&other.testbed))
    }
}

impl PartialOrd for CellKey {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Serialize for CellKey {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let mut m = s.serialize_struct("CellKey", FIELDS.len() + 1)?;
        for (i, f) in FIELDS.iter().enumerate() {
            // A knob at its default is left out, as before it existed.
            if knob_at_default(i, f, self) {
                m.skip_field(f.column)?;
                continue;
            }
            m.serialize_field(f.column, &(f.value)(self))?;
        }
        m.serialize_field("estimated", &self.estimated)?;
        m.end()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cell::{Arch, Hz, KernelSource, Variant};
    use crate::identity::{Accel, CellAxes};
    use crate::storage::StorageProfile;

    fn key(storage: StorageProfile, wait_mult: u32, estimated: bool) -> CellKey {
        CellKey {
            testbed: Testbed {
                provider: "qemu".into(),
                machine: "qemu-x86_64".into(),
                accel: Accel::Tcg,
                storage: storage.into(),
            },
            axes: CellAxes::new(
                Arch::X86_64,
                KernelSource::Debian61,
                Hz::new(250).unwrap(),
                Variant::Fix,
                ByteSize(64 << 30),
            )
            .with_wait_mult(wait_mult)
            .into(),
            estimated,
        }
    }

    /// The virtual clock's rows are a series of their own, and their
    /// label says so: never pooled with the real clock's.
    #[test]
    fn the_virtual_clock_is_its_own_series() {
        let real = key(StorageProfile::EBS, 10, false);
        let mut virt = real.clone();
        virt.testbed.accel = Accel::from("tcg-icount0");
        assert_eq!(
            virt.series_id(),
            "qemu/qemu-x86_64/tcg-icount0/x86_64/debian-6.1/hz250/fix/64GiB/w10/ebs/measured"
        );
        assert_ne!(virt.series_id(), real.series_id());
        assert!(
            virt.label().starts_with("qemu tcg-icount0 "),
            "{}",
            virt.label()
        );
        assert_ne!(virt, real);
    }

    /// The texts every stored series, alert id, report and CSV was
    /// written with: a change of the table that moves one fails here.
    /// The first table's columns and values come first; only knobs, at
    /// their defaults quiet in labels and ids, may follow them.
    #[test]
    fn the_table_writes_the_texts_it_always_wrote() {
        let k = key(StorageProfile::EBS, 10, false);
        assert_eq!(
            k.series_id(),
            "qemu/qemu-x86_64/tcg/x86_64/debian-6.1/hz250/fix/64GiB/w10/ebs/measured"
        );
        assert_eq!(
            k.label(),
            "qemu tcg qemu-x86_64 x86_64 debian-6.1 HZ250 fix 64GiB storage=ebs"
        );
        let plain = key(StorageProfile::None, 10, true);
        assert_eq!(
            plain.label(),
            "qemu tcg qemu-x86_64 x86_64 debian-6.1 HZ250 fix 64GiB (estimate)"
        );
        assert_eq!(
            plain.series_id(),
            "qemu/qemu-x86_64/tcg/x86_64/debian-6.1/hz250/fix/64GiB/w10/none/estimated"
        );
        let w3 = key(StorageProfile::None, 3, false);
        assert_eq!(
            w3.label(),
            "qemu tcg qemu-x86_64 x86_64 debian-6.1 HZ250 fix 64GiB w3"
        );
        let first = FIRST.len();
        assert_eq!(
            CellKey::COLUMNS[..first],
            [
                "provider",
                "machine",
                "accel",
                "arch",
                "kernel_source",
                "hz",
                "variant",
                "wait_mult",
                "volume_bytes",
                "storage_profile"
            ]
        );
        assert_eq!(
            k.values()[..first],
            [
                "qemu",
                "qemu-x86_64",
                "tcg",
                "x86_64",
                "debian-6.1",
                "250",
                "fix",
                "10",
                "68719476736",
                "ebs"
            ]
        );
        assert_eq!(CellKey::COLUMNS[first..], Knobs::COLUMNS.map(|(c, _)| c));
        let json = serde_json::to_string(&k).unwrap();
        // Knobs at their defaults are left out of the JSON and of tables.
        assert_eq!(
            json,
            r#"{"provider":"qemu","machine":"qemu-x86_64","accel":"tcg","arch":"x86_64","kernel_source":"debian-6.1","hz":250,"variant":"fix","wait_mult":10,"volume_bytes":68719476736,"storage_profile":"ebs","estimated":false}"#
        );
        let shown: Vec<&str> = CellKey::shown_fields([&k, &plain])
            .iter()
            .map(|f| f.column)
            .collect();
        assert_eq!(shown, CellKey::COLUMNS[..first]);
        assert_eq!(
            k.values_of(&CellKey::shown_fields([&k])),
            k.values()[..first]
        );
    }

    /// A field added to the table after series were stored (here a
    /// stand-in: the volume, quiet at 64 GiB, as a new axis is at the
    /// value every older row has) leaves the ids of the series stored at
    /// that value, and so their alerts' ids, as they were.
    #[test]
    fn a_new_field_at_its_old_value_keeps_every_stored_series_id() {
        const FIFTH_GROUP: KeyField = KeyField {
            column: "volume_again",
            value: |k| KeyValue::Number(k.axes.volume.0),
            cmp: |a, b| a.axes.volume.cmp(&b.axes.volume),
            series: Some(|k| format!("v{}", k.axes.volume.0 >> 30)),
            series_quiet: Some(|k| k.axes.volume == ByteSize(64 << 30)),
            series_at: 10,
            word: |k| k.axes.volume.to_string(),
            quiet_default: None,
            label_at: 10,
            env: Env::WhenVaries,
        };
        let mut wider: Vec<KeyField> = FIELDS.into_iter().collect();
        wider.push(FIFTH_GROUP);
        let k = key(StorageProfile::EBS, 10, false);
        assert_eq!(k.series_id_of(&wider), k.series_id());
        let mut big = k.clone();
        big.axes.volume = ByteSize(128 << 30);
        assert_eq!(
            big.series_id_of(&wider),
            "qemu/qemu-x86_64/tcg/x86_64/debian-6.1/hz250/fix/128GiB/w10/ebs/v128/measured"
        );
        // Without `series_quiet` every stored id would move.
        wider.last_mut().unwrap().series_quiet = None;
        assert_ne!(k.series_id_of(&wider), k.series_id());
    }

    #[test]
    fn keys_sort_field_by_field_then_estimates_last() {
        let (a, b) = (
            key(StorageProfile::None, 10, false),
            key(StorageProfile::None, 10, true),
        );
        assert!(a < b);
        assert_eq!(a.first_difference(&b).map(|f| f.column), None);
        let w3 = key(StorageProfile::None, 3, true);
        assert!(w3 < a, "wait_mult before estimated");
        assert_eq!(a.first_difference(&w3).map(|f| f.column), Some("wait_mult"));
        let mut big = a.clone();
        big.axes.volume = ByteSize(128 << 30);
        assert!(a < big);
        assert_eq!(
            a.first_difference(&big).map(|f| f.column),
            Some("volume_bytes")
        );
    }
}

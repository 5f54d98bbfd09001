//! Byte sizes as users write them: `64GiB`, `2TiB`, `512MiB`, `1000000`.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ByteSize(pub u64);

pub const KIB: u64 = 1 << 10;
pub const MIB: u64 = 1 << 20;
pub const GIB: u64 = 1 << 30;
pub const TIB: u64 = 1 << 40;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("`{input}` is not a size: write a number with a binary unit, e.g. 64GiB, 2TiB or 512MiB")]
pub struct SizeError {
    pub input: String,
}

impl FromStr for ByteSize {
    type Err = SizeError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = || SizeError {
            input: s.to_string(),
        };
        let t = s.trim();
        let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
        let (num, unit) = t.split_at(split);
        if num.is_empty() {
            return Err(err());
        }
        let n: u64 = num.parse().map_err(|_| err())?;
        let mult = match unit.trim().to_ascii_lowercase().as_str() {
            "" | "b" => 1,
            "k" | "kib" => KIB,
            "m" | "mib" => MIB,
            "g" | "gib" => GIB,
            "t" | "tib" => TIB,
            // Decimal units are refused rather than guessed: the report's "2T"
            // means 2 TiB, and a silent 10% difference would skew group counts.
            _ => return Err(err()),
        };
        n.checked_mul(mult).map(ByteSize).ok_or_else(err)
    }
}

impl fmt::Display for ByteSize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let b = self.0;
        for (unit, m) in [("TiB", TIB), ("GiB", GIB), ("MiB", MIB), ("KiB", KIB)] {
            if b >= m && b.is_multiple_of(m) {
                return write!(f, "{}{}", b / m, unit);
            }
        }
        write!(f, "{b}")
    }
}

impl Serialize for ByteSize {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_string())
    }
}

// A visitor, so a bad value is named (an untagged enum only says "no
// variant matched").
impl<'de> Deserialize<'de> for ByteSize {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl serde::de::Visitor<'_> for V {
            type Value = ByteSize;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a size like \"64GiB\" or a number of bytes")
            }
            fn visit_u64<E: serde::de::Error>(self, n: u64) -> Result<ByteSize, E> {
                Ok(ByteSize(n))
            }
            fn visit_i64<E: serde::de::Error>(self, n: i64) -> Result<ByteSize, E> {
                u64::try_from(n).map(ByteSize).map_err(|_| {
                    E::custom(format!(
                        "sizes: {n} is negative; write a size like \"64GiB\""
                    ))
                })
            }
            fn visit_f64<E: serde::de::Error>(self, n: f64) -> Result<ByteSize, E> {
                Err(E::custom(format!(
                    "sizes: {n} is not a whole number of bytes; write a size like \"64GiB\""
                )))
            }
            fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<ByteSize, E> {
                s.parse().map_err(E::custom)
            }
        }
        d.deserialize_any(V)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_binary_units() {
        assert_eq!("64GiB".parse::<ByteSize>().unwrap().0, 64 * GIB);
        assert_eq!("2TiB".parse::<ByteSize>().unwrap().0, 2 * TIB);
        assert_eq!("3t".parse::<ByteSize>().unwrap().0, 3 * TIB);
        assert_eq!("512 MiB".parse::<ByteSize>().unwrap().0, 512 * MIB);
        assert_eq!("4096".parse::<ByteSize>().unwrap().0, 4096);
    }

    #[test]
    fn rejects_non_sizes() {
        for bad in [
            "",
            "GiB",
            "2TB",
            "-1GiB",
            "1.5GiB",
            "lots",
            "99999999999TiB",
        ] {
            assert!(bad.parse::<ByteSize>().is_err(), "{bad} should be refused");
        }
    }

    #[test]
    fn display_round_trips() {
        for s in ["64GiB", "2TiB", "3TiB", "100MiB", "4097"] {
            assert_eq!(s.parse::<ByteSize>().unwrap().to_string(), s);
        }
    }
}

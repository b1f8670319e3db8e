//! Human units on the command line and in the config file: sizes (`32MiB`,
//! `4k`, `818`) and durations (`10s`, `500ms`, `2m`). Parsing is strict so a
//! typo such as `10x` is refused instead of silently meaning something else.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;
use std::time::Duration;

/// A byte count parsed from `818`, `4k`, `4KiB`, `32MiB`, `1G` (binary multiples).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "SizeRepr", into = "String")]
pub struct ByteSize(pub u64);

/// A duration parsed from `100ms`, `10s`, `2m`, `1h`, `250us`; a bare number is seconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct Dur(pub Duration);

#[derive(Deserialize)]
#[serde(untagged)]
enum SizeRepr {
    Int(u64),
    Text(String),
}

impl TryFrom<SizeRepr> for ByteSize {
    type Error = String;
    fn try_from(r: SizeRepr) -> Result<Self, String> {
        match r {
            SizeRepr::Int(n) => Ok(ByteSize(n)),
            SizeRepr::Text(s) => s.parse(),
        }
    }
}

fn split_number(s: &str) -> (&str, &str) {
    let end = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    (&s[..end], s[end..].trim())
}

impl FromStr for ByteSize {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let t = s.trim();
        let (num, unit) = split_number(t);
        let bad = || format!("invalid size '{s}' (examples: 818, 4KiB, 32MiB, 1GiB)");
        if num.is_empty() {
            return Err(bad());
        }
        let mult: u64 = match unit.to_ascii_lowercase().as_str() {
            "" | "b" => 1,
            "k" | "kb" | "kib" => 1 << 10,
            "m" | "mb" | "mib" => 1 << 20,
            "g" | "gb" | "gib" => 1 << 30,
            "t" | "tb" | "tib" => 1 << 40,
            "p" | "pb" | "pib" => 1 << 50,
            "e" | "eb" | "eib" => 1 << 60,
            _ => return Err(bad()),
        };
        let v: f64 = num.parse().map_err(|_| bad())?;
        let bytes = v * mult as f64;
        if !bytes.is_finite() || bytes >= u64::MAX as f64 {
            return Err(format!("size '{s}' is too large"));
        }
        Ok(ByteSize(bytes.round() as u64))
    }
}

impl FromStr for Dur {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let t = s.trim();
        let (num, unit) = split_number(t);
        let bad = || format!("invalid duration '{s}' (examples: 500ms, 10s, 2m, 1h)");
        if t.starts_with('-') {
            return Err(format!("a duration cannot be negative: '{s}'"));
        }
        if num.is_empty() {
            return Err(bad());
        }
        let v: f64 = num.parse().map_err(|_| bad())?;
        let secs = match unit {
            "ns" => v / 1e9,
            "us" | "µs" => v / 1e6,
            "ms" => v / 1e3,
            "" | "s" => v,
            "m" | "min" => v * 60.0,
            "h" => v * 3600.0,
            _ => return Err(bad()),
        };
        if !secs.is_finite() || secs > 1e9 {
            return Err(format!("duration '{s}' is too large"));
        }
        Ok(Dur(Duration::from_secs_f64(secs)))
    }
}

impl TryFrom<String> for Dur {
    type Error = String;
    fn try_from(s: String) -> Result<Self, String> {
        s.parse()
    }
}

impl From<Dur> for String {
    fn from(d: Dur) -> String {
        d.to_string()
    }
}

impl From<ByteSize> for String {
    fn from(b: ByteSize) -> String {
        b.to_string()
    }
}

impl fmt::Display for ByteSize {
    /// Exact when possible (`32MiB`), so a printed value parses back to itself.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let units = [
            (1u64 << 40, "TiB"),
            (1 << 30, "GiB"),
            (1 << 20, "MiB"),
            (1 << 10, "KiB"),
        ];
        for (m, u) in units {
            if self.0 >= m && self.0 % m == 0 {
                return write!(f, "{}{u}", self.0 / m);
            }
        }
        write!(f, "{}B", self.0)
    }
}

impl fmt::Display for Dur {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ns = self.0.as_nanos();
        if ns == 0 {
            // Zero needs no unit: `--stall-threshold 0ms` is not "0s".
            return write!(f, "0");
        }
        if ns % 1_000_000_000 == 0 {
            let s = ns / 1_000_000_000;
            if s % 3600 == 0 && s > 0 {
                write!(f, "{}h", s / 3600)
            } else if s % 60 == 0 && s > 0 {
                write!(f, "{}m", s / 60)
            } else {
                write!(f, "{s}s")
            }
        } else if ns % 1_000_000 == 0 {
            write!(f, "{}ms", ns / 1_000_000)
        } else if ns % 1_000 == 0 {
            write!(f, "{}us", ns / 1_000)
        } else {
            write!(f, "{ns}ns")
        }
    }
}

/// Mebibytes, for display.
pub fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1u64 << 20) as f64
}

/// KiB (what /proc/meminfo counts) as MiB, for display.
pub fn kib_to_mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!("818".parse::<ByteSize>().unwrap().0, 818);
        assert_eq!("4k".parse::<ByteSize>().unwrap().0, 4096);
        assert_eq!("32MiB".parse::<ByteSize>().unwrap().0, 32 << 20);
        assert_eq!("1.5G".parse::<ByteSize>().unwrap().0, 3 << 29);
        assert_eq!("1EiB".parse::<ByteSize>().unwrap().0, 1 << 60);
        for bad in ["10x", "", "MiB", "-1", "1..2k", "99999999999EiB"] {
            assert!(bad.parse::<ByteSize>().is_err(), "{bad}");
        }
        assert!("10x".parse::<ByteSize>().unwrap_err().contains("'10x'"));
    }

    #[test]
    fn durations() {
        assert_eq!("10s".parse::<Dur>().unwrap().0, Duration::from_secs(10));
        assert_eq!(
            "500ms".parse::<Dur>().unwrap().0,
            Duration::from_millis(500)
        );
        assert_eq!("2m".parse::<Dur>().unwrap().0, Duration::from_secs(120));
        assert_eq!("3".parse::<Dur>().unwrap().0, Duration::from_secs(3));
        for bad in ["10x", "s", "", "-5s", "1e99h"] {
            assert!(bad.parse::<Dur>().is_err(), "{bad}");
        }
    }

    #[test]
    fn display_round_trips() {
        for s in ["32MiB", "818B", "1GiB", "4KiB"] {
            assert_eq!(s.parse::<ByteSize>().unwrap().to_string(), s);
        }
        for s in ["10s", "100ms", "2m", "1h", "250us"] {
            assert_eq!(s.parse::<Dur>().unwrap().to_string(), s);
        }
    }
}

//! What an observed process asked of the write path over one interval,
//! counted from the entries and exits of its write-path system calls (root,
//! the scheduler's timing with call bounds on): how many writes of what
//! size, how many syncs of each kind and how much each had to flush, time
//! spent inside them. The raw material of an imitation of the server in the
//! lab. Files are the process's fd numbers: no path is kept.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The calls that move bytes: counted with their sizes.
pub const WRITE_CALLS: [&str; 5] = ["write", "pwrite64", "writev", "pwritev", "pwritev2"];
/// The calls that wait for written data to reach the disk.
pub const SYNC_CALLS: [&str; 6] = [
    "fsync",
    "fdatasync",
    "sync_file_range",
    "msync",
    "syncfs",
    "sync",
];

/// One observed process's write-path calls over one interval, counted as
/// each returned (a call is in the interval it ended in).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct CallPattern {
    /// Write-family calls (`WRITE_CALLS`) that returned, failed ones too.
    pub writes: u64,
    /// The bytes they wrote (their return values).
    pub write_bytes: u64,
    /// Time inside them, summed over threads, ms.
    pub write_ms: f64,
    /// Their sizes: calls by ⌈log2(bytes)⌉ (12: 2049 to 4096 bytes; 0:
    /// 0 or 1 byte).
    #[serde(
        default,
        skip_serializing_if = "BTreeMap::is_empty",
        deserialize_with = "log2_keys"
    )]
    pub write_size_log2: BTreeMap<u8, u64>,
    /// Distinct fds written.
    pub files: u32,
    /// The sync family (`SYNC_CALLS`) by call.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub syncs: BTreeMap<String, SyncCalls>,
    /// The other traced write-path calls by name (fallocate, ftruncate,
    /// close, renames, io_submit, io_uring_enter).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub other: BTreeMap<String, u64>,
    /// Calls that returned an error (counted above too).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub failed: u64,
    /// Each thread name's part of the above, when more than one thread
    /// name made calls (a RocksDB's flush, compaction and WAL threads).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub threads: BTreeMap<String, CallPattern>,
}

/// One kind of sync call over an interval.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SyncCalls {
    pub calls: u64,
    /// Time inside them, summed, ms.
    pub in_call_ms: f64,
    /// What each had to flush: the bytes the process wrote through that
    /// fd since its previous sync of it (syncfs and sync: through any fd
    /// since its previous syncfs or sync), by ⌈log2(bytes)⌉. msync's
    /// stores are not system calls: none.
    #[serde(
        default,
        skip_serializing_if = "BTreeMap::is_empty",
        deserialize_with = "log2_keys"
    )]
    pub bytes_before_log2: BTreeMap<u8, u64>,
    /// Those bytes summed.
    pub bytes_before: u64,
}

/// A histogram's keys as JSON has them, strings: read through a
/// flattened struct (a recording's `observed` line), serde does not turn
/// them back into numbers by itself.
fn log2_keys<'de, D: serde::Deserializer<'de>>(d: D) -> Result<BTreeMap<u8, u64>, D::Error> {
    let raw = BTreeMap::<String, u64>::deserialize(d)?;
    raw.into_iter()
        .map(|(k, n)| {
            k.parse::<u8>()
                .map(|b| (b, n))
                .map_err(|_| serde::de::Error::custom(format!("not a log2 bucket: {k:?}")))
        })
        .collect()
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// ⌈log2(bytes)⌉, the bucket of a size (0 and 1 byte: 0).
pub fn log2_bucket(bytes: u64) -> u8 {
    if bytes <= 1 {
        0
    } else {
        (64 - (bytes - 1).leading_zeros()) as u8
    }
}

/// The bucket that holds the median of a ⌈log2⌉ histogram.
pub fn median_bucket(hist: &BTreeMap<u8, u64>) -> Option<u8> {
    let total: u64 = hist.values().sum();
    let mut seen = 0;
    for (b, n) in hist {
        seen += n;
        if seen * 2 >= total && total > 0 {
            return Some(*b);
        }
    }
    None
}

/// The largest size a bucket holds.
pub fn bucket_bytes(bucket: u8) -> u64 {
    1u64.checked_shl(u32::from(bucket)).unwrap_or(u64::MAX)
}

fn add_hist(a: &mut BTreeMap<u8, u64>, b: &BTreeMap<u8, u64>) {
    for (k, n) in b {
        *a.entry(*k).or_default() += n;
    }
}

impl CallPattern {
    /// Sums a later interval in (`files` is the most of either: fds are
    /// not kept to be told apart across intervals).
    pub fn add(&mut self, o: &CallPattern) {
        self.writes += o.writes;
        self.write_bytes += o.write_bytes;
        self.write_ms += o.write_ms;
        add_hist(&mut self.write_size_log2, &o.write_size_log2);
        self.files = self.files.max(o.files);
        for (k, s) in &o.syncs {
            let m = self.syncs.entry(k.clone()).or_default();
            m.calls += s.calls;
            m.in_call_ms += s.in_call_ms;
            m.bytes_before += s.bytes_before;
            add_hist(&mut m.bytes_before_log2, &s.bytes_before_log2);
        }
        for (k, n) in &o.other {
            *self.other.entry(k.clone()).or_default() += n;
        }
        self.failed += o.failed;
        for (k, t) in &o.threads {
            self.threads.entry(k.clone()).or_default().add(t);
        }
    }

    /// Sync calls of every kind.
    pub fn sync_calls(&self) -> u64 {
        self.syncs.values().map(|s| s.calls).sum()
    }

    /// Nothing was called.
    pub fn is_empty(&self) -> bool {
        self.writes == 0 && self.syncs.is_empty() && self.other.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_fall_in_the_bucket_of_their_ceiling_power_of_two() {
        assert_eq!(log2_bucket(0), 0);
        assert_eq!(log2_bucket(1), 0);
        assert_eq!(log2_bucket(2), 1);
        assert_eq!(log2_bucket(4096), 12);
        assert_eq!(log2_bucket(4097), 13);
        assert_eq!(log2_bucket(8192), 13);
        assert_eq!(bucket_bytes(12), 4096);
        assert_eq!(log2_bucket(u64::MAX), 64);
        assert_eq!(bucket_bytes(64), u64::MAX);
        assert_eq!(median_bucket(&[(12, 3), (16, 2)].into()), Some(12));
        assert_eq!(median_bucket(&[(12, 2), (16, 3)].into()), Some(16));
        assert_eq!(median_bucket(&BTreeMap::new()), None);
    }

    #[test]
    fn a_pattern_reads_back_inside_a_flattened_line() {
        #[derive(Serialize, Deserialize)]
        struct Line {
            index: u64,
            #[serde(flatten)]
            calls: CallPattern,
        }
        let mut calls = CallPattern {
            writes: 3,
            write_size_log2: [(12, 2), (16, 1)].into(),
            ..Default::default()
        };
        calls.syncs.insert(
            "fsync".into(),
            SyncCalls {
                calls: 1,
                bytes_before_log2: [(17, 1)].into(),
                ..Default::default()
            },
        );
        let text = serde_json::to_string(&Line {
            index: 1,
            calls: calls.clone(),
        })
        .unwrap();
        assert!(
            text.contains(r#""write_size_log2":{"12":2,"16":1}"#),
            "{text}"
        );
        let back: Line = serde_json::from_str(&text).unwrap();
        assert_eq!(back.calls, calls);
        assert!(serde_json::from_str::<Line>(r#"{"index":1,"writes":1,"write_bytes":0,"write_ms":0,"files":0,"write_size_log2":{"x":1}}"#).is_err());
    }

    #[test]
    fn intervals_add_up() {
        let mut a = CallPattern {
            writes: 2,
            write_bytes: 8192,
            files: 1,
            write_size_log2: [(12, 2)].into(),
            ..Default::default()
        };
        let mut b = a.clone();
        b.files = 3;
        b.syncs.insert(
            "fdatasync".into(),
            SyncCalls {
                calls: 1,
                in_call_ms: 2.5,
                bytes_before: 8192,
                bytes_before_log2: [(13, 1)].into(),
            },
        );
        a.add(&b);
        assert_eq!((a.writes, a.write_bytes, a.files), (4, 16384, 3));
        assert_eq!(a.write_size_log2[&12], 4);
        assert_eq!(a.sync_calls(), 1);
        assert!(!a.is_empty());
        assert!(CallPattern::default().is_empty());
    }
}

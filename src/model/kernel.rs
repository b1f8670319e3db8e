//! The kernel's state as the sources hand it over: raw /proc counters at one
//! instant (`ProcSample`, what a recording keeps), the per-interval view
//! derived from two of them (`KernelInterval`, by `fold::derive`), and the
//! tracefs writeback events. Units: KiB, pages, 512 B sectors, ms, µs, as
//! each field says.

use serde::{Deserialize, Serialize};

/// /proc/meminfo, in KiB (the file says "kB" but means KiB).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemInfo {
    pub dirty_kib: Option<u64>,
    pub writeback_kib: Option<u64>,
}

/// /proc/vmstat: `nr_*` are pages now, the rest cumulative counts. The
/// thresholds, `nr_dirtied` and `nr_written` appeared in 2.6.37.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct VmStat {
    pub nr_dirty: Option<u64>,
    pub nr_writeback: Option<u64>,
    pub nr_dirty_threshold: Option<u64>,
    pub nr_dirty_background_threshold: Option<u64>,
    pub nr_dirtied: Option<u64>,
    pub nr_written: Option<u64>,
    pub pgfault: Option<u64>,
    pub pgmajfault: Option<u64>,
}

/// /proc/pressure/io `total=` fields: cumulative µs during which some / all
/// non-idle tasks were stalled on IO. Only deltas mean anything.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Psi {
    pub some_total_us: Option<u64>,
    pub full_total_us: Option<u64>,
}

/// One /proc/diskstats line. Sectors are 512 B whatever the device's block
/// size; the `ms_*`, `io_ticks_ms` and `weighted_ms` fields are 32-bit in the
/// kernel and wrap after ~49.7 days of accumulated time.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DiskStat {
    /// The kernel name on the line (`vda`, `loop1`, `sda1`).
    pub name: String,
    pub reads_completed: Option<u64>,
    pub sectors_read: Option<u64>,
    pub ms_reading: Option<u64>,
    pub writes_completed: Option<u64>,
    pub writes_merged: Option<u64>,
    pub sectors_written: Option<u64>,
    pub ms_writing: Option<u64>,
    /// Requests in flight now (not a counter).
    pub in_flight: Option<u64>,
    /// ms during which at least one request was in flight.
    pub io_ticks_ms: Option<u64>,
    /// Sum over requests of their time in flight.
    pub weighted_ms: Option<u64>,
    /// Since 4.18.
    pub discards_completed: Option<u64>,
    /// Since 5.5.
    pub flushes_completed: Option<u64>,
    /// Since 5.5.
    pub ms_flushing: Option<u64>,
}

/// The block device a target's filesystem sits on.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Device {
    pub major: u32,
    pub minor: u32,
    /// As in /proc/diskstats: `loop1`, `vda`, `sda1`, `nvme0n1p2`.
    pub name: String,
    /// The whole disk when `name` is a partition (`sda` for `sda1`).
    pub disk: Option<String>,
}

/// Raw counters at one instant; the data path records these and derives
/// rates later with [`derive`].
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ProcSample {
    /// Monotonic ns, supplied by the caller (the run's clock).
    pub t_ns: u64,
    pub mem: MemInfo,
    pub vm: VmStat,
    /// `None` when the kernel has no PSI.
    pub psi: Option<Psi>,
    /// One per target; `None` if the target has no device or its line is gone.
    pub disks: Vec<Option<DiskStat>>,
}

/// One target's device over an interval.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DevInterval {
    pub name: String,
    pub write_mib_per_s: f64,
    /// Share of the interval with a request in flight, 0..=100.
    pub util_pct: f64,
    /// Requests in flight at the end of the interval.
    pub inflight: u64,
    /// Mean ms per completed write (queue + service); 0.0 with no writes.
    pub w_await_ms: f64,
    /// Flushes completed in the interval; `None` before 5.5.
    pub flushes: Option<u64>,
}

/// The kernel's view of one interval: levels at its end, deltas over it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct KernelInterval {
    pub dirty_kib: Option<u64>,
    pub writeback_kib: Option<u64>,
    /// From the vmstat thresholds (pages) × page size.
    pub dirty_thresh_kib: Option<u64>,
    pub dirty_bg_thresh_kib: Option<u64>,
    pub nr_dirty: Option<u64>,
    pub nr_writeback: Option<u64>,
    /// Deltas over the interval.
    pub dirtied_pages: Option<u64>,
    pub written_pages: Option<u64>,
    pub pgmajfault: Option<u64>,
    /// Δ `total=` µs / interval µs × 100, clamped to 100.
    pub psi_io_some_pct: Option<f64>,
    pub psi_io_full_pct: Option<f64>,
    /// One per target; `None` without a device, with a zero-length interval,
    /// or when the device's counters went back (it was re-created).
    pub devs: Vec<Option<DevInterval>>,
}
/// A task's name as the kernel keeps it (at most 16 bytes), stored inline:
/// the scheduler's events, tens of thousands a second, carry one each and
/// must not allocate for it. Serialised as a string.
#[derive(Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Comm {
    len: u8,
    bytes: [u8; 16],
}

impl Comm {
    /// The first 16 bytes of `s`, cut at a character boundary.
    pub fn new(s: &str) -> Comm {
        let mut len = s.len().min(16);
        while !s.is_char_boundary(len) {
            len -= 1;
        }
        let mut bytes = [0u8; 16];
        bytes[..len].copy_from_slice(&s.as_bytes()[..len]);
        Comm {
            len: len as u8,
            bytes,
        }
    }

    /// From a record's `char comm[16]`: up to its NUL, invalid UTF-8 replaced.
    pub fn from_bytes(raw: &[u8]) -> Comm {
        let raw = &raw[..raw.iter().position(|&b| b == 0).unwrap_or(raw.len())];
        match std::str::from_utf8(raw) {
            Ok(s) => Comm::new(s),
            Err(_) => Comm::new(&String::from_utf8_lossy(raw)),
        }
    }

    pub fn as_str(&self) -> &str {
        // Built from a &str cut at a character boundary: always UTF-8.
        std::str::from_utf8(&self.bytes[..self.len as usize]).unwrap_or_default()
    }
}

impl From<&str> for Comm {
    fn from(s: &str) -> Comm {
        Comm::new(s)
    }
}

impl std::fmt::Debug for Comm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}", self.as_str())
    }
}

impl std::fmt::Display for Comm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl serde::Serialize for Comm {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> serde::Deserialize<'de> for Comm {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Comm, D::Error> {
        let s = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        Ok(Comm::new(&s))
    }
}

/// One writeback event of interest, stamped with CLOCK_MONOTONIC.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct TraceEvent {
    pub t_mono_ns: u64,
    /// The task the event ran in (`common_pid`, a thread id).
    pub tid: u32,
    pub kind: TraceKind,
}

#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub enum TraceKind {
    /// A writer slept (`pause_ms > 0`) or was only rate-limited (`pause_ms <= 0`)
    /// in balance_dirty_pages. Counts are pages; `paused_ms` is the time already
    /// spent in this call before this pause, `period_ms` the intended spacing.
    BalanceDirtyPages {
        bdi: String,
        limit: u64,
        setpoint: u64,
        dirty: u64,
        pause_ms: i64,
        paused_ms: u64,
        period_ms: u64,
    },
    /// folio_wait_writeback: the thread (the waiter itself) is about to sleep
    /// until a page of inode `ino` at page `index` finishes writeback. Entry only.
    WaitWriteback { bdi: String, ino: u64, index: u64 },
    /// writeback_start: a flusher began writeback for `reason` (background,
    /// periodic, sync, vmscan, fs_free_space, ...); `nr_pages` may be LONG_MAX.
    WritebackStart {
        bdi: String,
        reason: String,
        nr_pages: i64,
    },
    /// sched_switch: the thread went to sleep in D (uninterruptible or
    /// killable), or with `sleep` in S (interruptible: a futex, a socket,
    /// a timer; traced only for wake-up chains); `comm` is its name.
    SchedBlock {
        comm: Comm,
        #[serde(default)]
        sleep: bool,
    },
    /// sched_waking (or sched_wakeup) of the thread; `waker` is the task
    /// the event ran in (the one that woke it; 0 is an interrupt on an
    /// idle CPU); `irq`: it ran in a hardware interrupt (a timer expiring,
    /// an I/O completing), not on behalf of the task it interrupted.
    SchedWake {
        waker: u32,
        waker_comm: String,
        #[serde(default)]
        irq: bool,
    },
    /// syscalls:sys_enter_<call>: the thread entered a system call on the
    /// write path (fdatasync, write, ...); its fd argument and the bytes it
    /// asks, for calls that take them.
    SysEnter {
        call: Comm,
        #[serde(default)]
        fd: Option<i64>,
        #[serde(default)]
        bytes: Option<u64>,
        /// A futex wait's address (`uaddr`): where the thread is about to
        /// sleep (`sys_enter_futex`, traced with wake-up chains).
        #[serde(default)]
        addr: Option<u64>,
    },
    /// syscalls:sys_exit_<call>: it left the call, returning `ret`.
    SysExit { call: Comm, ret: i64 },
    /// sched_process_fork: the thread made a new task (a thread or a
    /// process), traced from its first moment (the instance's event-fork).
    Fork { child: u32 },
}

#[cfg(test)]
mod tests {
    use super::Comm;

    #[test]
    fn comms_are_cut_like_the_kernels_and_read_back_as_strings() {
        assert_eq!(Comm::new("postgres").as_str(), "postgres");
        assert_eq!(
            Comm::new("a-much-longer-thread-name").as_str(),
            "a-much-longer-th"
        );
        // Never inside a character: "é" is 2 bytes at 15..17.
        assert_eq!(Comm::new("aaaaaaaaaaaaaaaé").as_str(), "aaaaaaaaaaaaaaa");
        assert_eq!(
            Comm::from_bytes(b"rocksdb:high\0\0\0\0").as_str(),
            "rocksdb:high"
        );
        assert_eq!(Comm::from_bytes(b"bad\xff").as_str(), "bad\u{fffd}");
        let json = serde_json::to_string(&Comm::new("db_bench")).unwrap();
        assert_eq!(json, "\"db_bench\"");
        assert_eq!(
            serde_json::from_str::<Comm>(&json).unwrap(),
            Comm::new("db_bench")
        );
    }
}

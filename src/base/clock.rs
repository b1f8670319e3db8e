//! The run's one clock: nanoseconds since the start on CLOCK_MONOTONIC, so
//! kernel trace timestamps (trace_clock=mono) land on the same axis.

use std::time::Instant;

/// The monotonic clock of one run; times are nanoseconds since its start.
/// `mono_base_ns` is CLOCK_MONOTONIC at the start, to place kernel trace
/// timestamps (trace_clock=mono) on the same axis.
#[derive(Clone, Copy, Debug)]
pub struct Clock(Instant, u64);

/// CLOCK_MONOTONIC in nanoseconds (what `Instant` and trace_clock=mono use).
pub fn mono_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: valid pointer to a timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

impl Clock {
    pub fn new() -> Self {
        let i = Instant::now();
        Clock(i, mono_ns())
    }
    /// Converts a CLOCK_MONOTONIC time to run time (0 if before the start).
    pub fn from_mono(&self, mono: u64) -> u64 {
        mono.saturating_sub(self.1)
    }
    #[inline]
    pub fn now_ns(&self) -> u64 {
        self.0.elapsed().as_nanos() as u64
    }
    pub fn start(&self) -> Instant {
        self.0
    }
}

impl Default for Clock {
    fn default() -> Self {
        Self::new()
    }
}

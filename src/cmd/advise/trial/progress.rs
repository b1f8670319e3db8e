//! A trial's progress on stderr: one line rewritten in place (`\r`) when
//! stderr is a terminal, plain lines otherwise (a log, CI), with the time
//! left estimated from the runs so far.

use std::io::{IsTerminal, Write};
use std::time::Duration;

/// The time left: the mean of the finished runs' times (drain and setup
/// included) for each run to go, or the planned run length while none has
/// finished.
pub fn eta(done: usize, total: usize, spent: Duration, planned_run: Duration) -> Duration {
    let left = total.saturating_sub(done) as u32;
    if done == 0 {
        planned_run * left
    } else {
        spent / done as u32 * left
    }
}

/// `1h02m`, `5m20s`, `40s`.
pub fn short(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        0..=59 => format!("{s}s"),
        60..=3599 => format!("{}m{:02}s", s / 60, s % 60),
        _ => format!("{}h{:02}m", s / 3600, (s % 3600) / 60),
    }
}

/// Writes progress lines to stderr.
pub struct Line {
    tty: bool,
    last: String,
    last_len: usize,
}

impl Default for Line {
    fn default() -> Self {
        Line {
            tty: std::io::stderr().is_terminal(),
            last: String::new(),
            last_len: 0,
        }
    }
}

impl Line {
    /// Shows `text`; on a terminal it replaces the line, else it is
    /// printed unless it repeats the last one.
    pub fn show(&mut self, text: &str) {
        let mut e = std::io::stderr().lock();
        if self.tty {
            let pad = self.last_len.saturating_sub(text.chars().count());
            let _ = write!(e, "\r{text}{}", " ".repeat(pad));
            self.last_len = text.chars().count();
        } else if text != self.last {
            let _ = writeln!(e, "{text}");
        }
        self.last = text.to_string();
        let _ = e.flush();
    }

    /// Prints `text` on a line of its own, kept (the line being rewritten
    /// ends first).
    pub fn say(&mut self, text: &str) {
        self.finish();
        eprintln!("{text}");
        self.last.clear();
    }

    /// Ends the line being rewritten (before other output).
    pub fn finish(&mut self) {
        if self.tty && self.last_len > 0 {
            eprintln!();
            self.last_len = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_eta_uses_the_runs_so_far() {
        let s = Duration::from_secs;
        assert_eq!(eta(0, 10, s(0), s(30)), s(300), "planned before any run");
        assert_eq!(eta(2, 10, s(100), s(30)), s(400), "50 s a run so far");
        assert_eq!(eta(10, 10, s(500), s(30)), s(0));
    }

    #[test]
    fn durations_are_short() {
        assert_eq!(short(Duration::from_secs(40)), "40s");
        assert_eq!(short(Duration::from_secs(320)), "5m20s");
        assert_eq!(short(Duration::from_secs(3720)), "1h02m");
    }
}

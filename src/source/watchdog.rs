//! Sees a stall while it is happening: every `PERIOD` it looks at each
//! thread's in-flight slot and reports an op older than the threshold that
//! has not returned yet, with its kernel stack; and every `RESTACK` while
//! the op lasts it reads the stack again and reports that too, so the fold
//! names the wait most of the stall was in, not the one it began in (a
//! write fault throttled for 100 ms, then waiting 8 s for writeback).

use crate::base::clock::Clock;
use crate::model::msg::Msg;
use crate::model::stall::{Blocked, Who};
use crate::source::writer::WatchSlot;
use crossbeam::channel::Sender;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

pub const PERIOD: Duration = Duration::from_millis(20);

/// How often the stack of an op still blocked is read again.
pub const RESTACK: Duration = Duration::from_millis(100);

/// The watchdog thread; its slot list is replaced when engines change.
pub struct Watchdog {
    slots: Arc<Mutex<Vec<WatchSlot>>>,
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<()>>,
}

impl Watchdog {
    pub fn start(clock: Clock, threshold: Duration, tx: Sender<Msg>) -> Watchdog {
        let slots: Arc<Mutex<Vec<WatchSlot>>> = Arc::default();
        let stop = Arc::new(AtomicBool::new(false));
        let (s2, st2) = (slots.clone(), stop.clone());
        let thr = threshold.as_nanos() as u64;
        let handle = std::thread::Builder::new()
            .name("ss-watchdog".into())
            .spawn(move || {
                // (target, thread, start of the op already reported, when
                // its stack was last read)
                let mut reported: Vec<(usize, u32, u64, u64)> = Vec::new();
                let restack = RESTACK.as_nanos() as u64;
                while !st2.load(Ordering::Relaxed) {
                    if s2.lock().is_ok_and(|g| g.is_empty()) {
                        // No writers (observe mode, paused): sleep until
                        // `set_slots` or drop wakes us, not 50 times a second.
                        std::thread::park();
                        continue;
                    }
                    std::thread::sleep(PERIOD);
                    let now = clock.now_ns();
                    let slots = s2.lock().map(|g| g.clone()).unwrap_or_default();
                    reported.retain(|r| {
                        slots.iter().any(|s| {
                            s.target == r.0
                                && s.thread == r.1
                                && s.inflight.current().map(|c| c.0) == Some(r.2)
                        })
                    });
                    for s in &slots {
                        let Some((start, op)) = s.inflight.current() else {
                            continue;
                        };
                        if now.saturating_sub(start) < thr {
                            continue;
                        }
                        match reported
                            .iter_mut()
                            .find(|r| (r.0, r.1, r.2) == (s.target, s.thread, start))
                        {
                            Some(r) if now.saturating_sub(r.3) < restack => continue,
                            Some(r) => r.3 = now,
                            None => reported.push((s.target, s.thread, start, now)),
                        }
                        let _ = tx.send(Msg::Blocked(Blocked {
                            who: Who::Writer {
                                target: s.target,
                                thread: s.thread,
                            },
                            op,
                            start_ns: start,
                            dur_ns: None,
                            stack: kernel_stack(s.inflight.tid()),
                            call: None,
                            blocked_ns: None,
                            behind: None,
                        }));
                    }
                }
            })
            .expect("spawn watchdog");
        Watchdog {
            slots,
            stop,
            handle: Some(handle),
        }
    }

    pub fn set_slots(&self, slots: Vec<WatchSlot>) {
        if let Ok(mut g) = self.slots.lock() {
            *g = slots;
        }
        if let Some(h) = &self.handle {
            h.thread().unpark();
        }
    }
}

/// The kernel functions a thread is blocked in, innermost first, without
/// offsets and without the syscall entry frames: "balance_dirty_pages <
/// balance_dirty_pages_ratelimited_flags < fault_dirty_shared_page < …".
/// Needs root for the full stack; otherwise falls back on wchan.
pub fn kernel_stack(tid: u32) -> Option<String> {
    if tid == 0 {
        return None;
    }
    task_stack(&format!("/proc/self/task/{tid}"))
}

/// The same for any task directory (`/proc/PID/task/TID`): observe mode
/// reads other processes' threads this way.
pub fn task_stack(base: &str) -> Option<String> {
    if let Ok(text) = std::fs::read_to_string(format!("{base}/stack")) {
        let s = compact_stack(&text);
        if !s.is_empty() {
            return Some(s);
        }
    }
    let w = std::fs::read_to_string(format!("{base}/wchan")).ok()?;
    let w = w.trim();
    (!w.is_empty() && w != "0").then(|| w.to_string())
}

/// Pure: `[<0>] folio_wait_writeback+0x2b/0x80` lines (/proc/TID/stack)
/// → "folio_wait_writeback < … < sys_fsync".
pub fn compact_stack(text: &str) -> String {
    crate::model::cause::compact_stack(text.lines().filter_map(|l| l.split_whitespace().nth(1)))
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            h.thread().unpark();
            let _ = h.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stacks_are_compacted() {
        let text = "[<0>] balance_dirty_pages+0x5f1/0x1050\n[<0>] balance_dirty_pages_ratelimited_flags+0x2a9/0x390\n[<0>] fault_dirty_shared_page+0x101/0x140\n[<0>] do_syscall_64+0x71/0x290\n[<0>] entry_SYSCALL_64_after_hwframe+0x76/0x7e\n";
        assert_eq!(
            compact_stack(text),
            "balance_dirty_pages < balance_dirty_pages_ratelimited_flags < fault_dirty_shared_page"
        );
    }

    #[test]
    fn own_sleeping_thread_has_a_stack_or_wchan() {
        let (tx, rx) = std::sync::mpsc::channel();
        let h = std::thread::spawn(move || {
            // SAFETY: gettid has no preconditions.
            tx.send(unsafe { libc::gettid() } as u32).unwrap();
            std::thread::sleep(Duration::from_millis(300));
        });
        let tid = rx.recv().unwrap();
        std::thread::sleep(Duration::from_millis(50));
        let s = kernel_stack(tid).expect("stack or wchan");
        assert!(s.contains("sleep"), "{s}");
        h.join().unwrap();
    }
}

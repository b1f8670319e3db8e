//! Sees a stall while it is happening: every `PERIOD` it looks at each
//! thread's in-flight slot and reports an op older than the threshold that
//! has not returned yet, once per op.

use crate::measure::{Clock, Msg};
use crate::writer::WatchSlot;
use crossbeam::channel::Sender;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

pub const PERIOD: Duration = Duration::from_millis(20);

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
                // (target, thread) -> start of the op already reported
                let mut reported: Vec<(usize, u32, u64)> = Vec::new();
                while !st2.load(Ordering::Relaxed) {
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
                        if reported
                            .iter()
                            .any(|r| (r.0, r.1, r.2) == (s.target, s.thread, start))
                        {
                            continue;
                        }
                        reported.push((s.target, s.thread, start));
                        let _ = tx.send(Msg::StallInProgress {
                            target: s.target,
                            thread: s.thread,
                            op,
                            start_ns: start,
                        });
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
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

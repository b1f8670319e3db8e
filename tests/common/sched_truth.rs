//! An independent account of blocked time, from the kernel's scheduler
//! events, read by code that shares nothing with stallscope: its own
//! tracefs instance with sched_switch (into D: `prev_state & 2`) and
//! sched_wakeup filtered by task name, summed as wakeup − switch per
//! thread; and the same threads' waits on pages under writeback
//! (folio_wait_writeback, filtered by the task running it), counted. Dropping it removes the instance (and unmounts tracefs if this
//! mounted it).

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Blocked {
    /// Every block of the named threads, ns.
    pub total_ns: u64,
    pub blocks: u64,
    /// folio_wait_writeback events of the named threads.
    pub page_waits: u64,
}

pub struct SchedTruth {
    instance: PathBuf,
    mounted: bool,
    stop: Arc<AtomicBool>,
    sum: Arc<Mutex<Blocked>>,
    reader: Option<std::thread::JoinHandle<()>>,
}

impl SchedTruth {
    /// Starts counting D-state blocks of threads named `comm`.
    pub fn start(comm: &str) -> SchedTruth {
        let (instance, mounted) = super::tracefs::instance("sched-truth", 4096);
        let w = |f: &str, v: &str| std::fs::write(instance.join(f), v).unwrap();
        w(
            "events/sched/sched_switch/filter",
            &format!("prev_state & 2 && prev_comm == \"{comm}\""),
        );
        w(
            "events/sched/sched_wakeup/filter",
            &format!("comm == \"{comm}\""),
        );
        w(
            "events/writeback/folio_wait_writeback/filter",
            &format!("comm == \"{comm}\""),
        );
        w("events/sched/sched_switch/enable", "1");
        w("events/sched/sched_wakeup/enable", "1");
        w("events/writeback/folio_wait_writeback/enable", "1");
        let stop = Arc::new(AtomicBool::new(false));
        let sum = Arc::new(Mutex::new(Blocked::default()));
        let pipe = std::fs::File::open(instance.join("trace_pipe")).unwrap();
        let (st, sm) = (stop.clone(), sum.clone());
        let reader = std::thread::spawn(move || read_loop(pipe, &st, &sm));
        SchedTruth {
            instance,
            mounted,
            stop,
            sum,
            reader: Some(reader),
        }
    }

    /// Stops and returns what it counted.
    pub fn stop(mut self) -> Blocked {
        self.finish();
        *self.sum.lock().unwrap()
    }

    fn finish(&mut self) {
        for e in [
            "sched/sched_switch",
            "sched/sched_wakeup",
            "writeback/folio_wait_writeback",
        ] {
            let _ = std::fs::write(self.instance.join(format!("events/{e}/enable")), "0");
        }
        self.stop.store(true, Ordering::Relaxed);
        // A wakeup of anything ends the blocking read of trace_pipe: the
        // events are off now, so write a marker into our instance.
        let _ = std::fs::write(self.instance.join("trace_marker"), "stop\n");
        if let Some(r) = self.reader.take() {
            let _ = r.join();
        }
    }
}

fn read_loop(pipe: std::fs::File, stop: &AtomicBool, sum: &Mutex<Blocked>) {
    let mut open: std::collections::HashMap<u32, u64> = std::collections::HashMap::new();
    super::tracefs::read_lines(
        pipe,
        || stop.load(Ordering::Relaxed),
        |l| {
            if l.contains(": folio_wait_writeback: ") {
                sum.lock().unwrap().page_waits += 1;
                return;
            }
            let Some((t, pid, switch)) = parse(l) else {
                return;
            };
            if switch {
                open.insert(pid, t);
            } else if let Some(s) = open.remove(&pid) {
                let mut m = sum.lock().unwrap();
                m.total_ns += t.saturating_sub(s);
                m.blocks += 1;
            }
        },
    );
}

/// (timestamp ns, thread, is a switch into D) of one trace line.
fn parse(l: &str) -> Option<(u64, u32, bool)> {
    let (switch, at, key) = if let Some(i) = l.find(": sched_switch: ") {
        (true, i, " prev_pid=")
    } else if let Some(i) = l.find(": sched_wakeup: ") {
        (false, i, " pid=")
    } else {
        return None;
    };
    let ts = l[..at].rsplit(' ').next()?;
    let (s, f) = ts.split_once('.')?;
    let t = s.parse::<u64>().ok()? * 1_000_000_000
        + f.parse::<u64>().ok()? * 10u64.pow(9 - f.len() as u32);
    let rest = &l[at..];
    let p = rest.find(key)? + key.len();
    let pid = rest[p..].split(' ').next()?.parse().ok()?;
    Some((t, pid, switch))
}

impl Drop for SchedTruth {
    fn drop(&mut self) {
        self.finish();
        super::tracefs::release(&self.instance, self.mounted);
    }
}

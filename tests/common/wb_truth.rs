//! The kernel's own account of why threads named `ss-*` (stallscope's
//! writers) waited, from code that shares nothing with stallscope: its own
//! tracefs instance (trace_clock mono) with their balance_dirty_pages
//! sleeps (pause ms), their waits on pages under writeback
//! (folio_wait_writeback), and their D-state blocks (sched_switch into D,
//! sched_wakeup). Read from trace_pipe as text; dropping it removes the
//! instance.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

const EVENTS: [&str; 4] = [
    "writeback/balance_dirty_pages",
    "writeback/folio_wait_writeback",
    "sched/sched_switch",
    "sched/sched_wakeup",
];

#[derive(Clone, Debug, PartialEq)]
pub enum Kind {
    /// A balance_dirty_pages sleep of this many ms.
    Throttle(u64),
    PageWait,
    /// Switched out into D.
    Blocked,
    Woken,
}

#[derive(Clone, Debug)]
pub struct Ev {
    pub t_ns: u64,
    pub comm: String,
    pub kind: Kind,
}

/// What the kernel says one thread did in a window.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Window {
    pub throttle_ms: u64,
    pub page_waits: u64,
    /// Time in D (blocks clipped to the window).
    pub d_ms: f64,
}

pub struct WbTruth {
    instance: PathBuf,
    mounted: bool,
    stop: Arc<AtomicBool>,
    events: Arc<Mutex<Vec<Ev>>>,
    reader: Option<std::thread::JoinHandle<()>>,
}

impl WbTruth {
    /// Starts recording the events of threads whose name starts with `prefix`.
    pub fn start(prefix: &str) -> WbTruth {
        let (instance, mounted) = super::tracefs::instance("wb-truth", 8192);
        let w = |f: &str, v: &str| std::fs::write(instance.join(f), v).unwrap();
        let mine = format!("comm ~ \"{prefix}*\"");
        w("events/writeback/balance_dirty_pages/filter", &mine);
        w("events/writeback/folio_wait_writeback/filter", &mine);
        w("events/sched/sched_wakeup/filter", &mine);
        w(
            "events/sched/sched_switch/filter",
            &format!("prev_state & 2 && prev_comm ~ \"{prefix}*\""),
        );
        for e in EVENTS {
            w(&format!("events/{e}/enable"), "1");
        }
        let stop = Arc::new(AtomicBool::new(false));
        let events = Arc::new(Mutex::new(Vec::new()));
        let pipe = std::fs::File::open(instance.join("trace_pipe")).unwrap();
        let (st, ev) = (stop.clone(), events.clone());
        let reader = std::thread::spawn(move || read_loop(pipe, &st, &ev));
        WbTruth {
            instance,
            mounted,
            stop,
            events,
            reader: Some(reader),
        }
    }

    /// Stops and returns every event, oldest first.
    pub fn stop(mut self) -> Vec<Ev> {
        self.finish();
        let mut v = std::mem::take(&mut *self.events.lock().unwrap());
        v.sort_by_key(|e| e.t_ns);
        v
    }

    fn finish(&mut self) {
        for e in EVENTS {
            let _ = std::fs::write(self.instance.join(format!("events/{e}/enable")), "0");
        }
        self.stop.store(true, Ordering::Relaxed);
        let _ = std::fs::write(self.instance.join("trace_marker"), "stop\n");
        if let Some(r) = self.reader.take() {
            let _ = r.join();
        }
    }
}

impl Drop for WbTruth {
    fn drop(&mut self) {
        self.finish();
        super::tracefs::release(&self.instance, self.mounted);
    }
}

/// What the events of thread `comm` say about [from, to] (mono ns).
pub fn window(events: &[Ev], comm: &str, from: u64, to: u64) -> Window {
    let mut w = Window::default();
    let mut blocked_at: Option<u64> = None;
    for e in events.iter().filter(|e| e.comm == comm) {
        match e.kind {
            Kind::Throttle(ms) if (from..=to).contains(&e.t_ns) => w.throttle_ms += ms,
            Kind::PageWait if (from..=to).contains(&e.t_ns) => w.page_waits += 1,
            Kind::Blocked => blocked_at = Some(e.t_ns),
            Kind::Woken => {
                if let Some(b) = blocked_at.take() {
                    let ov = e.t_ns.min(to).saturating_sub(b.max(from));
                    w.d_ms += ov as f64 / 1e6;
                }
            }
            _ => {}
        }
    }
    w
}

fn read_loop(pipe: std::fs::File, stop: &AtomicBool, out: &Mutex<Vec<Ev>>) {
    super::tracefs::read_lines(
        pipe,
        || stop.load(Ordering::Relaxed),
        |l| out.lock().unwrap().extend(parse(l)),
    );
}

/// `   ss-w0-2-13143  [001] d..2.  4711.123456: balance_dirty_pages: … pause=16 …`
fn parse(l: &str) -> Option<Ev> {
    let (head, kind, body) = [
        "balance_dirty_pages",
        "folio_wait_writeback",
        "sched_switch",
        "sched_wakeup",
    ]
    .iter()
    .find_map(|k| {
        let i = l.find(&format!(": {k}: "))?;
        Some((&l[..i], *k, &l[i + k.len() + 4..]))
    })?;
    let ts = head.rsplit(' ').next()?;
    let (s, f) = ts.split_once('.')?;
    let t_ns = s.parse::<u64>().ok()? * 1_000_000_000
        + f.parse::<u64>().ok()? * 10u64.pow(9 - f.len() as u32);
    let field = |key: &str| {
        let p = body.find(key)? + key.len();
        Some(body[p..].split(' ').next()?.to_string())
    };
    // The task that ran the event: "comm-pid" before the CPU column.
    let task = head.trim_start().split(" [").next()?.trim_end();
    let running = task.rsplit_once('-')?.0.to_string();
    let (comm, kind) = match kind {
        "balance_dirty_pages" => (running, Kind::Throttle(field(" pause=")?.parse().ok()?)),
        "folio_wait_writeback" => (running, Kind::PageWait),
        "sched_switch" => (field("prev_comm=")?, Kind::Blocked),
        _ => (field("comm=")?, Kind::Woken),
    };
    Some(Ev { t_ns, comm, kind })
}

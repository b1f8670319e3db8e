//! The dashboard's state: plain data changed only by snapshots, live stalls,
//! notices from the runner and key actions. No terminal here, so replay and
//! tests drive it exactly as the live loop does.

use super::keys::Action;
use crate::base::units::kib_to_mib;
use crate::config::{Mode, SyncPolicy};
use crate::model::cause::Cause;
use crate::model::control::{Control, Notice};
use crate::model::msg::EventKind;
use crate::model::observed::{BlockTiming, Watched};
use crate::model::snapshot::{LatSummary, ObservedInterval, Snapshot, TargetInterval, TargetMeta};
use crate::model::stall::Stall;
use crate::model::stall::{Live, Who};
use std::collections::VecDeque;
use std::path::PathBuf;

/// Narrowest and widest chart window, seconds.
pub const WINDOW_MIN_S: u64 = 10;
pub const WINDOW_MAX_S: u64 = 3600;
/// History kept per target: the widest window, bounded in points too so a
/// short `--interval` cannot grow memory without limit.
pub const HISTORY_S: f64 = WINDOW_MAX_S as f64;
pub const MAX_POINTS: usize = 40_000;
pub const MAX_STALLS: usize = 500;
pub const MAX_MARKS: usize = 20_000;
pub const MAX_MESSAGES: usize = 20;
pub const MAX_THREADS: u32 = 1024;
/// At most this many observed processes get a view of their own (a server
/// forking a process per connection would otherwise grow one per client).
pub const MAX_OBSERVED_VIEWS: usize = 32;
const MAX_PROMPT: usize = 4096;
/// Controls awaiting the runner's answer; more means it stopped answering.
const MAX_PENDING: usize = 64;

/// What the header shows about the run. `mode`, `threads` and `active`
/// follow the key actions at once and the snapshots when they change.
#[derive(Clone, Debug, PartialEq)]
pub struct Header {
    pub mode: Mode,
    pub threads: u32,
    pub record_size: u64,
    pub sync: SyncPolicy,
    pub active: usize,
    pub recording: bool,
    /// Ok: tracefs events available; Err: why not.
    pub tracing: Result<(), String>,
    /// Showing a recording: there are no writers to control.
    pub replay: bool,
}

/// How the terminal may be drawn on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Style {
    /// No braille or box-drawing glyphs: ASCII only.
    pub ascii: bool,
    /// False for NO_COLOR / --no-color.
    pub color: bool,
}

impl Default for Style {
    fn default() -> Self {
        Style {
            ascii: false,
            color: true,
        }
    }
}

/// One interval of one target as the charts plot it; `None` = unknown
/// (no sample, no tracing, no ops to time), drawn as a gap, never as 0.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Point {
    /// End of the interval, s since start.
    pub t_s: f64,
    pub interval_s: f64,
    /// Writers ran on this target during the interval.
    pub active: bool,
    pub ops_per_s: f64,
    pub mib_per_s: f64,
    pub p99_ms: Option<f64>,
    pub max_ms: Option<f64>,
    pub dirty_mib: Option<f64>,
    pub writeback_mib: Option<f64>,
    pub bg_thresh_mib: Option<f64>,
    pub thresh_mib: Option<f64>,
    pub pause_ms_per_s: Option<f64>,
    pub psi_full_pct: Option<f64>,
    pub util_pct: Option<f64>,
    /// An observed process, not our writers: no ops, `mib_per_s` is its
    /// write_bytes rate and `max_ms` its longest D-state stall.
    pub observed: bool,
    /// A writer of this target stopped on an error (see `TargetInterval`).
    pub failed: bool,
    /// Stalls of this view, and of all views, up to this interval: what
    /// the header and the list count at the view end (frozen or not).
    pub stalls_so_far: u64,
    pub all_stalls_so_far: u64,
}

impl Point {
    /// Figures through `rates` and `LatSummary::of`, like every other view.
    pub fn of(s: &Snapshot, ti: &TargetInterval) -> Point {
        let r = ti.rates(s.interval_s);
        let lat = (!ti.hist.is_empty()).then(|| LatSummary::of(&ti.hist));
        let k = s.kernel.as_ref();
        let mib = |kib: Option<u64>| kib.map(kib_to_mib);
        let dev = k
            .and_then(|k| k.devs.get(ti.target))
            .and_then(Option::as_ref);
        let per_s = |v: u64| (s.interval_s > 0.0).then(|| v as f64 / s.interval_s);
        Point {
            t_s: s.t_s,
            interval_s: s.interval_s,
            active: ti.active,
            ops_per_s: r.ops_per_s,
            mib_per_s: r.mib_per_s,
            p99_ms: lat.map(|l| l.p99 as f64 / 1e3),
            max_ms: lat.map(|l| l.max as f64 / 1e3),
            dirty_mib: k.and_then(|k| mib(k.dirty_kib)),
            writeback_mib: k.and_then(|k| mib(k.writeback_kib)),
            bg_thresh_mib: k.and_then(|k| mib(k.dirty_bg_thresh_kib)),
            thresh_mib: k.and_then(|k| mib(k.dirty_thresh_kib)),
            pause_ms_per_s: ti.bdp.and_then(|b| per_s(b.pause_ms)),
            psi_full_pct: k.and_then(|k| k.psi_io_full_pct),
            util_pct: dev.map(|d| d.util_pct),
            observed: false,
            failed: ti.failed,
            stalls_so_far: 0,
            all_stalls_so_far: 0,
        }
    }

    /// An observed process's interval; `longest_ms` is its longest stall
    /// that ended in the interval.
    pub fn of_observed(s: &Snapshot, o: &ObservedInterval, longest_ms: Option<f64>) -> Point {
        let k = s.kernel.as_ref();
        let mib = |kib: Option<u64>| kib.map(kib_to_mib);
        let per_s = |v: u64| (s.interval_s > 0.0).then(|| v as f64 / s.interval_s);
        Point {
            t_s: s.t_s,
            interval_s: s.interval_s,
            active: o.alive,
            ops_per_s: 0.0,
            mib_per_s: o.write_bytes.map_or(0.0, |b| {
                crate::model::snapshot::rates(0, b, s.interval_s).mib_per_s
            }),
            p99_ms: None,
            max_ms: longest_ms,
            dirty_mib: k.and_then(|k| mib(k.dirty_kib)),
            writeback_mib: k.and_then(|k| mib(k.writeback_kib)),
            bg_thresh_mib: k.and_then(|k| mib(k.dirty_bg_thresh_kib)),
            thresh_mib: k.and_then(|k| mib(k.dirty_thresh_kib)),
            pause_ms_per_s: o.bdp.and_then(|b| per_s(b.pause_ms)),
            psi_full_pct: k.and_then(|k| k.psi_io_full_pct),
            util_pct: None,
            observed: true,
            failed: false,
            stalls_so_far: 0,
            all_stalls_so_far: 0,
        }
    }

    /// Where the interval sits on a time axis: its middle.
    pub fn x(&self) -> f64 {
        self.t_s - self.interval_s / 2.0
    }
}

/// A stall as a view draws it: when, until when, why.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct StallMark {
    pub t_s: f64,
    pub end_s: f64,
    pub cause: Cause,
}

/// A target, its chart history and its stall times.
#[derive(Clone, Debug, PartialEq)]
pub struct TargetView {
    pub meta: TargetMeta,
    /// Oldest first, ascending `t_s`.
    pub points: VecDeque<Point>,
    /// Stalls of this view by start time, ascending.
    pub stall_marks: VecDeque<StallMark>,
    /// Stalls seen on this target over the whole run.
    pub stalls: u64,
}

impl TargetView {
    fn new(meta: TargetMeta) -> Self {
        TargetView {
            meta,
            points: VecDeque::new(),
            stall_marks: VecDeque::new(),
            stalls: 0,
        }
    }

    /// Points whose interval ends within `[t0, t1]`, plus one either side
    /// so lines reach the chart edges.
    pub fn visible(&self, t0: f64, t1: f64) -> impl Iterator<Item = &Point> {
        let a = self
            .points
            .partition_point(|p| p.t_s < t0)
            .saturating_sub(1);
        let b = (self.points.partition_point(|p| p.t_s <= t1) + 1).min(self.points.len());
        self.points.range(a..b.max(a))
    }

    /// The last point at or before `t`.
    pub fn at(&self, t: f64) -> Option<&Point> {
        let i = self.points.partition_point(|p| p.t_s <= t);
        i.checked_sub(1).map(|i| &self.points[i])
    }

    pub fn marks_in(&self, t0: f64, t1: f64) -> impl Iterator<Item = f64> + '_ {
        let a = self.stall_marks.partition_point(|m| m.t_s < t0);
        self.stall_marks
            .range(a..)
            .map(|m| m.t_s)
            .take_while(move |&t| t <= t1)
    }

    /// The stall lane over `[t0, t1]` in `cols` cells, as seen at `until`
    /// (the view end): each cell the cause that stalled this view longest
    /// within the cell's time, if any. A 13 s stall spans 13 s of cells;
    /// 500 short ones make a band.
    pub fn lane(&self, t0: f64, t1: f64, cols: usize, until: f64) -> Vec<Option<Cause>> {
        let mut time = vec![[0.0f64; Cause::ALL.len()]; cols];
        if cols == 0 || t1 <= t0 {
            return Vec::new();
        }
        let dt = (t1 - t0) / cols as f64;
        for m in self
            .stall_marks
            .iter()
            .take_while(|m| m.t_s <= t1.min(until))
        {
            let (a, b) = (m.t_s.max(t0), m.end_s.min(t1).min(until));
            if b < a {
                continue;
            }
            let k = Cause::ALL.iter().position(|&c| c == m.cause).unwrap_or(0);
            let first = ((a - t0) / dt) as usize;
            let last = (((b - t0) / dt) as usize).min(cols - 1);
            for (i, cell) in time.iter_mut().enumerate().take(last + 1).skip(first) {
                let (c0, c1) = (t0 + i as f64 * dt, t0 + (i + 1) as f64 * dt);
                let overlap = b.min(c1) - a.max(c0);
                // A stall shorter than a cell still shows in its cell; one
                // that ends on a cell's edge does not spill into it.
                if overlap > 0.0 || first == last {
                    cell[k] += overlap.max(1e-9);
                }
            }
        }
        time.iter()
            .map(|c| {
                let (k, v) = c
                    .iter()
                    .enumerate()
                    .max_by(|x, y| x.1.total_cmp(y.1))
                    .unwrap_or((0, &0.0));
                (*v > 0.0).then(|| Cause::ALL[k])
            })
            .collect()
    }
}

/// When the active target, mode or thread count changed (or a control was
/// applied); every chart draws it.
#[derive(Clone, Debug, PartialEq)]
pub struct Switch {
    pub t_s: f64,
    pub what: String,
}

/// A line for the status bar.
#[derive(Clone, Debug, PartialEq)]
pub struct Message {
    pub text: String,
    pub error: bool,
}

/// What the last snapshot said the writers were doing.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Placement {
    active: usize,
    mode: Mode,
    threads: u32,
}

#[derive(Clone, Debug, PartialEq)]
pub struct App {
    header: Header,
    style: Style,
    targets: Vec<TargetView>,
    window_s: u64,
    /// End of the newest snapshot.
    latest_t: f64,
    frozen_at: Option<f64>,
    paused: bool,
    help: bool,
    /// The wake-up chains popup (`w`).
    chains: bool,
    compare: bool,
    prompt: Option<String>,
    /// Newest first.
    stalls: VecDeque<Stall>,
    /// Stalls seen in all, listed or not.
    stall_total: u64,
    live: Live,
    switches: VecDeque<Switch>,
    /// Newest last.
    messages: VecDeque<Message>,
    seen: Option<Placement>,
    /// Controls sent and not yet answered, oldest first; the runner answers
    /// each with one notice, so a refusal can undo what the header assumed.
    pending: VecDeque<Control>,
    quit: bool,
    /// Replay: position, speed and play state, shown in the header.
    replay_status: String,
    /// Observe mode: the watched processes; their views follow the
    /// `real` targets our writers use.
    observed: Vec<Watched>,
    /// Observed processes past `MAX_OBSERVED_VIEWS`, which have no view.
    unviewed: std::collections::BTreeSet<u32>,
    block_timing: Option<BlockTiming>,
    real: usize,
}

impl App {
    pub fn new(header: Header, targets: Vec<TargetMeta>, window_s: u64, style: Style) -> App {
        App {
            header,
            style,
            targets: targets.into_iter().map(TargetView::new).collect(),
            window_s: window_s.clamp(WINDOW_MIN_S, WINDOW_MAX_S),
            latest_t: 0.0,
            frozen_at: None,
            paused: false,
            help: false,
            chains: false,
            compare: false,
            prompt: None,
            stalls: VecDeque::new(),
            stall_total: 0,
            live: Live::default(),
            switches: VecDeque::new(),
            messages: VecDeque::new(),
            seen: None,
            pending: VecDeque::new(),
            quit: false,
            replay_status: String::new(),
            observed: Vec::new(),
            unviewed: std::collections::BTreeSet::new(),
            block_timing: None,
            real: 0,
        }
    }

    /// Observe mode: one view per watched process after the targets. Tab
    /// and the number keys show them; they have no writers to steer.
    pub fn observe(&mut self, watched: &[Watched]) {
        for w in watched {
            if !self.join_observed(w.clone()) {
                self.unviewed.insert(w.pid);
            }
        }
    }

    /// A view for one more observed process (at start, or joined later).
    /// False past `MAX_OBSERVED_VIEWS`: the process gets no view (its
    /// stalls still go to the list).
    fn join_observed(&mut self, w: Watched) -> bool {
        if self.observed.len() >= MAX_OBSERVED_VIEWS {
            return false;
        }
        if self.observed.is_empty() {
            self.real = self.targets.len();
        }
        self.targets.push(TargetView::new(TargetMeta {
            path: format!("{} (pid {})", w.comm, w.pid),
            fs: "observed".into(),
            device: "its threads".into(),
            mount_options: "no writers of ours".into(),
        }));
        self.observed.push(w);
        true
    }

    pub fn observed(&self) -> &[Watched] {
        &self.observed
    }

    /// How observed threads' blocks are timed, once an interval said so.
    pub fn block_timing(&self) -> Option<BlockTiming> {
        self.block_timing
    }

    /// Whether view `i` is an observed process rather than a target.
    pub fn is_observed_view(&self, i: usize) -> bool {
        !self.observed.is_empty() && i >= self.real
    }

    fn observed_view(&self, pid: u32) -> Option<usize> {
        let at = self.observed.iter().position(|w| w.pid == pid)?;
        Some(self.real + at)
    }

    // ---- inputs ----

    /// Stores one interval; frozen or not, nothing is dropped but by age.
    pub fn on_snapshot(&mut self, s: &Snapshot) {
        self.latest_t = self.latest_t.max(s.t_s);
        for ti in &s.targets {
            self.ensure_target(ti.target);
            push_bounded(
                &mut self.targets[ti.target].points,
                Point::of(s, ti),
                MAX_POINTS,
            );
        }
        for o in &s.observed {
            self.block_timing = Some(o.timing);
            if self.observed_view(o.pid).is_none() && !self.unviewed.contains(&o.pid) {
                let w = Watched {
                    pid: o.pid,
                    comm: o.comm.clone(),
                };
                let text = if self.join_observed(w) {
                    format!("observed process {} ({}) joined", o.pid, o.comm)
                } else {
                    self.unviewed.insert(o.pid);
                    format!(
                        "observed process {} ({}) joined; past {MAX_OBSERVED_VIEWS} views it has none, its stalls are in the list",
                        o.pid, o.comm
                    )
                };
                self.message(text, false);
            }
            let Some(i) = self.observed_view(o.pid) else {
                continue;
            };
            let longest = s
                .stalls
                .iter()
                .filter(|x| x.ev.who.pid() == Some(o.pid))
                .map(|x| x.ev.dur() as f64 / 1e6)
                .reduce(f64::max);
            push_bounded(
                &mut self.targets[i].points,
                Point::of_observed(s, o, longest),
                MAX_POINTS,
            );
            if !o.alive {
                self.message(
                    format!("observed process {} ({}) exited", o.pid, o.comm),
                    true,
                );
            }
        }
        // After the observed views: a process that joined has one now.
        for st in &s.stalls {
            self.add_stall(st);
        }
        let all = self.stall_total;
        for tv in &mut self.targets {
            if let Some(p) = tv.points.back_mut().filter(|p| p.t_s == s.t_s) {
                p.stalls_so_far = tv.stalls;
                p.all_stalls_so_far = all;
            }
        }
        for e in &s.events {
            self.message(e.message.clone(), e.kind == EventKind::WriterError);
        }
        self.follow_placement(s);
        self.trim();
    }

    /// The stalls in progress right now (replaces the previous set).
    pub fn on_live(&mut self, live: Live) {
        self.live = live;
    }

    /// The view a stall belongs to: a writer's target, or an observed
    /// thread's process.
    pub fn view_of(&self, who: &Who) -> Option<usize> {
        match who {
            Who::Writer { target, .. } => Some(*target),
            Who::Process { pid, .. } => self.observed_view(*pid),
        }
    }

    pub fn on_notice(&mut self, n: Notice) {
        match n {
            Notice::Applied { t_s, what } => {
                self.pending.pop_front();
                self.add_switch(t_s, what.clone());
                self.message(format!("applied: {what}"), false);
            }
            Notice::Refused(why) => {
                if let Some(c) = self.pending.pop_front() {
                    self.undo(&c);
                }
                self.message(format!("refused: {why}"), true);
            }
            Notice::TargetAdded(i, meta) => {
                self.pending.pop_front();
                let path = meta.path.clone();
                self.ensure_target(i);
                self.targets[i].meta = meta;
                self.message(format!("added target {}: {path}", i + 1), false);
            }
            Notice::WorkerError(why) => self.message(why, true),
        }
    }

    /// Applies a key action; writer actions come back as the `Control` to
    /// send to the runner, view-only ones return None.
    pub fn on_action(&mut self, a: Action) -> Option<Control> {
        let c = self.control_for(a)?;
        if c != Control::Quit {
            push_bounded(&mut self.pending, c.clone(), MAX_PENDING);
        }
        Some(c)
    }

    // ---- what the UI reads ----

    pub fn header(&self) -> &Header {
        &self.header
    }
    pub fn style(&self) -> Style {
        self.style
    }
    pub fn targets(&self) -> &[TargetView] {
        &self.targets
    }
    pub fn window_s(&self) -> u64 {
        self.window_s
    }
    pub fn latest_t(&self) -> f64 {
        self.latest_t
    }
    pub fn frozen(&self) -> bool {
        self.frozen_at.is_some()
    }
    pub fn paused(&self) -> bool {
        self.paused
    }
    pub fn help_open(&self) -> bool {
        self.help
    }
    pub fn chains_open(&self) -> bool {
        self.chains
    }
    pub fn comparing(&self) -> bool {
        self.compare && self.targets.len() >= 2
    }
    pub fn prompt(&self) -> Option<&str> {
        self.prompt.as_deref()
    }
    pub fn prompt_open(&self) -> bool {
        self.prompt.is_some()
    }
    pub fn set_replay_status(&mut self, s: String) {
        self.replay_status = s;
    }
    pub fn replay_status(&self) -> &str {
        &self.replay_status
    }
    /// Quit from outside the key table (replay handles its own keys).
    pub fn quit(&mut self) {
        self.quit = true;
    }
    pub fn should_quit(&self) -> bool {
        self.quit
    }
    pub fn live(&self) -> &[Stall] {
        &self.live.stalls
    }
    /// How long a live stall has lasted so far, ms.
    pub fn live_age_ms(&self, s: &Stall) -> f64 {
        self.live.age_ms(s)
    }
    pub fn live_is_empty(&self) -> bool {
        self.live.stalls.is_empty()
    }
    pub fn switches(&self) -> &VecDeque<Switch> {
        &self.switches
    }
    pub fn messages(&self) -> &VecDeque<Message> {
        &self.messages
    }
    pub fn last_message(&self) -> Option<&Message> {
        self.messages.back()
    }

    /// The right end of the charts: the newest data, or where `f` froze it.
    pub fn view_end(&self) -> f64 {
        self.frozen_at.unwrap_or(self.latest_t)
    }

    /// The charts' time range: the window ending at `view_end`, or the
    /// first window while the run is younger than it.
    pub fn view_range(&self) -> (f64, f64) {
        let w = self.window_s as f64;
        let t1 = self.view_end().max(w);
        (t1 - w, t1)
    }

    /// Stalls of the shown view and of all views up to the view end (a
    /// frozen view keeps its counts while stalls arrive).
    pub fn stall_counts(&self) -> (u64, u64) {
        let Some(t) = self.targets.get(self.header.active) else {
            return (0, self.stall_total);
        };
        match t.at(self.view_end()) {
            Some(p) if self.frozen() => (p.stalls_so_far, p.all_stalls_so_far),
            _ => (t.stalls, self.stall_total),
        }
    }

    /// Stalls up to the view end, newest first.
    pub fn stalls(&self) -> impl Iterator<Item = &Stall> {
        let end = self.view_end();
        self.stalls
            .iter()
            .filter(move |s| s.ev.start_ns as f64 / 1e9 <= end)
    }

    /// The targets the charts show: the active one, and in the compare
    /// view also the next one.
    pub fn shown_targets(&self) -> Vec<usize> {
        let n = self.targets.len();
        let a = self.header.active.min(n.saturating_sub(1));
        if self.comparing() {
            vec![a, (a + 1) % n]
        } else {
            vec![a]
        }
    }

    // ---- internals ----

    fn control_for(&mut self, a: Action) -> Option<Control> {
        if self.header.replay && writer_action(a) {
            // In a replay, picking a target only shows it.
            match a {
                Action::NextTarget => drop(self.switch_to(self.header.active + 1)),
                Action::PickTarget(i) => drop(self.pick(i)),
                _ => self.message("replay: there are no writers to control".into(), true),
            }
            return None;
        }
        match a {
            Action::Quit => {
                self.quit = true;
                Some(Control::Quit)
            }
            Action::TogglePause => {
                self.paused = !self.paused;
                Some(Control::Pause(self.paused))
            }
            Action::ToggleRecord => {
                self.header.recording = !self.header.recording;
                Some(Control::Record(self.header.recording))
            }
            Action::NextTarget => self.switch_to(self.header.active + 1),
            Action::PickTarget(i) => self.pick(i),
            Action::NextMode => Some(self.next_mode()),
            Action::MoreThreads => self.set_threads(self.header.threads.saturating_add(1)),
            Action::FewerThreads => self.set_threads(self.header.threads.saturating_sub(1)),
            Action::PromptSubmit => self.submit(),
            _ => {
                self.view_action(a);
                None
            }
        }
    }

    /// Actions that only change what is shown.
    fn view_action(&mut self, a: Action) {
        match a {
            Action::ToggleFreeze => {
                self.frozen_at = match self.frozen_at {
                    Some(_) => None,
                    None => Some(self.latest_t),
                }
            }
            Action::WiderWindow => self.window_s = (self.window_s * 2).min(WINDOW_MAX_S),
            Action::NarrowerWindow => self.window_s = (self.window_s / 2).max(WINDOW_MIN_S),
            Action::ToggleCompare if self.targets.len() < 2 => {
                self.message("compare needs two targets (add one with a)".into(), true)
            }
            Action::ToggleCompare => self.compare = !self.compare,
            Action::ToggleHelp => self.help = !self.help,
            Action::ToggleChains => self.chains = !self.chains,
            Action::Dismiss => {
                self.help = false;
                self.chains = false;
                self.prompt = None;
            }
            Action::AddTarget if !self.observed.is_empty() => self.message(
                "adding a target is off while observing (restart with more --target)".into(),
                true,
            ),
            Action::AddTarget => self.prompt = Some(String::new()),
            Action::PromptChar(c) => {
                if let Some(p) = self.prompt.as_mut().filter(|p| p.len() < MAX_PROMPT) {
                    p.push(c);
                }
            }
            Action::PromptBackspace => {
                if let Some(p) = self.prompt.as_mut() {
                    p.pop();
                }
            }
            Action::PromptCancel => self.prompt = None,
            _ => {}
        }
    }

    fn switch_to(&mut self, i: usize) -> Option<Control> {
        let n = self.targets.len();
        if n < 2 {
            self.message("only one target (add one with a)".into(), true);
            return None;
        }
        self.show(i % n)
    }

    fn pick(&mut self, i: usize) -> Option<Control> {
        let n = self.targets.len();
        if i >= n {
            let have = match n {
                1 => "there is one".to_string(),
                n => format!("there are {n} (1-{n})"),
            };
            self.message(format!("no target {}: {have}", i + 1), true);
            return None;
        }
        if i == self.header.active {
            return None;
        }
        self.show(i)
    }

    /// Shows view `i`; a target also gets the writers, an observed process
    /// is only shown (the writers stay where they are).
    fn show(&mut self, i: usize) -> Option<Control> {
        self.header.active = i;
        (!self.is_observed_view(i)).then_some(Control::SwitchTarget(i))
    }

    fn next_mode(&mut self) -> Control {
        let at = Mode::ALL.iter().position(|&m| m == self.header.mode);
        let next = Mode::ALL[at.map_or(0, |i| (i + 1) % Mode::ALL.len())];
        self.header.mode = next;
        Control::SetMode(next)
    }

    fn set_threads(&mut self, n: u32) -> Option<Control> {
        let n = n.clamp(1, MAX_THREADS);
        if n == self.header.threads {
            return None;
        }
        self.header.threads = n;
        Some(Control::SetThreads(n))
    }

    fn submit(&mut self) -> Option<Control> {
        let typed = self.prompt.take()?;
        let path = typed.trim();
        if path.is_empty() {
            self.message("add target: no path typed".into(), true);
            return None;
        }
        Some(Control::AddTarget(PathBuf::from(path)))
    }

    /// Takes back what a refused control made the header claim.
    fn undo(&mut self, c: &Control) {
        match c {
            Control::Pause(p) => self.paused = !p,
            Control::Record(r) => self.header.recording = !r,
            Control::SwitchTarget(_) | Control::SetMode(_) | Control::SetThreads(_) => {
                if let Some(p) = self.seen {
                    self.set_placement(p);
                }
            }
            Control::AddTarget(_) | Control::Quit => {}
        }
    }

    /// Snapshots are the truth: a change in what the writers did moves the
    /// header and marks the charts.
    fn follow_placement(&mut self, s: &Snapshot) {
        let Some(ti) = s.targets.iter().find(|t| t.active) else {
            return;
        };
        let now = Placement {
            active: ti.target,
            mode: ti.mode,
            threads: ti.threads,
        };
        if self.seen == Some(now) {
            return;
        }
        if self.seen.is_some() {
            let what = format!("target {} {} x{}", now.active + 1, now.mode, now.threads);
            self.add_switch(s.t_s - s.interval_s, what);
        }
        self.seen = Some(now);
        self.set_placement(now);
    }

    fn set_placement(&mut self, p: Placement) {
        self.header.active = p.active;
        self.header.mode = p.mode;
        self.header.threads = p.threads;
    }

    fn add_stall(&mut self, st: &Stall) {
        self.stall_total += 1;
        // Newest first by start time, whatever order they were reported in
        // (a long stall is reported after shorter ones that began later).
        let at = self
            .stalls
            .partition_point(|s| s.ev.start_ns > st.ev.start_ns);
        self.stalls.insert(at, st.clone());
        self.stalls.truncate(MAX_STALLS);
        let Some(view) = self.view_of(&st.ev.who) else {
            // A process past the view limit: listed, no marks.
            return;
        };
        self.ensure_target(view);
        let tv = &mut self.targets[view];
        tv.stalls += 1;
        let t = st.ev.start_ns as f64 / 1e9;
        let mark = StallMark {
            t_s: t,
            end_s: t + st.ev.dur() as f64 / 1e9,
            cause: st.why.cause,
        };
        let at = tv.stall_marks.partition_point(|m| m.t_s <= t);
        tv.stall_marks.insert(at, mark);
        if tv.stall_marks.len() > MAX_MARKS {
            tv.stall_marks.pop_front();
        }
    }

    /// A switch marker, unless one is already there (a notice and the
    /// snapshot after it report the same change).
    fn add_switch(&mut self, t_s: f64, what: String) {
        let near = |s: &Switch| (s.t_s - t_s).abs() <= 1.5;
        if self.switches.iter().rev().take(4).any(near) {
            return;
        }
        let at = self.switches.partition_point(|s| s.t_s <= t_s);
        self.switches.insert(at, Switch { t_s, what });
        if self.switches.len() > MAX_MARKS {
            self.switches.pop_front();
        }
    }

    /// A note for the person (the session's, at start): the message line.
    pub fn note(&mut self, text: String) {
        self.message(text, false);
    }

    fn message(&mut self, text: String, error: bool) {
        if self.messages.back().is_some_and(|m| m.text == text) {
            return;
        }
        push_bounded(&mut self.messages, Message { text, error }, MAX_MESSAGES);
    }

    /// Targets appear in snapshots or notices before any meta may have.
    fn ensure_target(&mut self, i: usize) {
        while self.targets.len() <= i {
            let n = self.targets.len();
            self.targets.push(TargetView::new(TargetMeta {
                path: format!("target {}", n + 1),
                fs: "?".into(),
                device: "?".into(),
                mount_options: String::new(),
            }));
        }
    }

    /// Drops what is older than the widest window.
    fn trim(&mut self) {
        let cut = self.latest_t - HISTORY_S - 1.0;
        for tv in &mut self.targets {
            while tv.points.front().is_some_and(|p| p.t_s < cut) {
                tv.points.pop_front();
            }
            while tv.stall_marks.front().is_some_and(|m| m.end_s < cut) {
                tv.stall_marks.pop_front();
            }
        }
        while self.switches.front().is_some_and(|s| s.t_s < cut) {
            self.switches.pop_front();
        }
    }
}

/// Actions that need running writers.
fn writer_action(a: Action) -> bool {
    matches!(
        a,
        Action::TogglePause
            | Action::NextTarget
            | Action::PickTarget(_)
            | Action::NextMode
            | Action::MoreThreads
            | Action::FewerThreads
            | Action::ToggleRecord
            | Action::AddTarget
            | Action::PromptSubmit
    )
}

fn push_bounded<T>(q: &mut VecDeque<T>, v: T, max: usize) {
    if q.len() >= max {
        q.pop_front();
    }
    q.push_back(v);
}

/// Synthetic snapshots for the tests of this module and of `view`.
#[cfg(test)]
pub(crate) mod fixture {
    use super::*;
    use crate::model::cause::{Attribution, Cause, Evidence};
    use crate::model::kernel::{DevInterval, KernelInterval};
    use crate::model::ops::{new_histogram, OpKind};
    use crate::model::snapshot::BdpStats;
    use crate::model::stall::Blocked;

    pub fn meta(i: usize) -> TargetMeta {
        let (path, fs) = [("/mnt/ext4", "ext4"), ("/mnt/xfs", "xfs")][i % 2];
        TargetMeta {
            path: format!(
                "{path}{}",
                if i >= 2 { i.to_string() } else { String::new() }
            ),
            fs: fs.into(),
            device: format!("loop{i}"),
            mount_options: "rw,relatime".into(),
        }
    }

    pub fn header() -> Header {
        Header {
            mode: Mode::Mmap,
            threads: 4,
            record_size: 818,
            sync: SyncPolicy::Periodic(std::time::Duration::from_secs(10)),
            active: 0,
            recording: false,
            tracing: Err("not root".into()),
            replay: false,
        }
    }

    pub fn app(n: usize) -> App {
        App::new(header(), (0..n).map(meta).collect(), 120, Style::default())
    }

    pub fn stall(target: usize, start_s: f64, dur_ms: f64, thread: u32, cause: Cause) -> Stall {
        Stall {
            ev: Blocked::writer(
                target,
                thread,
                OpKind::Write,
                (start_s * 1e9) as u64,
                (dur_ms * 1e6) as u64,
            ),
            why: Attribution::high(cause, Evidence::default()),
        }
    }

    pub fn interval(target: usize, active: bool, ops: u64, lat_us: &[u64]) -> TargetInterval {
        let mut hist = new_histogram();
        for &v in lat_us {
            hist.record(v).expect("latency in range");
        }
        TargetInterval {
            target,
            active,
            mode: Mode::Mmap,
            threads: 4,
            ops,
            bytes: ops * 818,
            hist,
            sync_hist: new_histogram(),
            stalls: 0,
            minflt: 0,
            majflt: 0,
            bdp: Some(BdpStats {
                events: 3,
                pause_ms: 120,
                max_pause_ms: 80,
            }),
            wb_waits: Some(0),
            failed: false,
        }
    }

    pub fn kernel(n: usize, dirty_mib: u64) -> KernelInterval {
        let dev = |i: usize| {
            Some(DevInterval {
                name: format!("loop{i}"),
                write_mib_per_s: 50.0,
                util_pct: 80.0,
                inflight: 4,
                w_await_ms: 3.0,
                flushes: None,
            })
        };
        KernelInterval {
            dirty_kib: Some(dirty_mib * 1024),
            writeback_kib: Some(10 * 1024),
            dirty_thresh_kib: Some(256 * 1024),
            dirty_bg_thresh_kib: Some(64 * 1024),
            nr_dirty: None,
            nr_writeback: None,
            dirtied_pages: None,
            written_pages: None,
            pgmajfault: None,
            psi_io_some_pct: Some(30.0),
            psi_io_full_pct: Some(12.0),
            devs: (0..n).map(dev).collect(),
        }
    }

    /// Interval `index` (1 s long, ending at `index` s) for `n` targets,
    /// target `active` running, ops and latencies from the index.
    pub fn snapshot(index: u64, n: usize, active: usize, stalls: Vec<Stall>) -> Snapshot {
        let targets = (0..n)
            .map(|i| {
                let on = i == active;
                let ops = if on { 10_000 + 100 * (index % 7) } else { 0 };
                let mut ti = interval(i, on, ops, &[]);
                if on {
                    // p99 3 ms, max 250 ms: both must be readable.
                    ti.hist.record_n(300, 985).expect("in range");
                    ti.hist.record_n(3_000, 14).expect("in range");
                    ti.hist.record(250_000).expect("in range");
                }
                ti
            })
            .collect();
        Snapshot {
            index,
            t_s: index as f64,
            interval_s: 1.0,
            targets,
            stalls,
            kernel: Some(kernel(n, 40 + index % 50)),
            raw: None,
            wb_starts: None,
            in_progress: Vec::new(),
            events: Vec::new(),
            observed: Vec::new(),
        }
    }

    /// `secs` intervals with a stall on the active target every 30 s.
    pub fn filled(n: usize, secs: u64) -> App {
        let mut a = app(n);
        for i in 1..=secs {
            let st = if i % 30 == 0 {
                vec![stall(0, i as f64 - 0.5, 2300.0, 7, Cause::DirtyThrottle)]
            } else {
                vec![]
            };
            a.on_snapshot(&snapshot(i, n, 0, st));
        }
        a
    }
}

#[cfg(test)]
mod tests {
    use super::fixture::*;
    use super::*;
    use crate::model::cause::Cause;
    use crate::model::stall::Blocked;

    /// One target, one observed process (pid 77) and an interval in which
    /// its thread 78 was in D for 400 ms, dirty-throttled.
    fn observing() -> (App, Snapshot) {
        let mut a = app(1);
        a.observe(&[Watched {
            pid: 77,
            comm: "java".into(),
        }]);
        let mut s = snapshot(1, 1, 0, vec![]);
        s.observed = vec![ObservedInterval {
            pid: 77,
            comm: "java".into(),
            alive: true,
            samples: 20,
            threads: 40,
            d_threads_max: 3,
            write_bytes: Some(8 << 20),
            bdp: Some(crate::model::snapshot::BdpStats {
                events: 4,
                pause_ms: 400,
                max_pause_ms: 200,
            }),
            ..ObservedInterval::default()
        }];
        let mut st = stall(0, 0.2, 400.0, 78, Cause::DirtyThrottle);
        st.ev = Blocked::process(
            (77, "java", 78, "MutationStage-1"),
            st.ev.start_ns,
            st.ev.dur(),
        );
        s.stalls = vec![st];
        (a, s)
    }

    #[test]
    fn an_observed_process_is_a_view_after_the_targets() {
        let (mut a, s) = observing();
        a.on_snapshot(&s);
        assert_eq!(a.targets().len(), 2);
        assert!(!a.is_observed_view(0) && a.is_observed_view(1));
        let p = a.targets()[1].points[0];
        assert!(p.observed);
        assert_eq!(p.mib_per_s, 8.0 / s.interval_s);
        assert_eq!(p.max_ms, Some(400.0), "its longest stall");
        assert_eq!(p.pause_ms_per_s, Some(400.0 / s.interval_s));
        let st = a.stalls().next().unwrap();
        assert_eq!(
            (a.view_of(&st.ev.who), st.ev.who.thread()),
            (Some(1), 78),
            "shown on its process's view"
        );
        assert_eq!(a.targets()[1].stalls, 1);
        assert_eq!(a.targets()[0].stalls, 0);
    }

    #[test]
    fn processes_past_the_view_limit_get_no_view_but_their_stalls_are_listed() {
        let (mut a, mut s) = observing();
        let n = MAX_OBSERVED_VIEWS + 8;
        s.observed = (0..n as u32)
            .map(|i| ObservedInterval {
                pid: 1000 + i,
                comm: "postgres".into(),
                alive: true,
                joined: true,
                samples: 20,
                ..ObservedInterval::default()
            })
            .collect();
        let mut st = stall(0, 0.2, 400.0, 2039, Cause::Sync);
        st.ev = Blocked::process(
            (1039, "postgres", 2039, "postgres"),
            st.ev.start_ns,
            st.ev.dur(),
        );
        s.stalls = vec![st];
        a.on_snapshot(&s);
        a.on_snapshot(&s);
        assert_eq!(a.observed().len(), MAX_OBSERVED_VIEWS);
        assert_eq!(
            a.targets().len(),
            1 + MAX_OBSERVED_VIEWS,
            "views stop at the limit"
        );
        assert_eq!(a.view_of(&s.stalls[0].ev.who), None);
        assert_eq!(a.stalls().count(), 2, "its stall is listed each time");
    }

    #[test]
    fn a_live_stall_of_an_observed_thread_lands_on_its_view() {
        let (mut a, _) = observing();
        let mut st = stall(0, 0.5, 0.0, 78, Cause::DirtyThrottle);
        st.ev = Blocked::process((77, "java", 78, "MutationStage-1"), st.ev.start_ns, 0);
        st.ev.dur_ns = None;
        a.on_live(Live {
            now_ns: 2_000_000_000,
            stalls: vec![st],
        });
        assert_eq!(a.view_of(&a.live()[0].ev.who), Some(1));
        assert_eq!(a.live_age_ms(&a.live()[0]), 1500.0);
    }

    #[test]
    fn showing_an_observed_view_moves_no_writers_and_adding_targets_is_off() {
        let (mut a, s) = observing();
        a.on_snapshot(&s);
        assert_eq!(a.on_action(Action::NextTarget), None, "view only");
        assert_eq!(a.header().active, 1);
        assert_eq!(
            a.on_action(Action::NextTarget),
            Some(Control::SwitchTarget(0))
        );
        a.on_action(Action::AddTarget);
        assert!(!a.prompt_open());
        assert!(a
            .last_message()
            .unwrap()
            .text
            .contains("off while observing"));
    }

    #[test]
    fn the_stall_lane_spans_each_stall_and_shows_the_longest_cause() {
        let mut a = app(2);
        // 10..23 s sync on target 0; many short throttles 40..50 s; one on target 1.
        let mut st = vec![stall(0, 10.0, 13_000.0, 1, Cause::Sync)];
        st.extend((0..50).map(|i| stall(0, 40.0 + i as f64 * 0.2, 150.0, 2, Cause::DirtyThrottle)));
        st.push(stall(1, 70.0, 500.0, 1, Cause::Device));
        a.on_snapshot(&snapshot(80, 2, 0, st));
        let lane = a.targets()[0].lane(0.0, 120.0, 120, 80.0);
        let at = |t: usize| lane[t];
        assert_eq!(at(9), None);
        assert!((10..23).all(|t| at(t) == Some(Cause::Sync)), "{lane:?}");
        assert_eq!(at(23), None);
        assert!(
            (40..50).all(|t| at(t) == Some(Cause::DirtyThrottle)),
            "a band"
        );
        assert_eq!(at(70), None, "target 1's stall is in its own lane");
        assert_eq!(
            a.targets()[1].lane(0.0, 120.0, 120, 80.0)[70],
            Some(Cause::Device)
        );
        // Seen from a frozen view at 45 s, the lane stops there.
        let frozen = a.targets()[0].lane(0.0, 120.0, 120, 45.0);
        assert_eq!(frozen[47], None);
        assert_eq!(frozen[44], Some(Cause::DirtyThrottle));
    }

    /// Defect: `9` with 3 targets did nothing and said nothing.
    #[test]
    fn a_target_number_past_the_last_says_so() {
        let mut a = app(3);
        assert_eq!(a.on_action(Action::PickTarget(8)), None);
        let m = a.last_message().expect("a message");
        assert!(
            m.error && m.text == "no target 9: there are 3 (1-3)",
            "{}",
            m.text
        );
    }

    #[test]
    fn writer_actions_return_their_control() {
        let mut a = app(3);
        assert_eq!(a.on_action(Action::TogglePause), Some(Control::Pause(true)));
        assert!(a.paused());
        assert_eq!(
            a.on_action(Action::TogglePause),
            Some(Control::Pause(false))
        );
        assert_eq!(
            a.on_action(Action::NextTarget),
            Some(Control::SwitchTarget(1))
        );
        assert_eq!(
            a.on_action(Action::PickTarget(2)),
            Some(Control::SwitchTarget(2))
        );
        assert_eq!(
            a.on_action(Action::NextTarget),
            Some(Control::SwitchTarget(0))
        );
        assert_eq!(a.on_action(Action::PickTarget(3)), None, "no such target");
        assert_eq!(a.on_action(Action::PickTarget(0)), None, "already there");
        assert_eq!(
            a.on_action(Action::NextMode),
            Some(Control::SetMode(Mode::Buffered))
        );
        assert_eq!(
            a.on_action(Action::MoreThreads),
            Some(Control::SetThreads(5))
        );
        assert_eq!(
            a.on_action(Action::FewerThreads),
            Some(Control::SetThreads(4))
        );
        assert_eq!(
            a.on_action(Action::ToggleRecord),
            Some(Control::Record(true))
        );
        assert_eq!(
            a.on_action(Action::ToggleRecord),
            Some(Control::Record(false))
        );
        assert_eq!(a.header().mode, Mode::Buffered);
        assert!(!a.should_quit());
        assert_eq!(a.on_action(Action::Quit), Some(Control::Quit));
        assert!(a.should_quit());
    }

    #[test]
    fn modes_cycle_through_all() {
        let mut a = app(1);
        let mut seen = vec![];
        for _ in 0..Mode::ALL.len() {
            match a.on_action(Action::NextMode) {
                Some(Control::SetMode(m)) => seen.push(m),
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(
            seen,
            [Mode::Buffered, Mode::Direct, Mode::Journal, Mode::Mmap]
        );
    }

    #[test]
    fn threads_stay_within_bounds() {
        let mut a = app(1);
        for _ in 0..3 {
            a.on_action(Action::FewerThreads);
        }
        assert_eq!(a.header().threads, 1);
        assert_eq!(a.on_action(Action::FewerThreads), None);
        for _ in 0..2000 {
            a.on_action(Action::MoreThreads);
        }
        assert_eq!(a.header().threads, MAX_THREADS);
        assert_eq!(a.on_action(Action::MoreThreads), None);
    }

    #[test]
    fn view_actions_return_nothing() {
        let mut a = app(2);
        for act in [
            Action::ToggleFreeze,
            Action::WiderWindow,
            Action::NarrowerWindow,
            Action::ToggleCompare,
            Action::ToggleHelp,
            Action::Dismiss,
            Action::AddTarget,
            Action::PromptChar('x'),
            Action::PromptBackspace,
            Action::PromptCancel,
        ] {
            assert_eq!(a.on_action(act), None, "{act:?}");
        }
    }

    #[test]
    fn one_target_cannot_switch_or_compare() {
        let mut a = app(1);
        assert_eq!(a.on_action(Action::NextTarget), None);
        a.on_action(Action::ToggleCompare);
        assert!(!a.comparing());
        assert!(a.last_message().unwrap().error);
    }

    #[test]
    fn prompt_submits_a_path_or_complains() {
        let mut a = app(1);
        a.on_action(Action::AddTarget);
        assert!(a.prompt_open());
        for c in "/mnt/xfsx".chars() {
            a.on_action(Action::PromptChar(c));
        }
        a.on_action(Action::PromptBackspace);
        assert_eq!(a.prompt(), Some("/mnt/xfs"));
        assert_eq!(
            a.on_action(Action::PromptSubmit),
            Some(Control::AddTarget(PathBuf::from("/mnt/xfs")))
        );
        assert!(!a.prompt_open());
        a.on_action(Action::AddTarget);
        a.on_action(Action::PromptChar(' '));
        assert_eq!(a.on_action(Action::PromptSubmit), None);
        assert!(a.last_message().unwrap().error);
        a.on_action(Action::AddTarget);
        a.on_action(Action::PromptCancel);
        assert!(!a.prompt_open());
    }

    #[test]
    fn window_halves_and_doubles_within_bounds() {
        let mut a = app(1);
        assert_eq!(a.window_s(), 120);
        let mut got = vec![];
        for _ in 0..5 {
            a.on_action(Action::NarrowerWindow);
            got.push(a.window_s());
        }
        assert_eq!(got, [60, 30, 15, WINDOW_MIN_S, WINDOW_MIN_S]);
        for _ in 0..12 {
            a.on_action(Action::WiderWindow);
        }
        assert_eq!(a.window_s(), WINDOW_MAX_S);
        let b = App::new(header(), vec![meta(0)], 1, Style::default());
        assert_eq!(b.window_s(), WINDOW_MIN_S);
    }

    #[test]
    fn freeze_keeps_the_view_end_while_data_arrives() {
        let mut a = filled(1, 200);
        a.on_action(Action::ToggleFreeze);
        assert!(a.frozen());
        for i in 201..=260 {
            a.on_snapshot(&snapshot(
                i,
                1,
                0,
                vec![stall(0, i as f64 - 0.2, 150.0, 1, Cause::Sync)],
            ));
        }
        assert_eq!(a.view_end(), 200.0);
        assert_eq!(a.view_range(), (80.0, 200.0));
        assert_eq!(a.latest_t(), 260.0);
        assert_eq!(a.targets()[0].points.back().unwrap().t_s, 260.0, "stored");
        assert!(a.stalls().all(|s| s.ev.start_ns <= 200_000_000_000));
        a.on_action(Action::ToggleFreeze);
        assert_eq!(a.view_end(), 260.0);
        assert!(a.stalls().next().unwrap().ev.start_ns > 259_000_000_000);
    }

    #[test]
    fn history_and_lists_are_bounded() {
        let mut a = app(1);
        for i in 1..=5000u64 {
            let st = vec![stall(0, i as f64 - 0.5, 120.0, 1, Cause::Unknown)];
            a.on_snapshot(&snapshot(i, 1, 0, st));
        }
        let tv = &a.targets()[0];
        assert!(
            tv.points.len() <= HISTORY_S as usize + 2,
            "{}",
            tv.points.len()
        );
        assert!(tv.points.front().unwrap().t_s >= 5000.0 - HISTORY_S - 1.0);
        assert!(tv.stall_marks.len() <= HISTORY_S as usize + 2);
        assert_eq!(a.stalls().count(), MAX_STALLS);
        assert_eq!(tv.stalls, 5000);
    }

    #[test]
    fn snapshots_move_the_header_and_mark_the_switch() {
        let mut a = app(2);
        a.on_snapshot(&snapshot(1, 2, 0, vec![]));
        assert!(a.switches().is_empty());
        let mut s = snapshot(2, 2, 1, vec![]);
        s.targets[1].mode = Mode::Direct;
        s.targets[1].threads = 8;
        a.on_snapshot(&s);
        let h = a.header();
        assert_eq!((h.active, h.mode, h.threads), (1, Mode::Direct, 8));
        assert_eq!(a.switches().len(), 1);
        assert_eq!(a.switches()[0].t_s, 1.0);
        // The notice for the same change adds no second marker.
        a.on_notice(Notice::Applied {
            t_s: 1.1,
            what: "switch".into(),
        });
        assert_eq!(a.switches().len(), 1);
    }

    #[test]
    fn a_refusal_undoes_what_the_header_assumed() {
        let mut a = app(2);
        a.on_snapshot(&snapshot(1, 2, 0, vec![]));
        a.on_action(Action::MoreThreads);
        a.on_action(Action::TogglePause);
        assert_eq!(a.header().threads, 5);
        a.on_notice(Notice::Refused("too many threads".into()));
        assert_eq!(a.header().threads, 4);
        assert!(a.paused(), "only the refused control is undone");
        assert_eq!(a.last_message().unwrap().text, "refused: too many threads");
        a.on_notice(Notice::Refused("cannot pause".into()));
        assert!(!a.paused());
    }

    #[test]
    fn notices_add_targets_and_errors() {
        let mut a = app(1);
        a.on_notice(Notice::TargetAdded(1, meta(1)));
        assert_eq!(a.targets().len(), 2);
        assert_eq!(a.targets()[1].meta.path, "/mnt/xfs");
        a.on_notice(Notice::WorkerError("writer 3 panicked".into()));
        let m = a.last_message().unwrap();
        assert!(m.error && m.text.contains("writer 3"));
    }

    #[test]
    fn points_use_the_shared_derivations() {
        let s = snapshot(5, 1, 0, vec![]);
        let p = Point::of(&s, &s.targets[0]);
        let l = LatSummary::of(&s.targets[0].hist);
        assert_eq!(p.p99_ms, Some(l.p99 as f64 / 1e3));
        assert_eq!(p.max_ms, Some(l.max as f64 / 1e3));
        assert_eq!(p.ops_per_s, s.targets[0].rates(1.0).ops_per_s);
        assert_eq!(p.pause_ms_per_s, Some(120.0));
        assert_eq!(p.util_pct, Some(80.0));
        assert_eq!(p.thresh_mib, Some(256.0));
        let idle = Point::of(
            &snapshot(5, 2, 0, vec![]),
            &snapshot(5, 2, 0, vec![]).targets[1],
        );
        assert_eq!(idle.p99_ms, None, "no ops: unknown latency, not 0");
    }

    #[test]
    fn replay_refuses_writer_actions() {
        let mut a = app(2);
        a.header.replay = true;
        assert_eq!(a.on_action(Action::TogglePause), None);
        assert_eq!(a.on_action(Action::NextTarget), None);
        a.on_action(Action::ToggleFreeze);
        assert!(a.frozen());
        assert_eq!(a.on_action(Action::Quit), Some(Control::Quit));
    }
}

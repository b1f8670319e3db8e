//! The dashboard's state: plain data changed only by snapshots, live stalls,
//! notices from the runner and key actions. No terminal here, so replay and
//! tests drive it exactly as the live loop does.

use super::keys::Action;
use crate::config::Mode;
use crate::model::control::{Control, Notice};
use crate::model::msg::EventKind;
use crate::model::observed::{BlockTiming, Watched};
use crate::model::snapshot::{Snapshot, TargetMeta};
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

mod advice;
mod history;
pub use advice::AdviceEnv;
pub use history::*;

/// What the last snapshot said the writers were doing.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Placement {
    active: usize,
    mode: Mode,
    threads: u32,
}

#[cfg(test)]
pub(crate) mod fixture;

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
    /// The advice panel (`A`), and what it checks its cards against.
    advice: bool,
    advice_env: AdviceEnv,
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
            advice: false,
            advice_env: AdviceEnv::default(),
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
            let tv = &mut self.targets[ti.target];
            tv.bytes = tv.bytes.map(|b| b + ti.bytes);
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
            let tv = &mut self.targets[i];
            tv.bytes = match (tv.bytes, o.write_bytes) {
                (Some(a), Some(b)) => Some(a + b),
                _ => None,
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
    pub fn advice_open(&self) -> bool {
        self.advice
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
            Action::ToggleAdvice => self.advice = !self.advice,
            Action::Dismiss => {
                self.help = false;
                self.chains = false;
                self.advice = false;
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
        crate::model::snapshot::merge_causes(
            &mut tv.by_cause,
            &crate::model::snapshot::cause_totals([st]),
        );
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

#[cfg(test)]
mod tests;

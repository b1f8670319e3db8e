//! `stallscope replay FILE`: the same dashboard, fed from a recording.
//! Snapshots are handed to the same `App` at the recorded pace times the
//! speed; jumping back rebuilds the App from the start (it is cumulative
//! state), which takes milliseconds even for hours of recording.
//!
//! Keys on top of the dashboard's view keys: space play/pause, `>`/`<`
//! speed ×2/÷2 (1×–64×), `.` or Right step one interval, `n`/`N` next /
//! previous stall, `g` go to a time (type seconds, Enter), `q` quit.

use super::app::{App, Header, Style};
use super::keys::{replay_action_for, Action};
use super::term::{TermGuard, UiOptions};
use crate::base::error::UsageError;
use crate::model::control::Notice;
use crate::sink::recording::Recording;
use crossterm::event::{self, Event as CtEvent, KeyCode, KeyEventKind};
use ratatui::backend::CrosstermBackend;
use ratatui::Terminal;
use std::io::{self, IsTerminal};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Where the replay is and how it moves: pure, so it is tested without a terminal.
#[derive(Clone, Debug, PartialEq)]
pub struct Player {
    /// Snapshots fed so far (the next one to feed is `pos`).
    pub pos: usize,
    pub playing: bool,
    pub speed: u32,
    /// A "go to" time being typed.
    pub goto: Option<String>,
}

/// What a key asks the player to do.
#[derive(Clone, Debug, PartialEq)]
pub enum Seek {
    /// Feed forward to this position.
    To(usize),
    /// Rebuild from the start up to this position.
    Rebuild(usize),
}

impl Player {
    pub fn new(speed: u32) -> Player {
        Player {
            pos: 0,
            playing: true,
            speed: speed.clamp(1, 64),
            goto: None,
        }
    }

    /// The snapshot position of the first stall after (or, backwards,
    /// before) the current position.
    pub fn stall_pos(rec: &Recording, from: usize, forward: bool) -> Option<usize> {
        let has = |i: usize| !rec.snapshots[i].stalls.is_empty();
        if forward {
            (from..rec.snapshots.len()).find(|&i| has(i)).map(|i| i + 1)
        } else {
            (0..from.saturating_sub(1))
                .rev()
                .find(|&i| has(i))
                .map(|i| i + 1)
        }
    }

    /// Position whose interval ends at or after `t_s`.
    pub fn time_pos(rec: &Recording, t_s: f64) -> usize {
        rec.snapshots.partition_point(|s| s.t_s < t_s) + 1
    }

    fn seek(&self, target: usize, len: usize) -> Seek {
        let t = target.min(len);
        if t >= self.pos {
            Seek::To(t)
        } else {
            Seek::Rebuild(t)
        }
    }

    pub fn status(&self, rec: &Recording) -> String {
        let now = self
            .pos
            .checked_sub(1)
            .and_then(|i| rec.snapshots.get(i))
            .map_or(0.0, |s| s.t_s);
        let end = rec.snapshots.last().map_or(0.0, |s| s.t_s);
        let state = if self.pos >= rec.snapshots.len() {
            "end"
        } else if self.playing {
            "playing"
        } else {
            "paused"
        };
        match &self.goto {
            Some(g) => format!("go to (s): {g}_"),
            None => format!("{state} {}× {now:.0}/{end:.0} s", self.speed),
        }
    }
}

/// The dashboard's state for a replay of `rec`, before any snapshot.
fn replay_app(rec: &Recording, opts: &UiOptions) -> App {
    let c = &rec.header.config;
    let header = Header {
        mode: c.mode,
        threads: c.threads,
        record_size: c.record_size(),
        sync: c.sync,
        active: 0,
        recording: false,
        tracing: rec.header.tracing.clone().map_or(Ok(()), Err),
        replay: true,
    };
    let style = Style {
        ascii: opts.ascii,
        color: opts.color,
    };
    let h = &rec.header;
    let mut env = crate::tui::app::AdviceEnv::probe(&Default::default(), &h.targets);
    // The stalls happened there and then; the knobs are checked here.
    env.kernel = h.kernel.clone();
    env.host = h.host.clone();
    env.vm = h.vm;
    env.commit_interval_s = (!rec.printed).then_some(h.config.commit_interval.0.as_secs_f64());
    let mut app = App::new(header, rec.header.targets.clone(), opts.window_s, style);
    app.set_advice_env(env);
    app.observe(&rec.header.observed);
    if let Some(note) = rec.damage_note() {
        app.on_notice(Notice::WorkerError(note));
    }
    app
}

/// Moves the replay to a new position: forward by feeding the snapshots
/// in between, backward by rebuilding the state from the start.
fn seek(app: &mut App, p: &mut Player, rec: &Recording, opts: &UiOptions, s: Seek) {
    match s {
        Seek::To(t) => {
            while p.pos < t {
                app.on_snapshot(&rec.snapshots[p.pos]);
                p.pos += 1;
            }
        }
        Seek::Rebuild(t) => {
            *app = replay_app(rec, opts);
            for s in &rec.snapshots[..t] {
                app.on_snapshot(s);
            }
            p.pos = t;
        }
    }
}

/// Replays `rec` in the terminal until `q` or a signal.
pub fn run_replay(
    rec: Recording,
    opts: &UiOptions,
    speed: u32,
    stop: &AtomicBool,
) -> anyhow::Result<()> {
    if !io::stdout().is_terminal() {
        return Err(UsageError::new(
            "stdout is not a terminal; use `stallscope report FILE` for text output",
        )
        .into());
    }
    let mut app = replay_app(&rec, opts);
    let mut p = Player::new(speed);
    super::term::install_panic_restore();
    let _guard = TermGuard::enter()?;
    // Never dropped: its Drop eprintln!s (and so panics) when the tty is gone.
    let mut term = std::mem::ManuallyDrop::new(Terminal::new(CrosstermBackend::new(io::stdout()))?);
    let interval = Duration::from_secs_f64(rec.header.interval_s.max(0.01));
    let frame_gap = Duration::from_secs_f64(1.0 / opts.fps.max(1) as f64);
    let mut next_due = Instant::now();
    let mut dirty = true;
    let mut last_draw = Instant::now() - frame_gap;
    while !stop.load(Ordering::Relaxed) && !app.should_quit() {
        if p.playing && p.pos < rec.snapshots.len() && Instant::now() >= next_due {
            app.on_snapshot(&rec.snapshots[p.pos]);
            p.pos += 1;
            next_due += interval / p.speed;
            dirty = true;
        }
        if dirty && last_draw.elapsed() >= frame_gap {
            app.set_replay_status(p.status(&rec));
            term.draw(|f| super::view::draw(f, &app))?;
            last_draw = Instant::now();
            dirty = false;
        }
        let wait = next_due
            .saturating_duration_since(Instant::now())
            .min(Duration::from_millis(50));
        if !event::poll(wait)? {
            continue;
        }
        let k = match event::read()? {
            CtEvent::Key(k) if k.kind != KeyEventKind::Release => k,
            CtEvent::Resize(..) => {
                dirty = true;
                continue;
            }
            _ => continue,
        };
        dirty = true;
        if let Some(s) = handle_key(&mut p, &mut app, &rec, k) {
            seek(&mut app, &mut p, &rec, opts, s);
            next_due = Instant::now() + interval / p.speed;
        }
        if p.playing && p.pos >= rec.snapshots.len() {
            p.playing = false;
        }
        if p.playing && next_due < Instant::now() {
            next_due = Instant::now();
        }
    }
    Ok(())
}

/// One key in replay: the player's own keys first, then the view keys.
fn handle_key(p: &mut Player, app: &mut App, rec: &Recording, k: event::KeyEvent) -> Option<Seek> {
    let len = rec.snapshots.len();
    if let Some(g) = p.goto.as_mut() {
        match k.code {
            KeyCode::Char(c) if c.is_ascii_digit() || c == '.' => g.push(c),
            KeyCode::Backspace => {
                g.pop();
            }
            KeyCode::Enter => {
                let t = g.parse::<f64>().ok();
                p.goto = None;
                return t.map(|t| p.seek(Player::time_pos(rec, t), len));
            }
            KeyCode::Esc => p.goto = None,
            _ => {}
        }
        return None;
    }
    let a = replay_action_for(k)?;
    match a {
        Action::Quit => app.quit(),
        Action::PlayPause => p.playing = !p.playing && p.pos < len,
        Action::Faster => p.speed = (p.speed * 2).min(64),
        Action::Slower => p.speed = (p.speed / 2).max(1),
        Action::Step => {
            p.playing = false;
            return Some(p.seek(p.pos + 1, len));
        }
        Action::NextStall => return Player::stall_pos(rec, p.pos, true).map(|t| p.seek(t, len)),
        Action::PrevStall => return Player::stall_pos(rec, p.pos, false).map(|t| p.seek(t, len)),
        Action::GoTo => p.goto = Some(String::new()),
        a => {
            let _ = app.on_action(a);
        }
    }
    None
}

//! The dashboard's event loop: the terminal (raw mode, alternate screen,
//! restored on every exit path including panics), an input thread, and the
//! session thread that runs the writers and samplers. One `UiEvent` enum
//! carries everything into the loop; a dead worker becomes an event.

use super::app::{App, Header, Style};
use super::keys::action_for;
use crate::base::error::UsageError;
use crate::config::Config;
use crate::model::control::{Control, Notice};
use crate::model::marker::{Marker, MarkerKind};
use crate::model::msg::EventKind;
use crate::model::snapshot::{Snapshot, Summary, TargetMeta};
use crate::model::stall::Live;
use crate::session::{prepare, Placement, Session};
use crate::sink::recording::Recorder;
use crate::sink::{Sink, Tee};
use crossbeam::channel::{unbounded, Receiver, RecvTimeoutError, Sender};
use crossterm::event::{self, Event as CtEvent, KeyEventKind};
use crossterm::{cursor, execute, terminal};
use ratatui::backend::CrosstermBackend;
use ratatui::Terminal;
use std::io::{self, IsTerminal, Write};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Dashboard options on top of the workload's.
#[derive(Clone, Debug)]
pub struct UiOptions {
    pub fps: u32,
    pub window_s: u64,
    pub ascii: bool,
    pub color: bool,
}

/// Everything the loop reacts to.
pub enum UiEvent {
    Key(event::KeyEvent),
    Resize,
    Snapshot(Box<Snapshot>),
    Live(Live),
    Notice(Notice),
    /// The session thread ended (None: normally; Some: why it failed).
    SessionEnded(Option<String>),
}

/// Puts the terminal back however we leave: drop, error or panic.
pub struct TermGuard;

impl TermGuard {
    pub fn enter() -> io::Result<TermGuard> {
        terminal::enable_raw_mode()?;
        let g = TermGuard;
        execute!(io::stdout(), terminal::EnterAlternateScreen, cursor::Hide)?;
        Ok(g)
    }
}

fn restore_terminal() {
    let _ = terminal::disable_raw_mode();
    let _ = execute!(io::stdout(), terminal::LeaveAlternateScreen, cursor::Show);
    let _ = io::stdout().flush();
}

impl Drop for TermGuard {
    fn drop(&mut self) {
        restore_terminal();
    }
}

/// Restores the terminal before a panic message is printed, so it is
/// readable and the shell usable.
pub fn install_panic_restore() {
    let prev_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        restore_terminal();
        prev_hook(info);
    }));
}

/// Feeds snapshots from the session thread to the UI.
struct ChannelSink(Sender<UiEvent>);

impl Sink for ChannelSink {
    fn begin(&mut self, _targets: &[TargetMeta]) -> io::Result<()> {
        Ok(())
    }
    fn snapshot(&mut self, s: &Snapshot) -> io::Result<()> {
        for e in s.events.iter().filter(|e| e.kind == EventKind::WriterError) {
            let _ = self
                .0
                .send(UiEvent::Notice(Notice::WorkerError(e.message.clone())));
        }
        self.0
            .send(UiEvent::Snapshot(Box::new(s.clone())))
            .map_err(|_| io::Error::from(io::ErrorKind::BrokenPipe))
    }
    fn summary(&mut self, _s: &Summary) -> io::Result<()> {
        Ok(())
    }
}

/// Runs the dashboard until the person quits or a signal sets `stop`.
pub fn run_dashboard(
    cfg: &Config,
    opts: &UiOptions,
    record: Option<PathBuf>,
    metrics_listen: Option<std::net::SocketAddr>,
    stop: Arc<AtomicBool>,
) -> anyhow::Result<()> {
    if !io::stdout().is_terminal() {
        return Err(UsageError::new(
            "stdout is not a terminal; use `stallscope run` for headless output",
        )
        .into());
    }
    cfg.validate()?;
    if let Some(r) = &record {
        crate::session::check_record_path(r)?;
    }
    let metrics = crate::sink::metrics::start(metrics_listen)?;
    let prepared = prepare(cfg)?;
    let metas: Vec<TargetMeta> = prepared.targets.iter().map(|t| t.meta.clone()).collect();
    let mut session = Session::start(cfg, prepared, Placement::One(0))?;
    // On stderr for after the dashboard, and in its message line now (the
    // kernel's summary last, so it is the one showing).
    let notes = session.take_notes();
    let said = |s: &str| {
        if opts.ascii {
            crate::base::text::to_ascii(s)
        } else {
            s.to_string()
        }
    };
    for n in &notes {
        eprintln!("stallscope: {}", said(n));
    }
    let header = Header {
        mode: cfg.mode,
        threads: cfg.threads,
        record_size: cfg.record_size(),
        sync: cfg.sync,
        active: 0,
        recording: record.is_some(),
        tracing: session.trace_error.clone().map_or(Ok(()), Err),
        replay: false,
    };
    let style = Style {
        ascii: opts.ascii,
        color: opts.color,
    };
    let mut env = crate::tui::app::AdviceEnv::probe(&Default::default(), &metas);
    env.commit_interval_s = Some(cfg.commit_interval.0.as_secs_f64());
    let mut app = App::new(header, metas, opts.window_s, style);
    app.set_advice_env(env);
    app.observe(session.watched());
    for n in notes.into_iter().filter(|n| *n != session.support_line) {
        app.note(n);
    }
    app.note(session.support_line.clone());

    let (ui_tx, ui_rx) = unbounded::<UiEvent>();
    let (ctl_tx, ctl_rx) = unbounded::<Control>();
    let session_thread = spawn_session(
        session,
        ctl_rx,
        ui_tx.clone(),
        stop.clone(),
        record,
        metrics,
    );
    spawn_input(ui_tx, stop.clone());

    install_panic_restore();
    let result = {
        let _guard = TermGuard::enter()?;
        let mut term = Terminal::new(CrosstermBackend::new(io::stdout()))?;
        let r = event_loop(&mut term, &mut app, &ui_rx, &ctl_tx, &stop, opts.fps);
        // ratatui's Drop eprintln!s when the tty is gone (an SSH drop), and
        // that panic would kill us before the scratch files are removed;
        // the guard restores the cursor instead.
        std::mem::forget(term);
        r
    };
    stop.store(true, Ordering::Relaxed);
    let _ = ctl_tx.send(Control::Quit);
    // The terminal may be gone (an SSH drop): eprintln! would panic here
    // and the process would exit before the scratch files are removed.
    let _ = writeln!(
        io::stderr(),
        "stallscope: stopping writers and removing scratch files{}",
        said("\u{2026}")
    );
    let _ = session_thread.join();
    let _ = std::panic::take_hook();
    result
}

fn event_loop<B: ratatui::backend::Backend>(
    term: &mut Terminal<B>,
    app: &mut App,
    rx: &Receiver<UiEvent>,
    ctl: &Sender<Control>,
    stop: &AtomicBool,
    fps: u32,
) -> anyhow::Result<()> {
    let frame_gap = Duration::from_secs_f64(1.0 / fps.max(1) as f64);
    let mut dirty = true;
    let mut last_draw = Instant::now() - frame_gap;
    while !stop.load(Ordering::Relaxed) && !app.should_quit() {
        if dirty && last_draw.elapsed() >= frame_gap {
            term.draw(|f| super::view::draw(f, app))?;
            last_draw = Instant::now();
            dirty = false;
        }
        let wait = if dirty {
            frame_gap.saturating_sub(last_draw.elapsed())
        } else {
            Duration::from_millis(250)
        };
        let ev = match rx.recv_timeout(wait) {
            Ok(ev) => ev,
            Err(RecvTimeoutError::Timeout) => continue,
            Err(RecvTimeoutError::Disconnected) => break,
        };
        dirty |= handle(app, ev, ctl);
        for ev in rx.try_iter().take(1000) {
            dirty |= handle(app, ev, ctl);
        }
    }
    Ok(())
}

/// Applies one event to the app; true if the screen should be redrawn.
fn handle(app: &mut App, ev: UiEvent, ctl: &Sender<Control>) -> bool {
    match ev {
        UiEvent::Key(k) => {
            if k.kind == KeyEventKind::Release {
                return false;
            }
            if let Some(a) = action_for(k, app.prompt_open()) {
                if let Some(c) = app.on_action(a) {
                    let _ = ctl.send(c);
                }
            }
            true
        }
        UiEvent::Resize => true,
        UiEvent::Snapshot(s) => {
            app.on_snapshot(&s);
            true
        }
        UiEvent::Live(l) => {
            let changed = !(l.stalls.is_empty() && app.live_is_empty());
            app.on_live(l);
            changed
        }
        UiEvent::Notice(n) => {
            app.on_notice(n);
            true
        }
        UiEvent::SessionEnded(why) => {
            if let Some(w) = why {
                app.on_notice(Notice::WorkerError(format!("measurement stopped: {w}")));
            }
            true
        }
    }
}

/// The recording the `r` key (or --record) keeps, and where the next goes.
struct Rec {
    on: Option<Recorder>,
    /// --record FILE, used for the first recording; later ones get a timestamped name.
    first_path: Option<PathBuf>,
}

impl Rec {
    fn next_path(&mut self) -> PathBuf {
        if let Some(p) = self.first_path.take() {
            return p;
        }
        let stamp = crate::base::text::local_stamp();
        let mut p = PathBuf::from(format!("stallscope-{stamp}.jsonl"));
        let mut n = 1;
        while p.exists() {
            p = PathBuf::from(format!("stallscope-{stamp}-{n}.jsonl"));
            n += 1;
        }
        p
    }

    /// Starts or stops recording; the one notice that answers the key.
    fn toggle(&mut self, on: bool, s: &Session) -> Notice {
        let t_s = s.now_ns() as f64 / 1e9;
        if on {
            let path = self.next_path();
            match Recorder::create(&path, s.recording_header()) {
                Ok(mut r) => {
                    let _ = r.marker(&Marker::new(
                        t_s,
                        MarkerKind::RecordingStart,
                        path.display().to_string(),
                    ));
                    self.on = Some(r);
                    Notice::Applied {
                        t_s,
                        what: format!("recording to {}", path.display()),
                    }
                }
                Err(e) => Notice::Refused(format!("cannot record: {e}")),
            }
        } else {
            match self.on.take() {
                Some(mut r) => {
                    let _ = r.marker(&Marker::new(t_s, MarkerKind::RecordingStop, ""));
                    Notice::Applied {
                        t_s,
                        what: format!("recording saved in {}", r.path().display()),
                    }
                }
                None => Notice::Refused("not recording".into()),
            }
        }
    }
}

/// The recording line for an applied control.
fn control_marker(c: &Control, n: &Notice) -> Option<Marker> {
    let Notice::Applied { t_s, what } = n else {
        return match n {
            Notice::TargetAdded(_, meta) => Some(Marker {
                meta: Some(meta.clone()),
                ..Marker::new(0.0, MarkerKind::TargetAdded, &meta.path)
            }),
            _ => None,
        };
    };
    let kind = match c {
        Control::Pause(true) => MarkerKind::Pause,
        Control::Pause(false) => MarkerKind::Resume,
        Control::SwitchTarget(_) => MarkerKind::TargetSwitch,
        Control::SetMode(_) => MarkerKind::ModeChange,
        Control::SetThreads(_) => MarkerKind::ThreadChange,
        _ => return None,
    };
    Some(Marker::new(*t_s, kind, what.as_str()))
}

fn spawn_session(
    mut s: Session,
    ctl: Receiver<Control>,
    ui: Sender<UiEvent>,
    stop: Arc<AtomicBool>,
    record: Option<PathBuf>,
    mut metrics: Option<crate::sink::metrics::MetricsSink>,
) -> std::thread::JoinHandle<()> {
    std::thread::Builder::new()
        .name("ss-session".into())
        .spawn(move || {
            let mut chan = ChannelSink(ui.clone());
            let mut sink = Tee(&mut chan, &mut metrics);
            let _ = sink.begin(&s.metas());
            let mut rec = Rec {
                on: None,
                first_path: record.clone(),
            };
            if record.is_some() {
                let n = rec.toggle(true, &s);
                let _ = ui.send(UiEvent::Notice(n));
            }
            let res = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                while !stop.load(Ordering::Relaxed) {
                    for c in ctl.try_iter() {
                        let n = match c {
                            Control::Quit => return,
                            Control::Record(on) => rec.toggle(on, &s),
                            ref c => {
                                let n = s.apply(c.clone());
                                if let Some(m) = control_marker(c, &n) {
                                    let _ = sink.marker(&m);
                                    if let Some(r) = rec.on.as_mut() {
                                        let _ = r.marker(&m);
                                    }
                                }
                                n
                            }
                        };
                        let _ = ui.send(UiEvent::Notice(n));
                    }
                    let res = match rec.on.as_mut() {
                        Some(r) => s.step(None, &mut Tee(&mut sink, r)),
                        None => s.step(None, &mut sink),
                    };
                    if res.is_err() {
                        return;
                    }
                    let _ = ui.send(UiEvent::Live(s.live()));
                }
            }));
            let why = res.err().map(|_| "the session thread panicked".to_string());
            let _ = match rec.on.as_mut() {
                Some(r) => s.finish(None, Some(r)),
                None => s.finish(None, None),
            };
            let _ = ui.send(UiEvent::SessionEnded(why));
        })
        .expect("spawn session thread")
}

fn spawn_input(ui: Sender<UiEvent>, stop: Arc<AtomicBool>) {
    let _ = std::thread::Builder::new()
        .name("ss-input".into())
        .spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                match event::poll(Duration::from_millis(100)) {
                    Ok(true) => {}
                    Ok(false) => continue,
                    Err(_) => break,
                }
                let ev = match event::read() {
                    Ok(CtEvent::Key(k)) => UiEvent::Key(k),
                    Ok(CtEvent::Resize(..)) => UiEvent::Resize,
                    Ok(_) => continue,
                    Err(_) => break,
                };
                if ui.send(ev).is_err() {
                    break;
                }
            }
        });
}

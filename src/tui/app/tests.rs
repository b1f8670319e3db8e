use super::fixture::*;
use super::*;
use crate::model::cause::Cause;
use crate::model::snapshot::{LatSummary, ObservedInterval};
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

use super::*;

#[test]
fn a_bare_port_means_loopback() {
    assert_eq!(
        parse_listen("9187").unwrap(),
        "127.0.0.1:9187".parse().unwrap()
    );
    assert_eq!(parse_listen("0").unwrap(), "127.0.0.1:0".parse().unwrap());
    assert_eq!(
        parse_listen("0.0.0.0:9187").unwrap(),
        "0.0.0.0:9187".parse().unwrap()
    );
    assert_eq!(
        parse_listen("[::1]:9187").unwrap(),
        "[::1]:9187".parse().unwrap()
    );
    assert!(parse_listen("localhost:9187").unwrap().ip().is_loopback());
}

#[test]
fn bad_addresses_say_what_to_give() {
    for (bad, needle) in [
        ("70000", "out of range"),
        (":9187", "0.0.0.0:9187"),
        ("1.2.3.4:http", "bad port"),
        ("1.2.3.4:99999", "bad port"),
        ("", "PORT"),
        ("::1:80", "ADDR:PORT"),
    ] {
        let e = parse_listen(bad).unwrap_err();
        assert!(e.contains(needle), "{bad:?}: {e}");
    }
}

fn hdr(values: &[(u64, u64)]) -> hdrhistogram::Histogram<u64> {
    let mut h = crate::model::ops::new_histogram();
    for &(v, n) in values {
        h.record_n(v, n).unwrap();
    }
    h
}

#[test]
fn hdr_values_land_in_their_buckets_with_counts() {
    // µs: 5 → le 10µs; 10 → le 10µs (le is inclusive); 11 → le 25µs;
    // 3 ms → le 5 ms; 2 s → le 2.5 s; 60 s → le 60 s or +Inf.
    let h = hdr(&[
        (5, 3),
        (10, 1),
        (11, 2),
        (3_000, 7),
        (2_000_000, 1),
        (60_000_000, 1),
    ]);
    let mut b = Buckets::new(&LATENCY_BUCKETS);
    b.add_hdr(&h, 1e-6);
    let at = |le: f64| b.buckets.iter().find(|(x, _)| *x == le).unwrap().1;
    assert_eq!(at(10e-6), 4);
    assert_eq!(at(25e-6), 2);
    assert_eq!(at(5e-3), 7);
    assert_eq!(at(2.5), 1);
    assert_eq!(at(60.0) + at(f64::INFINITY), 1);
    assert_eq!(b.count, 15);
    assert_eq!(b.buckets.iter().map(|x| x.1).sum::<u64>(), b.count);
    let exact = (5.0 * 3.0 + 10.0 + 22.0 + 21_000.0 + 2e6 + 6e7) * 1e-6;
    assert!((b.sum - exact).abs() / exact < 0.01, "{} vs {exact}", b.sum);
    // Adding again accumulates (a counter-like histogram).
    b.add_hdr(&h, 1e-6);
    assert_eq!(b.count, 30);
    assert_eq!(b.buckets[0], (10e-6, 8));
}

#[test]
fn one_call_per_distinct_value_not_per_op() {
    let h = hdr(&[(250, 1_000_000), (251, 1)]);
    assert_eq!(h.iter_recorded().count(), 2);
    let mut b = Buckets::new(&LATENCY_BUCKETS);
    b.add_hdr(&h, 1e-6);
    assert_eq!(b.count, 1_000_001);
    let le = |x: f64| b.buckets.iter().find(|(u, _)| *u == x).unwrap().1;
    assert_eq!(le(250e-6), 1_000_000);
    assert_eq!(le(500e-6), 1);
    assert_eq!(b.buckets.len(), LATENCY_BUCKETS.len() + 1);
    assert!(b.buckets.last().unwrap().0.is_infinite());
}

/// The value of the one sample of `name` whose labels include all of `labels`.
fn value(body: &str, name: &str, labels: &[&str]) -> Option<f64> {
    let hits: Vec<f64> = body
        .lines()
        .filter(|l| l.starts_with(&format!("{name}{{")))
        .filter(|l| labels.iter().all(|x| l.contains(x)))
        .map(|l| l.rsplit_once(' ').unwrap().1.parse().unwrap())
        .collect();
    assert!(hits.len() <= 1, "{name} {labels:?}: {hits:?}");
    hits.first().copied()
}

#[test]
#[allow(clippy::too_many_lines)]
fn observed_processes_are_exported_by_pid_and_comm() {
    use crate::model::cause::Cause;
    use crate::tui::app::fixture::{snapshot, stall};
    let mut m = serve("127.0.0.1:0".parse().unwrap()).unwrap();
    m.begin(&[]).unwrap();
    let mut s = snapshot(1, 0, 0, vec![]);
    s.observed = vec![crate::model::snapshot::ObservedInterval {
        pid: 42,
        comm: "java".into(),
        alive: true,
        d_threads_max: 3,
        minflt: 10,
        majflt: 2,
        write_bytes: Some(4096),
        bdp: Some(crate::model::snapshot::BdpStats {
            events: 2,
            pause_ms: 250,
            max_pause_ms: 200,
        }),
        blocked_by_cause: [(Cause::DirtyThrottle, 520.0), (Cause::Sync, 3.5)].into(),
        ..Default::default()
    }];
    let mut st = stall(0, 0.2, 500.0, 43, Cause::DirtyThrottle);
    st.ev = crate::model::stall::Blocked::process(
        (42, "java", 43, "MutationStage"),
        st.ev.start_ns,
        st.ev.dur(),
    );
    s.stalls = vec![st];
    m.snapshot(&s).unwrap();
    let body = m.render(Exposition::Prometheus);
    let p = ["pid=\"42\"", "comm=\"java\""];
    let v = |name: &str, extra: &[&str]| {
        let l: Vec<&str> = p.iter().chain(extra).copied().collect();
        value(&body, name, &l)
    };
    assert_eq!(
        v("stallscope_observed_uninterruptible_threads", &[]),
        Some(3.0),
        "{body}"
    );
    assert_eq!(
        v("stallscope_observed_written_bytes_total", &[]),
        Some(4096.0)
    );
    assert_eq!(
        v("stallscope_observed_throttle_pause_seconds_total", &[]),
        Some(0.25)
    );
    assert_eq!(
        v("stallscope_observed_faults_total", &["kind=\"major\""]),
        Some(2.0)
    );
    let dt = ["cause=\"dirty_throttle\""];
    assert_eq!(v("stallscope_observed_stalls_total", &dt), Some(1.0));
    assert_eq!(v("stallscope_observed_stall_seconds_total", &dt), Some(0.5));
    assert_eq!(
        v("stallscope_observed_blocked_seconds_total", &dt),
        Some(0.52)
    );
    let sync = ["cause=\"sync\""];
    assert_eq!(
        v("stallscope_observed_blocked_seconds_total", &sync),
        Some(0.0035)
    );
    assert_eq!(
        v("stallscope_observed_stalls_total", &["cause=\"sync\""]),
        Some(0.0)
    );
    // A stall with shares: counted once under its headline, its
    // seconds by share, adding up to its duration.
    let mut st = s.stalls[0].clone();
    st.ev.start_ns += 1;
    st.why.cause = Cause::Sync;
    st.why.shares = vec![
        crate::model::cause::Share {
            cause: Cause::Sync,
            ms: 400.0,
        },
        crate::model::cause::Share {
            cause: Cause::DirtyThrottle,
            ms: 100.0,
        },
    ];
    s.stalls = vec![st];
    m.snapshot(&s).unwrap();
    let body = m.render(Exposition::Prometheus);
    let v = |name: &str, extra: &[&str]| {
        let l: Vec<&str> = p.iter().chain(extra).copied().collect();
        value(&body, name, &l)
    };
    let sync = ["cause=\"sync\""];
    assert_eq!(v("stallscope_observed_stalls_total", &sync), Some(1.0));
    assert_eq!(v("stallscope_observed_stalls_total", &dt), Some(1.0));
    assert_eq!(
        v("stallscope_observed_stall_seconds_total", &sync),
        Some(0.4)
    );
    assert_eq!(v("stallscope_observed_stall_seconds_total", &dt), Some(0.6));
}

#[test]
#[allow(clippy::too_many_lines)]
fn the_sink_turns_snapshots_into_metrics() {
    use crate::model::cause::Cause;
    use crate::tui::app::fixture::{meta, snapshot, stall};
    let mut m = serve("127.0.0.1:0".parse().unwrap()).unwrap();
    assert_ne!(m.addr.port(), 0);
    m.begin(&[meta(0), meta(1)]).unwrap();
    let st = vec![stall(0, 0.5, 2300.0, 7, Cause::DirtyThrottle)];
    m.snapshot(&snapshot(1, 2, 0, st)).unwrap();
    m.snapshot(&snapshot(2, 2, 0, vec![])).unwrap();
    let body = m.render(Exposition::Prometheus);
    let ext4 = [
        "target=\"/mnt/ext4\"",
        "filesystem=\"ext4\"",
        "mode=\"mmap\"",
    ];
    let ops = |b: &str, l: &[&str]| value(b, "stallscope_ops_total", l);
    assert_eq!(ops(&body, &ext4), Some(20_300.0), "{body}");
    // The inactive target is exported too, at 0.
    assert_eq!(ops(&body, &["target=\"/mnt/xfs\""]), Some(0.0));
    let throttle = [ext4[0], "cause=\"dirty_throttle\""];
    assert_eq!(
        value(&body, "stallscope_stalls_total", &throttle),
        Some(1.0)
    );
    assert_eq!(
        value(
            &body,
            "stallscope_stalls_total",
            &[ext4[0], "cause=\"sync\""]
        ),
        Some(0.0),
        "every cause starts at 0"
    );
    let secs = value(&body, "stallscope_stall_seconds_total", &throttle).unwrap();
    assert!((secs - 2.3).abs() < 1e-9, "{secs}");
    let pause = value(&body, "stallscope_throttle_pause_seconds_total", &ext4).unwrap();
    assert!((pause - 0.24).abs() < 1e-9, "{pause}");
    let count = value(&body, "stallscope_op_latency_seconds_count", &ext4);
    assert_eq!(count, Some(2000.0));
    let inf = value(
        &body,
        "stallscope_op_latency_seconds_bucket",
        &[ext4[0], "le=\"+Inf\""],
    );
    assert_eq!(inf, count);
    let le1ms = value(
        &body,
        "stallscope_op_latency_seconds_bucket",
        &[ext4[0], "le=\"0.001\""],
    );
    assert_eq!(le1ms, Some(2.0 * 985.0));
    assert_eq!(
        value(&body, "stallscope_dirty_bytes", &[]),
        Some(42.0 * 1024.0 * 1024.0)
    );
    assert_eq!(
        value(&body, "stallscope_psi_io_full_ratio", &[]),
        Some(0.12)
    );
    assert_eq!(
        value(
            &body,
            "stallscope_device_utilisation_ratio",
            &["target=\"/mnt/xfs\""]
        ),
        Some(0.8)
    );
    assert_eq!(
        value(&body, "stallscope_build_info", &["version=\""]),
        Some(1.0)
    );
    assert!(body.contains("host=\""));

    // A mode change starts new series; the old ones stay. No kernel
    // sample: the kernel gauges go away rather than read 0.
    let mut s = snapshot(3, 2, 0, vec![]);
    s.targets[0].mode = crate::config::Mode::Buffered;
    s.kernel = None;
    m.snapshot(&s).unwrap();
    let body = m.render(Exposition::Prometheus);
    assert_eq!(ops(&body, &ext4), Some(20_300.0));
    assert_eq!(ops(&body, &[ext4[0], "mode=\"buffered\""]), Some(10_300.0));
    assert_eq!(value(&body, "stallscope_dirty_bytes", &[]), None, "{body}");
    assert_eq!(
        value(&body, "stallscope_device_utilisation_ratio", &[]),
        None
    );

    // A target added in the dashboard arrives as a marker.
    let mk = Marker {
        t_s: 4.0,
        kind: MarkerKind::TargetAdded,
        detail: "/mnt/ext42".into(),
        meta: Some(meta(2)),
    };
    m.marker(&mk).unwrap();
    m.snapshot(&snapshot(4, 3, 2, vec![])).unwrap();
    let body = m.render(Exposition::OpenMetrics);
    assert!(body.ends_with("# EOF\n"), "{body}");
    assert!(body.contains("stallscope_ops_total{host="), "{body}");
    assert!(
        ops(&body, &["target=\"/mnt/ext42\""]).unwrap() > 0.0,
        "{body}"
    );
}

#[test]
fn accept_header_picks_the_format() {
    assert_eq!(Exposition::from_accept(None), Exposition::Prometheus);
    assert_eq!(
        Exposition::from_accept(Some("text/plain;version=0.0.4;q=0.5,*/*;q=0.1")),
        Exposition::Prometheus
    );
    assert_eq!(
        Exposition::from_accept(Some(
            "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5"
        )),
        Exposition::OpenMetrics
    );
}

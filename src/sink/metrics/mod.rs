//! `--metrics-listen ADDR:PORT`: a Prometheus endpoint for `run` and the
//! dashboard. `/metrics` answers in the Prometheus text format (0.0.4), or
//! in OpenMetrics text when the scrape's `Accept` asks for
//! `application/openmetrics-text`.
//!
//! One data path: the aggregator's snapshots reach `MetricsSink` like any
//! other `Sink` (through `sink::Tee`), and only the sink updates the
//! metrics. Writers never touch them. The counters and gauges are atomics;
//! the latency histograms have a small mutex each, shared only by the sink
//! thread and the HTTP thread. A scrape encodes into a string under those
//! locks and then writes the string, so a slow client holds no lock.
//!
//! Every series carries `host`; workload series carry `target`,
//! `filesystem` and `mode` (the mode can change at runtime in the
//! dashboard: each mode gets its own series). Names are `stallscope_*` in
//! base units (seconds, bytes, ratios 0..1).

use crate::base::error::UsageError;
use crate::model::marker::{Marker, MarkerKind};
use crate::model::snapshot::{Snapshot, Summary, TargetMeta};
use crate::model::stall::{Stall, Who};
use crate::sink::Sink;
use prometheus_client::encoding::{EncodeLabelSet, EncodeMetric, MetricEncoder, NoLabelSet};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::info::Info;
use prometheus_client::metrics::{MetricType, TypedMetric};
use prometheus_client::registry::{Registry, Unit};
use std::borrow::Cow;
use std::io;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, ToSocketAddrs};
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

/// Upper bounds (seconds) of the latency buckets: 10 µs to 60 s in 1-2.5-5
/// steps (×2 to ×2.5). 100 ms, the default stall threshold, is a bound.
pub const LATENCY_BUCKETS: [f64; 21] = [
    10e-6, 25e-6, 50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3, 10e-3, 25e-3, 50e-3, 0.1,
    0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 25.0, 60.0,
];

const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
const PROMETHEUS_TEXT: &str = prometheus_client::encoding::prometheus_text::CONTENT_TYPE;

/// `--metrics-listen`: a bare port means loopback (127.0.0.1:PORT); an
/// `ADDR:PORT` (IPv6 as `[::1]:PORT`, or a host name) binds what it says.
pub fn parse_listen(s: &str) -> Result<SocketAddr, String> {
    let s = s.trim();
    const HINT: &str = "give PORT (loopback) or ADDR:PORT, e.g. 9187 or 0.0.0.0:9187";
    if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) {
        return s
            .parse::<u16>()
            .map(|p| SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), p))
            .map_err(|_| format!("port {s} is out of range (0-65535)"));
    }
    if let Ok(a) = s.parse::<SocketAddr>() {
        return Ok(a);
    }
    if let Some(port) = s.strip_prefix(':') {
        return Err(format!(
            "no address before :{port}; {HINT} (0.0.0.0:{port} listens on every interface)"
        ));
    }
    match s.rsplit_once(':') {
        Some((host, port)) if !host.is_empty() && !host.contains(':') => {
            let port: u16 = port
                .parse()
                .map_err(|_| format!("bad port {port:?}; {HINT}"))?;
            (host, port)
                .to_socket_addrs()
                .ok()
                .and_then(|mut a| a.next())
                .ok_or_else(|| format!("cannot resolve {host:?}; {HINT}"))
        }
        _ => Err(format!("bad address {s:?}; {HINT}")),
    }
}

/// Per-bucket (not cumulative) counts of a classic histogram, the last
/// bucket being +Inf, with the sum and count of what was observed.
#[derive(Clone, Debug, PartialEq)]
pub struct Buckets {
    pub buckets: Vec<(f64, u64)>,
    pub sum: f64,
    pub count: u64,
}

impl Buckets {
    pub fn new(bounds: &[f64]) -> Buckets {
        Buckets {
            buckets: bounds
                .iter()
                .copied()
                .filter(|b| b.is_finite())
                .chain(std::iter::once(f64::INFINITY))
                .map(|b| (b, 0))
                .collect(),
            sum: 0.0,
            count: 0,
        }
    }

    /// `n` observations of `v` at once.
    pub fn observe_n(&mut self, v: f64, n: u64) {
        if n == 0 {
            return;
        }
        let i = self
            .buckets
            .partition_point(|(b, _)| *b < v)
            .min(self.buckets.len() - 1);
        self.buckets[i].1 += n;
        self.sum += v * n as f64;
        self.count += n;
    }

    /// Adds an HdrHistogram whose values are in units of `unit_s` seconds:
    /// one weighted observation per distinct recorded value (a few thousand
    /// at most), never one per op. Each value stands for its HdrHistogram
    /// bucket's median (the same value `Histogram::mean` uses).
    pub fn add_hdr(&mut self, h: &hdrhistogram::Histogram<u64>, unit_s: f64) {
        for v in h.iter_recorded() {
            let val = h.median_equivalent(v.value_iterated_to()) as f64 * unit_s;
            self.observe_n(val, v.count_at_value());
        }
    }
}

/// A classic Prometheus histogram filled from HdrHistograms (the
/// prometheus-client `Histogram` has no weighted observe).
#[derive(Clone, Debug)]
pub struct LatencyHistogram(Arc<Mutex<Buckets>>);

impl Default for LatencyHistogram {
    fn default() -> Self {
        LatencyHistogram(Arc::new(Mutex::new(Buckets::new(&LATENCY_BUCKETS))))
    }
}

impl LatencyHistogram {
    fn with<R>(&self, f: impl FnOnce(&mut Buckets) -> R) -> R {
        f(&mut self.0.lock().unwrap_or_else(|e| e.into_inner()))
    }
    /// Adds an interval's latencies recorded in microseconds.
    pub fn add_us(&self, h: &hdrhistogram::Histogram<u64>) {
        self.with(|b| b.add_hdr(h, 1e-6));
    }
    pub fn get(&self) -> Buckets {
        self.with(|b| b.clone())
    }
}

impl TypedMetric for LatencyHistogram {
    const TYPE: MetricType = MetricType::Histogram;
}

impl EncodeMetric for LatencyHistogram {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        let b = self.get();
        encoder.encode_histogram::<NoLabelSet>(b.sum, b.count, &b.buckets, None)
    }
    fn metric_type(&self) -> MetricType {
        MetricType::Histogram
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TargetLabels {
    target: String,
    filesystem: String,
    mode: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CauseLabels {
    target: String,
    filesystem: String,
    mode: String,
    cause: String,
}

/// An observed process (observe mode).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ProcLabels {
    pid: String,
    comm: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ProcCauseLabels {
    pid: String,
    comm: String,
    cause: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ProcFaultLabels {
    pid: String,
    comm: String,
    kind: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DevLabels {
    target: String,
    filesystem: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BuildLabels {
    version: String,
    kernel: String,
}

type FloatCounter = Counter<f64, AtomicU64>;
type FloatGauge = Gauge<f64, AtomicU64>;
/// A gauge that is absent while its value is unknown (no series beats a 0).
type MaybeGauge = Family<Vec<(String, String)>, FloatGauge>;

fn set_maybe(g: &MaybeGauge, v: Option<f64>) {
    let none = Vec::new();
    match v {
        Some(v) => {
            g.get_or_create(&none).set(v);
        }
        None => {
            g.remove(&none);
        }
    }
}

/// The metric families; cheap clones of shared atomics.
#[derive(Clone, Default)]
struct Metrics {
    ops: Family<TargetLabels, Counter>,
    bytes: Family<TargetLabels, Counter>,
    stalls: Family<CauseLabels, Counter>,
    stall_seconds: Family<CauseLabels, FloatCounter>,
    throttle_pause: Family<TargetLabels, FloatCounter>,
    latency: Family<TargetLabels, LatencyHistogram>,
    sync_latency: Family<TargetLabels, LatencyHistogram>,
    dirty: MaybeGauge,
    writeback: MaybeGauge,
    dirty_thresh: MaybeGauge,
    dirty_bg_thresh: MaybeGauge,
    psi_some: MaybeGauge,
    psi_full: MaybeGauge,
    util: Family<DevLabels, FloatGauge>,
    obs_stalls: Family<ProcCauseLabels, Counter>,
    obs_stall_seconds: Family<ProcCauseLabels, FloatCounter>,
    obs_blocked_seconds: Family<ProcCauseLabels, FloatCounter>,
    obs_d_threads: Family<ProcLabels, Gauge>,
    obs_written: Family<ProcLabels, Counter>,
    obs_throttle_pause: Family<ProcLabels, FloatCounter>,
    obs_faults: Family<ProcFaultLabels, Counter>,
}

fn read_proc(p: &str) -> String {
    std::fs::read_to_string(p)
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "?".into())
}

impl Metrics {
    fn registry(&self, host: String) -> Registry {
        let labels = std::iter::once((Cow::Borrowed("host"), Cow::Owned(host)));
        let mut r = Registry::with_prefix_and_labels("stallscope", labels);
        self.clone().register_workload(&mut r);
        self.clone().register_system(&mut r);
        self.clone().register_observed(&mut r);
        r.register(
            "build",
            "stallscope version and the running kernel",
            Info::new(BuildLabels {
                version: env!("CARGO_PKG_VERSION").into(),
                kernel: read_proc("/proc/sys/kernel/osrelease"),
            }),
        );
        r
    }

    /// Our writers' series: ops, bytes, stalls, throttling, latencies.
    fn register_workload(self, r: &mut Registry) {
        let m = self;
        r.register(
            "ops",
            "Write ops completed (each writer op: one record or block)",
            m.ops,
        );
        r.register_with_unit(
            "written",
            "Bytes written by the writers' ops",
            Unit::Bytes,
            m.bytes,
        );
        r.register(
            "stalls",
            "Ops that took at least the stall threshold, by attributed cause",
            m.stalls,
        );
        r.register_with_unit(
            "stall",
            "Time spent in stalled ops, by attributed cause",
            Unit::Seconds,
            m.stall_seconds,
        );
        r.register_with_unit(
            "throttle_pause",
            "Time the writer threads slept in balance_dirty_pages (needs kernel tracing)",
            Unit::Seconds,
            m.throttle_pause,
        );
        r.register_with_unit(
            "op_latency",
            "Latency of write ops",
            Unit::Seconds,
            m.latency,
        );
        r.register_with_unit(
            "sync_latency",
            "Latency of sync ops (msync, fdatasync, syncfs)",
            Unit::Seconds,
            m.sync_latency,
        );
    }

    /// The kernel's system-wide state and the targets' devices.
    fn register_system(self, r: &mut Registry) {
        let m = self;
        r.register_with_unit(
            "dirty",
            "Dirty page cache, system-wide (/proc/meminfo Dirty)",
            Unit::Bytes,
            m.dirty,
        );
        r.register_with_unit(
            "writeback",
            "Page cache under writeback, system-wide (/proc/meminfo Writeback)",
            Unit::Bytes,
            m.writeback,
        );
        r.register_with_unit(
            "dirty_threshold",
            "Dirty level where writers are throttled hard (vmstat nr_dirty_threshold)",
            Unit::Bytes,
            m.dirty_thresh,
        );
        r.register_with_unit(
            "dirty_background_threshold",
            "Dirty level where background writeback starts (vmstat nr_dirty_background_threshold)",
            Unit::Bytes,
            m.dirty_bg_thresh,
        );
        let ratio = || Unit::Other("ratio".into());
        r.register_with_unit(
            "psi_io_some",
            "Share of the last interval in which some task stalled on I/O (PSI), 0..1",
            ratio(),
            m.psi_some,
        );
        r.register_with_unit(
            "psi_io_full",
            "Share of the last interval in which all non-idle tasks stalled on I/O (PSI), 0..1",
            ratio(),
            m.psi_full,
        );
        r.register_with_unit(
            "device_utilisation",
            "Share of the last interval the target's block device had I/O in flight, 0..1",
            ratio(),
            m.util,
        );
    }

    /// Observe mode: each observed process's series.
    fn register_observed(self, r: &mut Registry) {
        let m = self;
        r.register(
            "observed_stalls",
            "Observe mode: D-state runs of the process's threads of at least the stall threshold, by cause",
            m.obs_stalls,
        );
        r.register_with_unit(
            "observed_stall",
            "Observe mode: time the process's threads spent in those stalls, by cause",
            Unit::Seconds,
            m.obs_stall_seconds,
        );
        r.register_with_unit(
            "observed_blocked",
            "Observe mode: time the process's threads were blocked, by cause, waits under the stall threshold included (needs scheduler timing)",
            Unit::Seconds,
            m.obs_blocked_seconds,
        );
        r.register(
            "observed_uninterruptible_threads",
            "Observe mode: most of the process's threads in uninterruptible sleep (D) in one sample of the last interval",
            m.obs_d_threads,
        );
        r.register_with_unit(
            "observed_written",
            "Observe mode: bytes the process wrote or dirtied for storage (/proc/PID/io write_bytes)",
            Unit::Bytes,
            m.obs_written,
        );
        r.register_with_unit(
            "observed_throttle_pause",
            "Observe mode: time the process's threads slept in balance_dirty_pages (needs kernel tracing)",
            Unit::Seconds,
            m.obs_throttle_pause,
        );
        r.register(
            "observed_faults",
            "Observe mode: page faults of the process's threads, by kind (minor, major)",
            m.obs_faults,
        );
    }
}

/// Which text format a scrape gets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Exposition {
    Prometheus,
    OpenMetrics,
}

impl Exposition {
    /// From the scrape's `Accept` header.
    pub fn from_accept(accept: Option<&str>) -> Exposition {
        match accept {
            Some(a) if a.contains("application/openmetrics-text") => Exposition::OpenMetrics,
            _ => Exposition::Prometheus,
        }
    }
    pub fn content_type(self) -> &'static str {
        match self {
            Exposition::Prometheus => PROMETHEUS_TEXT,
            Exposition::OpenMetrics => OPENMETRICS,
        }
    }
}

/// The exposition body for one scrape.
fn encode(registry: &Registry, format: Exposition) -> String {
    let mut out = String::with_capacity(16 * 1024);
    let r = match format {
        Exposition::Prometheus => {
            prometheus_client::encoding::prometheus_text::encode(&mut out, registry)
        }
        Exposition::OpenMetrics => prometheus_client::encoding::text::encode(&mut out, registry),
    };
    if let Err(e) = r {
        out = format!("# encoding failed: {e}\n");
    }
    out
}

/// The `Sink` that keeps the metrics, and owner of the HTTP thread (stopped
/// on drop).
pub struct MetricsSink {
    metrics: Metrics,
    registry: Arc<Registry>,
    metas: Vec<TargetMeta>,
    /// Where it listens (the real port when 0 was asked for).
    pub addr: SocketAddr,
    server: Arc<tiny_http::Server>,
    thread: Option<JoinHandle<()>>,
}

/// Binds `addr` and starts the HTTP thread. A bad address or a port in use
/// is a usage error (exit 2), found before any writer starts.
pub fn serve(addr: SocketAddr) -> Result<MetricsSink, UsageError> {
    let server = tiny_http::Server::http(addr)
        .map_err(|e| UsageError::new(format!("--metrics-listen {addr}: cannot listen: {e}")))?;
    let addr = server.server_addr().to_ip().unwrap_or(addr);
    let server = Arc::new(server);
    let metrics = Metrics::default();
    let registry = Arc::new(metrics.registry(read_proc("/proc/sys/kernel/hostname")));
    let thread = {
        let (server, registry) = (server.clone(), registry.clone());
        std::thread::Builder::new()
            .name("ss-metrics".into())
            .spawn(move || http_loop(&server, &registry))
            .map_err(|e| UsageError::new(format!("--metrics-listen: cannot start thread: {e}")))?
    };
    Ok(MetricsSink {
        metrics,
        registry,
        metas: Vec::new(),
        addr,
        server,
        thread: Some(thread),
    })
}

/// `serve` when asked, and the one stderr line that says where.
pub fn start(addr: Option<SocketAddr>) -> Result<Option<MetricsSink>, UsageError> {
    let Some(addr) = addr else {
        return Ok(None);
    };
    let m = serve(addr)?;
    eprintln!("stallscope: metrics on http://{}/metrics", m.addr);
    Ok(Some(m))
}

fn http_loop(server: &tiny_http::Server, registry: &Registry) {
    use tiny_http::{Header, Method, Response};
    let header = |v: &str| Header::from_bytes(&b"Content-Type"[..], v.as_bytes()).ok();
    for req in server.incoming_requests() {
        let path = req.url().split('?').next().unwrap_or("");
        let get = matches!(req.method(), Method::Get | Method::Head);
        let resp = if get && path == "/metrics" {
            let accept = req
                .headers()
                .iter()
                .find(|h| h.field.equiv("Accept"))
                .map(|h| h.value.as_str());
            let f = Exposition::from_accept(accept);
            let mut r = Response::from_string(encode(registry, f));
            if let Some(h) = header(f.content_type()) {
                r.add_header(h);
            }
            r
        } else if get && path == "/" {
            Response::from_string("stallscope: metrics are at /metrics\n")
        } else {
            Response::from_string("not found; metrics are at /metrics\n").with_status_code(404)
        };
        let _ = req.respond(resp);
    }
}

impl Drop for MetricsSink {
    fn drop(&mut self) {
        self.server.unblock();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl MetricsSink {
    /// The body a scrape would get now (tests, and a look without HTTP).
    pub fn render(&self, format: Exposition) -> String {
        encode(&self.registry, format)
    }

    /// Observe mode: each watched process's figures and stalls.
    fn observed(&self, s: &Snapshot) {
        let m = &self.metrics;
        let pl = |pid: u32, comm: &str| ProcLabels {
            pid: pid.to_string(),
            comm: comm.to_string(),
        };
        let with = |l: &ProcLabels, cause: &str| ProcCauseLabels {
            pid: l.pid.clone(),
            comm: l.comm.clone(),
            cause: cause.to_string(),
        };
        for o in &s.observed {
            let l = pl(o.pid, &o.comm);
            if m.obs_d_threads.get(&l).is_none() {
                for c in crate::model::cause::Cause::ALL {
                    m.obs_stalls.get_or_create(&with(&l, c.as_str())).inc_by(0);
                    m.obs_stall_seconds
                        .get_or_create(&with(&l, c.as_str()))
                        .inc_by(0.0);
                    m.obs_blocked_seconds
                        .get_or_create(&with(&l, c.as_str()))
                        .inc_by(0.0);
                }
            }
            for (c, ms) in &o.blocked_by_cause {
                m.obs_blocked_seconds
                    .get_or_create(&with(&l, c.as_str()))
                    .inc_by(ms / 1e3);
            }
            if !o.alive {
                m.obs_d_threads.remove(&l);
                continue;
            }
            m.obs_d_threads
                .get_or_create(&l)
                .set(i64::from(o.d_threads_max));
            if let Some(b) = o.write_bytes {
                m.obs_written.get_or_create(&l).inc_by(b);
            }
            if let Some(b) = o.bdp {
                m.obs_throttle_pause
                    .get_or_create(&l)
                    .inc_by(b.pause_ms as f64 / 1e3);
            }
            for (kind, n) in [("minor", o.minflt), ("major", o.majflt)] {
                m.obs_faults
                    .get_or_create(&ProcFaultLabels {
                        pid: l.pid.clone(),
                        comm: l.comm.clone(),
                        kind: kind.into(),
                    })
                    .inc_by(n);
            }
        }
    }

    /// Counts a finished stall into its target's or its process's series:
    /// once under its headline cause, its seconds by shares (so that the
    /// seconds by cause add up to the time stalled).
    fn stall(&self, s: &Snapshot, st: &Stall) {
        let m = &self.metrics;
        let shares = st.why.shares_of(st.ev.dur() as f64 / 1e6);
        match &st.ev.who {
            Who::Writer { target, .. } => {
                let mode = s
                    .targets
                    .iter()
                    .find(|t| t.target == *target)
                    .map_or("?", |t| t.mode.as_str());
                let labels = self.labels(*target, mode);
                let cl = |c: crate::model::cause::Cause| with_cause(&labels, c.as_str());
                m.stalls.get_or_create(&cl(st.why.cause)).inc();
                for sh in &shares {
                    m.stall_seconds
                        .get_or_create(&cl(sh.cause))
                        .inc_by(sh.ms / 1e3);
                }
            }
            Who::Process { pid, comm, .. } => {
                let cl = |c: crate::model::cause::Cause| ProcCauseLabels {
                    pid: pid.to_string(),
                    comm: comm.clone(),
                    cause: c.as_str().to_string(),
                };
                m.obs_stalls.get_or_create(&cl(st.why.cause)).inc();
                for sh in &shares {
                    m.obs_stall_seconds
                        .get_or_create(&cl(sh.cause))
                        .inc_by(sh.ms / 1e3);
                }
            }
        }
    }

    fn labels(&self, target: usize, mode: &str) -> TargetLabels {
        let (path, fs) = self
            .metas
            .get(target)
            .map_or(("?", "?"), |m| (m.path.as_str(), m.fs.as_str()));
        TargetLabels {
            target: path.into(),
            filesystem: fs.into(),
            mode: mode.into(),
        }
    }
}

fn with_cause(l: &TargetLabels, cause: &str) -> CauseLabels {
    CauseLabels {
        target: l.target.clone(),
        filesystem: l.filesystem.clone(),
        mode: l.mode.clone(),
        cause: cause.into(),
    }
}

impl Sink for MetricsSink {
    fn begin(&mut self, targets: &[TargetMeta]) -> io::Result<()> {
        self.metas = targets.to_vec();
        Ok(())
    }

    fn snapshot(&mut self, s: &Snapshot) -> io::Result<()> {
        let m = &self.metrics;
        let k = s.kernel.as_ref();
        for t in &s.targets {
            let l = self.labels(t.target, t.mode.as_str());
            if m.ops.get(&l).is_none() {
                // Every cause from 0, so the first stall shows in rate().
                for c in crate::model::cause::Cause::ALL {
                    let cl = with_cause(&l, c.as_str());
                    m.stalls.get_or_create(&cl).inc_by(0);
                    m.stall_seconds.get_or_create(&cl).inc_by(0.0);
                }
            }
            m.ops.get_or_create(&l).inc_by(t.ops);
            m.bytes.get_or_create(&l).inc_by(t.bytes);
            m.latency.get_or_create(&l).add_us(&t.hist);
            m.sync_latency.get_or_create(&l).add_us(&t.sync_hist);
            if let Some(b) = t.bdp {
                m.throttle_pause
                    .get_or_create(&l)
                    .inc_by(b.pause_ms as f64 / 1e3);
            }
            let dl = DevLabels {
                target: l.target,
                filesystem: l.filesystem,
            };
            match k
                .and_then(|k| k.devs.get(t.target))
                .and_then(|d| d.as_ref())
            {
                Some(d) => {
                    m.util.get_or_create(&dl).set(d.util_pct / 100.0);
                }
                None => {
                    m.util.remove(&dl);
                }
            }
        }
        for st in &s.stalls {
            self.stall(s, st);
        }
        self.observed(s);
        let bytes = |kib: Option<u64>| kib.map(|v| v as f64 * 1024.0);
        set_maybe(&m.dirty, bytes(k.and_then(|k| k.dirty_kib)));
        set_maybe(&m.writeback, bytes(k.and_then(|k| k.writeback_kib)));
        set_maybe(&m.dirty_thresh, bytes(k.and_then(|k| k.dirty_thresh_kib)));
        set_maybe(
            &m.dirty_bg_thresh,
            bytes(k.and_then(|k| k.dirty_bg_thresh_kib)),
        );
        let ratio = |pct: Option<f64>| pct.map(|p| (p / 100.0).clamp(0.0, 1.0));
        set_maybe(&m.psi_some, ratio(k.and_then(|k| k.psi_io_some_pct)));
        set_maybe(&m.psi_full, ratio(k.and_then(|k| k.psi_io_full_pct)));
        Ok(())
    }

    fn summary(&mut self, _s: &Summary) -> io::Result<()> {
        Ok(())
    }

    /// The dashboard adds targets at runtime; their meta comes as a marker.
    fn marker(&mut self, mk: &Marker) -> io::Result<()> {
        if let (Some(meta), MarkerKind::TargetAdded) = (&mk.meta, mk.kind) {
            if !self.metas.contains(meta) {
                self.metas.push(meta.clone());
            }
        }
        Ok(())
    }
}

/// No metrics asked for: a sink that does nothing, so callers can always
/// `Tee` with it.
impl Sink for Option<MetricsSink> {
    fn begin(&mut self, targets: &[TargetMeta]) -> io::Result<()> {
        self.as_mut().map_or(Ok(()), |m| m.begin(targets))
    }
    fn snapshot(&mut self, s: &Snapshot) -> io::Result<()> {
        self.as_mut().map_or(Ok(()), |m| m.snapshot(s))
    }
    fn summary(&mut self, s: &Summary) -> io::Result<()> {
        self.as_mut().map_or(Ok(()), |m| m.summary(s))
    }
    fn marker(&mut self, mk: &Marker) -> io::Result<()> {
        self.as_mut().map_or(Ok(()), |m| m.marker(mk))
    }
}

#[cfg(test)]
mod tests;

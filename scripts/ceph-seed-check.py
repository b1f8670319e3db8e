#!/usr/bin/env python3
"""Checks issue #23's properties on a scripts/ceph-seed.sh result folder.

usage: ceph-seed-check.py OUT [THREADS...]   (default threads: 1 4)

Reads, per thread count T: tT.jsonl (stallscope run --format jsonl),
tT.rec.jsonl (its recording: the header's start time), tT.bench.txt
(rados bench's lines, each after the wall time it came at), and
tT.perf-before.json / tT.perf-after.json (the OSD's `perf dump` before
stallscope started and after it stopped). Prints one row per property:
pass/FAIL and the figures; exits 1 when one fails.

Ceph's threads, by name (FileStore, journal writeahead mode):
  tp_osd_tp        the OSD's op shards: a client op waits here for the
                   FileStore queue throttle (filestore_queue_max_bytes/ops)
  msgr-worker-N    the messenger (receives ops, sends replies)
  journal_write    FileJournal's writer, journal_wrt_fin its aio completer,
  fn_jrn_objstore  the finisher of journal commits (acks to the client)
  tp_fstore_op     FileStore's apply threads (write to the data filesystem)
  wb_throttle      WBThrottle's flusher (fdatasync of applied objects)
  filestore_sync   the commit cycle: omap sync, syncfs, commit_op_seq
"""
import json
import re
import sys
from collections import defaultdict

OP_THREADS = ("tp_osd_tp",)
JOURNAL_THREADS = ("journal_write", "journal_wrt_fin", "fn_jrn_objstore")
# the client op's own path in journal writeahead mode: received, queued in a
# PG, journaled, acked; the apply (tp_fstore_op) and the flushers are behind it
OP_PATH_THREADS = OP_THREADS + JOURNAL_THREADS + ("msgr-worker", "ms_dispatch")
# waits that are the data disk's writeback (the journal is O_DIRECT + aio on
# its own device: it never waits on page writeback or dirty throttling, and
# never syncs), and the sync calls, all on the data filesystem here (a sync
# whose stack names no wait we know, e.g. __folio_lock in writeback_iter,
# is still the data disk's)
DATA_WB_WAITS = ("data writeback", "dirty throttle", "stable page", "device cache flush")
SYNC_CALLS = ("fsync", "fdatasync", "syncfs", "sync_file_range", "sync")
TOL_S = 0.1  # the bench lines' own timing: a second is looked at 0.1 s in from each end
COVER = 0.99  # and is covered when the op-thread stalls cover 99 % of that


def load(out, t):
    p = f"{out}/t{t}"
    lines = [json.loads(l) for l in open(f"{p}.jsonl") if l.startswith("{")]
    with open(f"{p}.rec.jsonl") as f:
        header = json.loads(f.readline())
    # stallscope's t_s on the wall clock: from when the script started it
    # (its clock starts a few ms later); the recording header's
    # start_unix_s, written after tracing is set up (~0.1 s late), is the
    # fallback
    start = header["start_unix_s"]
    try:
        start = float(open(f"{p}.ss-launch").read())
    except (OSError, ValueError):
        pass
    bench = []
    for l in open(f"{p}.bench.txt"):
        parts = l.split()
        # "<wall> sec cur_ops started finished avg cur last_lat avg_lat"
        if len(parts) >= 9 and re.fullmatch(r"\d+", parts[1]):
            bench.append((float(parts[0]), int(parts[1]), float(parts[6])))
    perf = [json.load(open(f"{p}.perf-{w}.json")) for w in ("before", "after")]
    return {
        "stalls": [l for l in lines if l.get("type") == "stall"],
        "summary": next((l for l in lines if l.get("type") == "summary"), None),
        "start": start,
        "header_lag": header["start_unix_s"] - start,
        "bench": bench,
        "perf": perf,
    }


def delta(perf, section, key, sub=None):
    a, b = (p.get(section, {}).get(key) for p in perf)
    if a is None or b is None:
        return None
    if sub:
        return b[sub] - a[sub]
    return b - a


def end(s):
    return s["t_s"] + s["duration_ms"] / 1000.0


def name_is(s, names):
    return any(s["thread_comm"].startswith(n) for n in names)


def root(s):
    """The wait a stall comes down to: its chain's last hop, else its own."""
    via = s.get("via") or []
    if via:
        h = via[-1]
        return h["comm"], h.get("state"), h.get("syscall"), h.get("wait")
    ev = s.get("evidence", {})
    return s["thread_comm"], "D", s.get("syscall") or ev.get("syscall"), ev.get("wait")


def reaches_data_wb(s, data_bdi):
    comm, state, call, wait = root(s)
    if state != "D" or not (wait in DATA_WB_WAITS or call in SYNC_CALLS):
        return False
    bdi = s.get("evidence", {}).get("bdi")
    return bdi is None or bdi == data_bdi


def union(iv):
    tot, cur_s, cur_e = 0.0, None, None
    for a, b in sorted(iv):
        if cur_e is None or a > cur_e:
            if cur_e is not None:
                tot += cur_e - cur_s
            cur_s, cur_e = a, b
        else:
            cur_e = max(cur_e, b)
    if cur_e is not None:
        tot += cur_e - cur_s
    return tot


def covered(iv, a, b):
    return union([(max(x, a), min(y, b)) for x, y in iv if y > a and x < b])


rows = []


def row(prop, ok, figures):
    rows.append((prop, "n/a" if ok is None else ("pass" if ok else "FAIL"), figures))


def zero_seconds(r):
    """(t_start, t_end) in stallscope's time of each second rados bench
    reported 0 MB/s (the second before its line came)."""
    return [(w - 1.0 - r["start"], w - r["start"], sec) for w, sec, cur in r["bench"] if sec > 0 and cur == 0]


def check_zero_covered(r, t, data_bdi):
    zs = zero_seconds(r)
    ops = [s for s in r["stalls"] if name_is(s, OP_THREADS)]
    good = [(s["t_s"], end(s)) for s in ops if reaches_data_wb(s, data_bdi)]
    worst, bad = 1.0, []
    for a, b, sec in zs:
        c = covered(good, a + TOL_S, b - TOL_S) / (b - a - 2 * TOL_S)
        worst = min(worst, c)
        if c < COVER:
            bad.append(f"s{sec}:{c:.1%}")
    roots = defaultdict(int)
    for s in ops:
        c, st, call, w = root(s)
        roots[f"{c}/{st}/{w}"] += 1
    top = ", ".join(f"{k} {v}" for k, v in sorted(roots.items(), key=lambda x: -x[1])[:3])
    fig = (f"{len(zs)} zero seconds of {len(r['bench']) - 1}; op-thread (tp_osd_tp) stalls {len(ops)}, "
           f"{len(good)} reaching the data disk's writeback; least covered {worst:.1%}"
           + (f"; not covered: {' '.join(bad)}" if bad else "") + f"; roots: {top}")
    row(f"-t {t}: every 0 MB/s second covered by an op-thread stall chained to data writeback",
        bool(zs) and not bad, fig)


def check_syncfs(r, t):
    st = r["stalls"]
    named = [s for s in st if s.get("syscall") == "syncfs"]
    in_syncfs = [s for s in st if s.get("op") == "blocked" and "sys_syncfs" in (s.get("evidence", {}).get("kernel_stack") or "")]
    unnamed = [s for s in in_syncfs if s.get("syscall") != "syncfs"]
    split = 0
    by = defaultdict(list)
    for s in named:
        by[s["tid"]].append(s)
    for ss in by.values():
        ss.sort(key=lambda s: s["t_s"])
        split += sum(1 for x, y in zip(ss, ss[1:]) if y["t_s"] - end(x) < 0.005)
    cycles = delta(r["perf"], "filestore", "commitcycle")
    lat = delta(r["perf"], "filestore", "commitcycle_latency", "sum")
    fs_calls = [s for s in st if s["thread_comm"] == "filestore_sync" and s.get("bounds") == "syscall"]
    fs_ms = sum(s["duration_ms"] for s in fs_calls)
    ok = not unnamed and split == 0 and cycles is not None and len(named) <= cycles and all(
        s.get("bounds") == "syscall" for s in named)
    fig = (f"syncfs stalls {len(named)} (bounds syscall: {sum(s.get('bounds') == 'syscall' for s in named)}), "
           f"Ceph commit cycles {cycles} (one syncfs each); in syncfs by stack but not named: {len(unnamed)}; "
           f"back to back (<5 ms): {split}; filestore_sync call stalls {len(fs_calls)} = {fs_ms / 1000:.1f} s "
           f"vs commitcycle_latency {lat:.1f} s")
    row(f"-t {t}: syncfs stalls named syncfs, one per call", ok, fig)


def check_journal(r, t):
    full = delta(r["perf"], "filestore", "journal_full")
    jthr = delta(r["perf"], "throttle-filestore_journal", "wait", "avgcount")
    bthr = delta(r["perf"], "throttle-filestore_bytes", "wait", "avgcount")
    bsum = delta(r["perf"], "throttle-filestore_bytes", "wait", "sum")
    js = [s for s in r["stalls"] if name_is(s, JOURNAL_THREADS)]
    kinds = defaultdict(lambda: [0, 0.0])
    for s in js:
        k = f"{s['thread_comm']} {s['bounds']}"
        kinds[k][0] += 1
        kinds[k][1] += s["duration_ms"] / 1000
    ex = ", ".join(f"{k} {n} ({ms:.1f} s)" for k, (n, ms) in sorted(kinds.items()))
    truth_quiet = full == 0 and jthr == 0
    fig = (f"Ceph: journal_full +{full}, journal throttle waits +{jthr}, filestore_bytes throttle waits "
           f"+{bthr} ({bsum:.1f} s); stallscope: journal-thread stalls {len(js)}" + (f": {ex}" if ex else ""))
    row(f"-t {t}: journal threads have no stalls (journal never full/throttled)",
        (len(js) == 0) if truth_quiet else None, fig)


def check_overlap(r, t):
    by = defaultdict(list)
    for s in r["stalls"]:
        by[s["tid"]].append(s)
    pairs, kinds, threads = 0, defaultdict(int), set()
    for ss in by.values():
        ss.sort(key=lambda s: s["t_s"])
        for i, a in enumerate(ss):
            for b in ss[i + 1:]:
                if b["t_s"] >= end(a) - 0.001:
                    break
                pairs += 1
                threads.add(a["thread_comm"])
                kinds[f"{a['bounds']}/{b['bounds']}"] += 1
    fig = f"{pairs} overlapping pairs" + (
        f" ({', '.join(f'{k} {v}' for k, v in sorted(kinds.items()))}; threads: {', '.join(sorted(threads))})"
        if pairs else "")
    row(f"-t {t}: no thread has overlapping stalls", pairs == 0, fig)


def check_stalled(r, t):
    s = r["summary"]
    if not s or not s.get("observed"):
        row(f"-t {t}: stalled time <= wall time", False, "no summary")
        return
    o = s["observed"][0]
    wall = s["duration_s"]
    mine = union([(x["t_s"], end(x)) for x in r["stalls"] if x.get("pid") == o["pid"]])
    fig = (f"stalled_ms {o['stalled_ms'] / 1000:.1f} s (union of the stall lines: {mine:.1f} s), "
           f"wall {wall:.1f} s; thread time stall_ms {o['stall_ms'] / 1000:.1f} s")
    row(f"-t {t}: process stalled time <= wall time", o["stalled_ms"] / 1000 <= wall + 1e-6, fig)


def check_no_op_path(r, t):
    ops = [s for s in r["stalls"] if name_is(s, OP_PATH_THREADS)]
    zs = zero_seconds(r)
    others = defaultdict(int)
    for s in r["stalls"]:
        if not name_is(s, OP_PATH_THREADS):
            others[s["thread_comm"]] += 1
    fig = (f"op-path stalls {len(ops)} ({', '.join(sorted({s['thread_comm'] for s in ops})) or 'none'}); "
           f"{len(zs)} zero seconds; other threads' stalls: "
           + ", ".join(f"{k} {v}" for k, v in sorted(others.items(), key=lambda x: -x[1])))
    row(f"-t {t}: no op-path stalls", not ops, fig)


def extra_figures(r, t):
    bsum = delta(r["perf"], "throttle-filestore_bytes", "wait", "sum") or 0.0
    ops = [s for s in r["stalls"] if name_is(s, OP_THREADS)]
    idle = defaultdict(lambda: [0, 0.0])
    for s in r["stalls"]:
        if s["bounds"] == "sleep" and not name_is(s, OP_THREADS + JOURNAL_THREADS + ("tp_fstore_op",)):
            idle[s["thread_comm"]][0] += 1
            idle[s["thread_comm"]][1] += s["duration_ms"] / 1000
    mbs = [cur for _, sec, cur in r["bench"] if sec > 0]
    rows.append((f"-t {t}: figures", "", (
        f"rados bench {sum(mbs) / max(len(mbs), 1):.1f} MB/s mean, {sum(1 for m in mbs if m == 0)} s at 0; "
        f"tp_osd_tp stall time {sum(s['duration_ms'] for s in ops) / 1000:.1f} s vs Ceph's filestore_bytes "
        f"throttle wait {bsum:.1f} s; "
        + (f"stallscope's clock placed from its launch (its recording header's start is {r['header_lag']:+.3f} s later); "
           if r["header_lag"] else "stallscope's clock placed by the recording header; ")
        + "other threads' chained sleeps: "
        + (", ".join(f"{k} {n} ({ms:.1f} s)" for k, (n, ms) in sorted(idle.items())) or "none"))))


def env_row(out, t):
    """vm.dirty_* and the load before and after: other labs on the machine
    may change them, and the dirty limits decide whether the apply threads
    are throttled (dirty throttle) or WBThrottle's fdatasync is the gate."""
    def read(w):
        try:
            lines = open(f"{out}/t{t}.env-{w}").read().splitlines()
        except OSError:
            return {}
        kv = dict(l.split("=", 1) for l in lines if l.startswith("vm."))
        kv["load"] = next((l.split()[1] for l in lines if l.startswith("loadavg:")), "?")
        return kv
    a, b = read("before"), read("after")
    if not a:
        return
    def dirty(kv):
        if kv.get("vm.dirty_bytes", "0") != "0":
            return f"dirty_bytes {int(kv['vm.dirty_bytes']) >> 20}M/{int(kv['vm.dirty_background_bytes']) >> 20}M"
        return f"dirty_ratio {kv.get('vm.dirty_ratio')}/{kv.get('vm.dirty_background_ratio')}"
    changed = {k for k in a if k.startswith("vm.") and a.get(k) != b.get(k)}
    rows.append((f"-t {t}: machine", "", f"{dirty(a)} at start, {dirty(b)} at end"
                 + (" (changed during the run, not by this script)" if changed else "")
                 + f"; load {a['load']} -> {b['load']}"))


def main():
    out = sys.argv[1]
    threads = [int(x) for x in sys.argv[2:]] or [1, 4]
    try:
        data_bdi = open(f"{out}/data-dev.txt").read().split()[0]
    except OSError:
        data_bdi = None
    for t in threads:
        r = load(out, t)
        if t > 1:
            check_zero_covered(r, t, data_bdi)
        check_syncfs(r, t)
        check_journal(r, t)
        check_overlap(r, t)
        check_stalled(r, t)
        if t == 1:
            check_no_op_path(r, t)
        extra_figures(r, t)
        env_row(out, t)
    # a Markdown table: the README's figures are pasted from it
    print("| property | result | figures |")
    print("|---|---|---|")
    for p, ok, fig in rows:
        print(f"| {p} | {ok} | {fig} |")
    sys.exit(1 if any(ok == "FAIL" for _, ok, _ in rows) else 0)


if __name__ == "__main__":
    main()

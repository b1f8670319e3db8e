//! Observed servers' own knobs: PostgreSQL's flush-after settings,
//! RocksDB's incremental syncs and write-stall triggers, Ceph FileStore's
//! queue throttle, and for any other process the call that starts
//! writeback early. All `direction`, without a treatment: the lab runs
//! our writers, not the server.

use super::{card, human, Ctx};
use crate::analysis::advice::card::{Proposal, Scope};
use crate::analysis::advice::diagnosis::{Server, Stalled, Subject};
use crate::model::cause::Cause;

const PG_WAL: &str = "https://www.postgresql.org/docs/current/runtime-config-wal.html";
const PG_RES: &str = "https://www.postgresql.org/docs/current/runtime-config-resource.html";
const ROCKS_TUNING: &str =
    "https://github.com/facebook/rocksdb/wiki/Setup-Options-and-Basic-Tuning";
const ROCKS_STALLS: &str = "https://github.com/facebook/rocksdb/wiki/Write-Stalls";
const CEPH_FILESTORE: &str =
    "https://docs.ceph.com/en/quincy/rados/configuration/filestore-config-ref/";

/// One server knob: (knob, from, to, trade-off, source).
type Knob = (
    &'static str,
    &'static str,
    String,
    &'static str,
    &'static str,
);

/// The server's own knobs for one subject's stalls of one cause.
pub(super) fn cards(ctx: &Ctx, cause: Cause, s: &Subject) -> Vec<Proposal> {
    let Stalled::Server { kind, .. } = &s.who else {
        return Vec::new();
    };
    let knobs: Vec<Knob> = match (kind, cause) {
        (Server::Postgres, Cause::DirtyThrottle | Cause::Sync | Cause::WritebackWait) => {
            postgres(cause)
        }
        (Server::RocksDb, Cause::DirtyThrottle | Cause::Sync) => rocksdb_syncs(cause),
        (Server::RocksDb, Cause::AppDelay) => rocksdb_stalls(),
        (Server::CephOsd, Cause::DirtyThrottle | Cause::Sync | Cause::JournalFull) => {
            vec![(
                "filestore_queue_max_bytes",
                "100 MiB (default)",
                ctx.budget(s).to_string(),
                "the apply queue holds at most about a second of the data disk's writeback: the journal cannot run far ahead of it, so syncfs has less to write; ops wait in the queue instead",
                CEPH_FILESTORE,
            )]
        }
        (Server::Other, Cause::DirtyThrottle | Cause::Sync) => vec![(
            "sync_file_range",
            "none",
            ctx.budget(s).to_string(),
            "start writeback of each chunk of this many bytes as it is written (SYNC_FILE_RANGE_WRITE), then fdatasync: the final sync finds little left; a system call per chunk",
            "https://man7.org/linux/man-pages/man2/sync_file_range.2.html",
        )],
        _ => Vec::new(),
    };
    knobs
        .into_iter()
        .map(|(knob, from, to, tradeoff, source)| {
            let shown = to.parse::<u64>().map_or(to.clone(), human);
            let change = if from == "none" {
                format!("{knob} every {shown} written, then fdatasync")
            } else {
                format!("{knob} {from} → {shown}")
            };
            let mut c = card(
                cause,
                s,
                change,
                knob.into(),
                (from != "none").then(|| from.into()),
                to,
                Scope::Application,
                tradeoff.into(),
                source,
            );
            if *kind == Server::CephOsd {
                c.gate = Some(
                    "FileStore only: unsupported since Ceph Reef (18); BlueStore has no such queue"
                        .into(),
                );
            }
            c
        })
        .collect()
}

fn postgres(cause: Cause) -> Vec<Knob> {
    let backend = (
        "backend_flush_after",
        "0 (default: off)",
        "256kB".to_string(),
        "each backend asks the kernel to write back every 256 kB it writes: less dirty data piles up for the checkpoint's fsync; may cost throughput when the same pages are rewritten",
        PG_RES,
    );
    if cause != Cause::Sync {
        return vec![backend];
    }
    vec![
        (
            "checkpoint_flush_after",
            "256kB (default on Linux; 0 turns it off)",
            "256kB".to_string(),
            "keep it on: the checkpointer starts writeback every 256 kB, so its fsyncs find less to flush; check SHOW checkpoint_flush_after is not 0",
            PG_WAL,
        ),
        (
            "wal_writer_flush_after",
            "1MB (default)",
            "256kB".to_string(),
            "the WAL writer flushes every 256 kB: smaller fdatasyncs that wait behind less; more flushes to the WAL device",
            PG_WAL,
        ),
        backend,
    ]
}

fn rocksdb_syncs(cause: Cause) -> Vec<Knob> {
    let data = (
        "bytes_per_sync",
        "0 (default: off)",
        "1048576".to_string(),
        "SST files are synced every 1 MiB as they are written: no burst of dirty pages at the end of a flush or compaction; more, smaller syncs",
        ROCKS_TUNING,
    );
    if cause != Cause::Sync {
        return vec![data];
    }
    vec![
        (
            "wal_bytes_per_sync",
            "0 (default: off)",
            "1048576".to_string(),
            "the WAL is synced every 1 MiB in the background: a sync=true write or a WAL sync waits behind less; more syncs",
            ROCKS_TUNING,
        ),
        data,
    ]
}

fn rocksdb_stalls() -> Vec<Knob> {
    vec![
        (
            "max_background_jobs",
            "2 (default)",
            "4".to_string(),
            "more flush and compaction threads, so L0 drains before writes slow down: more CPU and disk bandwidth to compaction",
            ROCKS_STALLS,
        ),
        (
            "level0_slowdown_writes_trigger",
            "20 (default)",
            "40".to_string(),
            "writes slow down at 40 L0 files, not 20 (raise level0_stop_writes_trigger to 56 with it): reads check more files, compaction debt grows",
            ROCKS_STALLS,
        ),
    ]
}

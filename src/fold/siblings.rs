//! Our own writers waiting for each other. A writer whose record runs past
//! the end of the segment has to wait while a sibling rolls the log (it
//! holds the roll: recycling the oldest segment, which may mean an msync,
//! an unlink, a create); the writer knows whose roll it waited behind
//! (`Blocked::behind`, handed over in its batch, nothing per op). Its
//! stall is then chained to the sibling's concurrent stall, as an observed
//! thread's sleep is chained to its waker's waits (`fold::chains`): the
//! sibling is the first hop, the time they overlap goes to the sibling's
//! causes, the rest to the waiter's own; the headline is the largest.

use crate::model::cause::{add_share, largest, Attribution, Confidence, Evidence, Hop, COVERED};
use crate::model::cause::{Cause, Cause::Sync};
use crate::model::stall::Stall;

/// A writer's stall, and when it ended (or the time it is judged at).
pub struct Timed<'a> {
    pub stall: &'a Stall,
    pub end_ns: u64,
}

impl Timed<'_> {
    fn ms(&self) -> f64 {
        self.end_ns.saturating_sub(self.stall.ev.start_ns) as f64 / 1e6
    }
}

/// The waiter's attribution chained to the sibling's stall it waited
/// behind; None when they do not overlap or the sibling's chain leads
/// back to the waiter. The hop is `thread N` (our writers are known by
/// number, as the tables show them), doing the sibling's call.
pub fn behind(waiter: Timed, sibling: Timed, sibling_tid: u32) -> Option<Attribution> {
    let (w, s) = (waiter.stall, sibling.stall);
    let from = w.ev.start_ns.max(s.ev.start_ns);
    let to = waiter.end_ns.min(sibling.end_ns);
    if to <= from || s.why.via.iter().any(|h| h.comm == thread_name(w)) {
        return None;
    }
    let (dur, sib_dur) = (waiter.ms(), sibling.ms().max(1e-6));
    let overlap = (to - from) as f64 / 1e6;
    let mut shares = Vec::new();
    for sh in s.why.shares_of(sib_dur) {
        add_share(&mut shares, sh.cause, sh.ms * overlap / sib_dur);
    }
    // The waiter's own time outside the wait, by its own evidence.
    let rest = (dur - overlap).max(0.0);
    for sh in w.why.shares_of(dur) {
        add_share(&mut shares, sh.cause, sh.ms * rest / dur.max(1e-6));
    }
    let known: f64 = shares
        .iter()
        .filter(|sh| sh.cause != Cause::Unknown)
        .map(|sh| sh.ms)
        .sum();
    let e = &s.why.evidence;
    let call = e.syscall.clone().or_else(|| e.sync_op.clone());
    let hop = Hop {
        tid: sibling_tid,
        comm: thread_name(s),
        state: "D".into(),
        wait: e.wait.clone(),
        syscall: call.clone(),
        cause: s.why.cause,
        ms: overlap,
    };
    let mut via = vec![hop];
    via.extend(s.why.via.iter().cloned());
    let cause = largest(&shares).unwrap_or(Cause::Unknown);
    let high = s.why.confidence == Confidence::High && known >= COVERED * dur;
    Some(Attribution {
        cause,
        confidence: if high {
            Confidence::High
        } else {
            Confidence::Low
        },
        evidence: Evidence {
            syscall: e.syscall.clone(),
            wait: e.wait.clone(),
            sync_op: call.filter(|_| cause == Sync),
            kernel_stack: w.why.evidence.kernel_stack.clone(),
            ..Evidence::default()
        },
        shares,
        via,
    })
}

/// How a writer thread is named in a chain.
fn thread_name(s: &Stall) -> String {
    format!("thread {}", s.ev.who.thread())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::cause::Share;
    use crate::model::ops::OpKind;
    use crate::model::stall::Blocked;

    const MS: u64 = 1_000_000;

    fn stall(thread: u32, op: OpKind, from_ms: u64, to_ms: u64, why: Attribution) -> Stall {
        let mut ev = Blocked::writer(0, thread, op, from_ms * MS, (to_ms - from_ms) * MS);
        ev.behind = None;
        Stall { ev, why }
    }

    fn timed(s: &Stall) -> Timed<'_> {
        Timed {
            stall: s,
            end_ns: s.ev.start_ns + s.ev.dur(),
        }
    }

    /// The roll holder synced the oldest segment for 4 s (its op is a
    /// segment wait: `sync`, high); thread 1 waited on the roll's mutex
    /// from 0.1 s to 4.1 s, its own stack a futex wait (`unknown`, low).
    #[test]
    fn a_writer_behind_a_sibling_s_recycle_has_its_cause_and_names_it() {
        let sync = Attribution {
            evidence: Evidence {
                sync_op: Some("msync (recycling a segment)".into()),
                ..Evidence::default()
            },
            ..Attribution::high(Cause::Sync, Evidence::default())
        };
        let holder = stall(2, OpKind::SegmentWait, 0, 4_050, sync);
        let own = Attribution {
            cause: Cause::Unknown,
            confidence: Confidence::Low,
            evidence: Evidence {
                kernel_stack: Some("futex_wait_queue < futex_wait < sys_futex".into()),
                ..Evidence::default()
            },
            shares: Vec::new(),
            via: Vec::new(),
        };
        let waiter = stall(1, OpKind::Write, 100, 4_100, own);
        let a = behind(timed(&waiter), timed(&holder), 4242).expect("chained");
        assert_eq!((a.cause, a.confidence), (Cause::Sync, Confidence::High));
        let total: f64 = a.shares.iter().map(|s| s.ms).sum();
        assert!((total - 4_000.0).abs() < 1e-6, "{:?}", a.shares);
        assert_eq!(
            a.shares[0],
            Share {
                cause: Cause::Sync,
                ms: 3_950.0
            }
        );
        assert_eq!(a.via.len(), 1);
        assert_eq!((a.via[0].tid, a.via[0].comm.as_str()), (4242, "thread 2"));
        assert_eq!(
            a.chain_brief().as_deref(),
            Some("\u{2190} thread 2 msync (recycling a segment)")
        );
        assert_eq!(
            a.evidence.sync_op.as_deref(),
            Some("msync (recycling a segment)")
        );
        assert!(a
            .evidence
            .kernel_stack
            .unwrap()
            .starts_with("futex_wait_queue"));
    }

    /// A holder whose own wait is unknown (blocked in a directory lookup
    /// with no sync) passes that on: the chain says where, not a guess.
    #[test]
    fn an_unknown_holder_leaves_the_waiter_unknown_and_low_but_chained() {
        let lookup = Attribution {
            cause: Cause::Unknown,
            confidence: Confidence::Low,
            evidence: Evidence {
                wait: Some("filesystem metadata I/O".into()),
                ..Evidence::default()
            },
            shares: Vec::new(),
            via: Vec::new(),
        };
        let holder = stall(0, OpKind::Write, 0, 2_000, lookup);
        let waiter = stall(
            3,
            OpKind::Write,
            500,
            2_100,
            Attribution::high(Cause::Unknown, Evidence::default()),
        );
        let a = behind(timed(&waiter), timed(&holder), 7).unwrap();
        assert_eq!((a.cause, a.confidence), (Cause::Unknown, Confidence::Low));
        assert_eq!(a.via[0].wait.as_deref(), Some("filesystem metadata I/O"));
        // Apart in time: nothing to chain.
        let later = stall(
            3,
            OpKind::Write,
            3_000,
            3_500,
            Attribution::high(Cause::Unknown, Evidence::default()),
        );
        assert!(behind(timed(&later), timed(&holder), 7).is_none());
    }
}

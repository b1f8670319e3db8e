//! The aggregator's side of `fold::siblings`: finds the sibling's stall a
//! writer's stall waited behind, among the interval's stalls, the recent
//! ones, and the ops still going on (judged as of the interval's end).

use super::{Aggregator, Owner};
use crate::fold::siblings::{behind, Timed};
use crate::model::stall::{Stall, Who};

/// Writer stalls kept to chain a late waiter to (a few seconds' worth).
pub(super) const RECENT_WRITER_STALLS: usize = 64;

impl Aggregator {
    /// Chains each writer stall that waited behind a sibling's segment roll
    /// to that sibling's stall, then remembers the interval's writer stalls
    /// for waiters that end later.
    pub(super) fn chain_siblings(&mut self, stalls: &mut [Stall], t_end: u64) {
        for i in 0..stalls.len() {
            let (Some(sib), Who::Writer { target, .. }) = (stalls[i].ev.behind, &stalls[i].ev.who)
            else {
                continue;
            };
            let who = Who::Writer {
                target: *target,
                thread: sib,
            };
            let end = |s: &Stall| s.ev.start_ns + s.ev.dur_at(t_end);
            let (from, to) = (stalls[i].ev.start_ns, end(&stalls[i]));
            let meets = |s: &Stall| s.ev.who == who && s.ev.start_ns < to && end(s) > from;
            let found = stalls
                .iter()
                .find(|s| meets(s))
                .or_else(|| self.recent_writer_stalls.iter().find(|s| meets(s)))
                .cloned()
                .or_else(|| {
                    let b = self.in_progress.iter().find(|b| b.who == who)?;
                    Some(self.explain(b.clone(), t_end)).filter(meets)
                });
            let Some(s) = found else { continue };
            let tid = self.tid_of(&who);
            let waiter = Timed {
                stall: &stalls[i],
                end_ns: to,
            };
            let sibling = Timed {
                stall: &s,
                end_ns: end(&s),
            };
            if let Some(why) = behind(waiter, sibling, tid) {
                stalls[i].why = why;
            }
        }
        for s in stalls.iter().filter(|s| s.ev.who.target().is_some()) {
            if self.recent_writer_stalls.len() >= RECENT_WRITER_STALLS {
                self.recent_writer_stalls.pop_front();
            }
            self.recent_writer_stalls.push_back(s.clone());
        }
    }

    /// A writer thread's kernel id, if the trace session named it (0 if not).
    fn tid_of(&self, who: &Who) -> u32 {
        let Who::Writer { target, thread } = *who else {
            return 0;
        };
        self.tids
            .iter()
            .find(|(_, o)| matches!(o, Owner::Writer(t, th) if (*t, *th) == (target, thread)))
            .map_or(0, |(tid, _)| *tid)
    }
}

//! The advice panel's diagnosis, made from what the dashboard holds: each
//! view's stall time by cause (every stall seen, by shares, as `advise`
//! counts them), its bytes, its device's write rate, the dirty thresholds;
//! the catalog turns it into the same cards `stallscope advise` prints.

use super::App;
use crate::analysis::advice::card::Proposal;
use crate::analysis::advice::catalog;
use crate::analysis::advice::diagnosis::{
    limits, place_of, server_subject, writing_median, Diagnosis, DirtyLimits, Stalled, Subject,
};
use crate::analysis::advice::machine::Machine;
use crate::model::stall::Stall;
use crate::source::proc::DirtySysctls;

/// What the cards are checked against, told once by whoever starts the
/// dashboard (`term` live, `replay` from the recording's header).
#[derive(Clone, Debug, PartialEq)]
pub struct AdviceEnv {
    /// This machine's knobs (unprobed: every card says "not checked").
    pub machine: Machine,
    /// The kernel and host the stalls happen (happened) on.
    pub kernel: String,
    pub host: String,
    /// The dirty sysctls at the start.
    pub vm: Option<DirtySysctls>,
    /// Journal mode's commit interval, s.
    pub commit_interval_s: Option<f64>,
}

impl Default for AdviceEnv {
    fn default() -> Self {
        AdviceEnv {
            machine: Machine::default(),
            kernel: "?".into(),
            host: "?".into(),
            vm: None,
            commit_interval_s: None,
        }
    }
}

impl AdviceEnv {
    /// This machine's knobs for `targets`' devices under `root`; the
    /// stalls' kernel and host are this machine's unless told otherwise.
    pub fn probe(
        root: &crate::source::proc::ProcRoot,
        targets: &[crate::model::snapshot::TargetMeta],
    ) -> AdviceEnv {
        let devs: Vec<String> = targets
            .iter()
            .filter_map(|t| crate::analysis::advice::diagnosis::device_numbers(&t.device))
            .collect();
        let machine = Machine::probe(root, &devs);
        AdviceEnv {
            kernel: machine.kernel.clone(),
            host: machine.host.clone(),
            vm: crate::source::proc::read_dirty_sysctls(root).ok(),
            commit_interval_s: None,
            machine,
        }
    }
}

impl App {
    pub fn set_advice_env(&mut self, env: AdviceEnv) {
        self.advice_env = env;
    }

    pub fn advice_env(&self) -> &AdviceEnv {
        &self.advice_env
    }

    /// The cards for the stalls so far.
    pub fn advice(&self) -> Vec<Proposal> {
        catalog::propose(&self.diagnosis(), &self.advice_env.machine)
    }

    /// Who stalled on what so far: one subject per view.
    pub fn diagnosis(&self) -> Diagnosis {
        let h = &self.header;
        let mut subjects: Vec<Subject> = Vec::new();
        for (i, tv) in self.targets.iter().enumerate() {
            let own: Vec<&Stall> = self
                .stalls
                .iter()
                .filter(|s| self.view_of(&s.ev.who) == Some(i))
                .collect();
            let mut s = match self.observed.get(i.wrapping_sub(self.real)) {
                Some(w) if self.is_observed_view(i) => {
                    server_subject(w.pid, w.comm.clone(), &own, &subjects, tv.bytes)
                }
                _ => {
                    let mut place = place_of(&tv.meta);
                    place.writeback_mib_per_s =
                        writing_median(tv.points.iter().filter_map(|p| p.dev_mib_per_s));
                    let who = Stalled::Writers {
                        mode: h.mode,
                        threads: h.threads,
                        sync: Some(h.sync),
                        commit_interval_s: self.advice_env.commit_interval_s,
                    };
                    crate::analysis::advice::diagnosis::subject(who, Some(place), &own, tv.bytes)
                }
            };
            // Every stall seen, not only the listed (newest) ones.
            s.by_cause = tv.by_cause.clone();
            subjects.push(s);
        }
        let last = self
            .targets
            .iter()
            .filter_map(|t| t.points.back())
            .max_by(|a, b| a.t_s.total_cmp(&b.t_s));
        let bytes = |mib: Option<f64>| mib.map(|m| (m * (1u64 << 20) as f64) as u64);
        Diagnosis {
            kernel: self.advice_env.kernel.clone(),
            host: self.advice_env.host.clone(),
            title: format!("{} × {} threads", h.mode, h.threads),
            span_s: self.latest_t,
            dirty: DirtyLimits {
                thresh_bytes: bytes(last.and_then(|p| p.thresh_mib)),
                bg_thresh_bytes: bytes(last.and_then(|p| p.bg_thresh_mib)),
                ..limits(self.advice_env.vm, None)
            },
            subjects,
        }
    }
}

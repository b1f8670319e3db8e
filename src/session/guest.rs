//! A session that only observes is a guest on the server's node: its
//! threads run under SCHED_BATCH, so that when one wakes (a drain, a
//! sample) it never preempts the server's running thread. A preempted
//! thread may hold a lock the server's other threads queue on (a database
//! backend in its WAL flush), so a wake-up preemption costs the server
//! more than the CPU time it takes; under SCHED_BATCH the kernel lets the
//! running thread go on to the end of its slice. The share of CPU is the
//! same (nice 0): the observer is not starved on a busy machine.

/// Set by the cost script to measure the difference: keep the normal policy.
pub const NORMAL_SCHED_ENV: &str = "STALLSCOPE_NORMAL_SCHED";

/// SCHED_BATCH for the calling thread and the threads it starts from now
/// on. Best effort: a kernel or container that refuses keeps the normal
/// policy (said in the returned note).
pub fn yield_to_the_server() -> Option<String> {
    if std::env::var_os(NORMAL_SCHED_ENV).is_some() {
        return None;
    }
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: pid 0 is the calling thread; param is a valid sched_param.
    let rc = unsafe { libc::sched_setscheduler(0, libc::SCHED_BATCH, &param) };
    (rc != 0).then(|| {
        format!(
            "could not run as SCHED_BATCH ({}): stallscope's wake-ups may preempt the server's threads",
            std::io::Error::last_os_error()
        )
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_thread_that_yields_runs_as_sched_batch_and_its_children_too() {
        std::thread::spawn(|| {
            assert_eq!(super::yield_to_the_server(), None);
            // SAFETY: pid 0 is the calling thread.
            assert_eq!(unsafe { libc::sched_getscheduler(0) }, libc::SCHED_BATCH);
            let child = std::thread::spawn(|| unsafe { libc::sched_getscheduler(0) });
            assert_eq!(child.join().unwrap(), libc::SCHED_BATCH);
        })
        .join()
        .unwrap();
    }
}

//! A load for measuring what tracing the scheduler costs the traced task
//! (scripts/chain-cost.sh): two threads of one process, pinned to one CPU,
//! hand a byte back and forth over two pipes. Every hand-over is one sleep
//! in S and one wakeup of each thread, so a round trip is two
//! `sched_switch` and two `sched_waking` events of the watched threads.
//!
//! Every millisecond the main thread runs a burst of `rate / 1000` round
//! trips and times it with the monotonic clock, then sleeps to the next
//! millisecond: the event rate is fixed (what an observer pays per second
//! does not depend on how fast it lets us go), and the burst's wall time
//! per round trip counts every cost paid in the traced threads' own
//! context, the kernel's tracepoints included (on a CPU of their own no
//! one else's time is in it, whichever task the kernel charges it to).
//!
//! Usage: pingpong SECONDS RATE [CPU]   (RATE round trips a second, CPU 0)
//! Prints one line a second, `second round_trips ns_per_round_trip`, then
//! `median ns_per_round_trip N`.

use std::time::{Duration, Instant};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let num = |i: usize, default: u64| -> u64 {
        args.get(i).map_or(default, |a| {
            a.parse().unwrap_or_else(|_| {
                eprintln!("usage: pingpong SECONDS RATE [CPU]   ({a:?} is not a number)");
                std::process::exit(2)
            })
        })
    };
    let (secs, rate, cpu) = (num(1, 10), num(2, 10_000), num(3, 0) as usize);
    let per_burst = (rate / 1000).max(1);
    pin(cpu);
    let (to_b, from_a) = pipe();
    let (to_a, from_b) = pipe();
    // (Unnamed: both threads keep the process's comm, which offwake.bt
    // matches.)
    std::thread::Builder::new()
        .spawn(move || {
            pin(cpu);
            let mut b = [0u8; 1];
            while read(from_a, &mut b) {
                write(to_a, &b);
            }
        })
        .expect("spawn pong");
    let start = Instant::now();
    let mut per_second: Vec<f64> = Vec::new();
    let (mut busy, mut trips) = (Duration::ZERO, 0u64);
    let mut tick = start;
    let mut b = [0u8; 1];
    while start.elapsed() < Duration::from_secs(secs) {
        let t0 = Instant::now();
        for _ in 0..per_burst {
            write(to_b, &b);
            read(from_b, &mut b);
        }
        busy += t0.elapsed();
        trips += per_burst;
        if t0.duration_since(start).as_secs() as usize > per_second.len() && trips > 0 {
            let ns = busy.as_nanos() as f64 / trips as f64;
            println!("{} {trips} {ns:.0}", per_second.len() + 1);
            per_second.push(ns);
            (busy, trips) = (Duration::ZERO, 0);
        }
        tick += Duration::from_millis(1);
        if let Some(d) = tick.checked_duration_since(Instant::now()) {
            std::thread::sleep(d);
        } else {
            tick = Instant::now();
        }
    }
    // The first second warms up (the observer attaches before it ends).
    let mut v: Vec<f64> = per_second.into_iter().skip(1).collect();
    v.sort_by(f64::total_cmp);
    match v.get(v.len() / 2) {
        Some(m) => println!("median {m:.0} {}", v.len()),
        None => println!("median - 0"),
    }
}

/// This thread on `cpu` only.
fn pin(cpu: usize) {
    // SAFETY: a zeroed cpu_set_t is a valid empty set; the calls only read it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
            eprintln!("pingpong: cannot pin to CPU {cpu}");
            std::process::exit(1);
        }
    }
}

fn pipe() -> (i32, i32) {
    let mut fds = [0i32; 2];
    // SAFETY: fds has room for the two descriptors pipe writes.
    if unsafe { libc::pipe(fds.as_mut_ptr()) } != 0 {
        panic!("pipe: {}", std::io::Error::last_os_error());
    }
    (fds[1], fds[0])
}

fn write(fd: i32, b: &[u8; 1]) {
    // SAFETY: b is one valid byte.
    if unsafe { libc::write(fd, b.as_ptr().cast(), 1) } != 1 {
        panic!("write: {}", std::io::Error::last_os_error());
    }
}

/// False at end of file (the other end closed).
fn read(fd: i32, b: &mut [u8; 1]) -> bool {
    // SAFETY: b is one writable byte.
    unsafe { libc::read(fd, b.as_mut_ptr().cast(), 1) == 1 }
}

//! A load for measuring what tracing write-path system calls costs the
//! calling thread (scripts/chain-cost.sh): one thread, pinned to one CPU,
//! calls `write()` of 64 bytes then `fdatasync()` on a file in a tmpfs
//! (/dev/shm unless told), over and over. On tmpfs neither call sleeps
//! (fdatasync has nothing to do), so each call is a system call's entry
//! and exit and little else: with call boundaries on, two syscall events
//! (`sys_enter_<call>`, `sys_exit_<call>`) of a watched thread, and no
//! scheduler events inside the timed bursts.
//!
//! As in pingpong.rs, every millisecond the thread runs a burst of
//! `rate / 1000` write+fdatasync pairs and times it with the monotonic
//! clock, then sleeps to the next millisecond: the call rate is fixed,
//! and the burst's wall time per call counts every cost paid in the
//! thread's own context (the kernel's tracepoints, filters, ring buffer;
//! BPF programs), whichever task the kernel charges it to. Once a second,
//! outside the bursts, the file offset goes back to 0 (lseek, not a
//! write-path call), so the file stays at `rate * 64` bytes.
//!
//! Usage: syncloop SECONDS RATE [CPU] [DIR]   (RATE write+fdatasync pairs
//! a second, CPU 0, DIR /dev/shm; the file is unlinked as soon as it is
//! open, so nothing is left behind). Prints one line a second,
//! `second calls ns_per_call`, then `median ns_per_call N` (a call is
//! either one write or one fdatasync).

use std::ffi::CString;
use std::time::{Duration, Instant};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let usage = "usage: syncloop SECONDS RATE [CPU] [DIR]";
    let num = |i: usize, default: u64| -> u64 {
        args.get(i).map_or(default, |a| {
            a.parse().unwrap_or_else(|_| {
                eprintln!("{usage}   ({a:?} is not a number)");
                std::process::exit(2)
            })
        })
    };
    let (secs, rate, cpu) = (num(1, 10), num(2, 10_000), num(3, 0) as usize);
    let dir = args.get(4).map_or("/dev/shm", String::as_str);
    let per_burst = (rate / 1000).max(1);
    pin(cpu);
    let fd = open_unlinked(dir);
    let buf = [0x5au8; 64];
    let start = Instant::now();
    let mut per_second: Vec<f64> = Vec::new();
    let (mut busy, mut calls) = (Duration::ZERO, 0u64);
    let mut tick = start;
    while start.elapsed() < Duration::from_secs(secs) {
        let t0 = Instant::now();
        for _ in 0..per_burst {
            // SAFETY: buf is 64 valid bytes; fd is our open file.
            if unsafe { libc::write(fd, buf.as_ptr().cast(), buf.len()) } != buf.len() as isize {
                die("write");
            }
            // SAFETY: fd is our open file.
            if unsafe { libc::fdatasync(fd) } != 0 {
                die("fdatasync");
            }
        }
        busy += t0.elapsed();
        calls += 2 * per_burst;
        if t0.duration_since(start).as_secs() as usize > per_second.len() && calls > 0 {
            let ns = busy.as_nanos() as f64 / calls as f64;
            println!("{} {calls} {ns:.0}", per_second.len() + 1);
            per_second.push(ns);
            (busy, calls) = (Duration::ZERO, 0);
            // SAFETY: fd is our open file.
            if unsafe { libc::lseek(fd, 0, libc::SEEK_SET) } != 0 {
                die("lseek");
            }
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

/// A new file in `dir`, open for writing and already unlinked.
fn open_unlinked(dir: &str) -> i32 {
    let path = format!("{dir}/syncloop.{}", std::process::id());
    let c = CString::new(path.clone()).unwrap_or_else(|_| {
        eprintln!("syncloop: {dir:?} has a NUL byte");
        std::process::exit(2)
    });
    // SAFETY: c is a valid C string; the flags and mode are plain ints.
    let fd = unsafe {
        libc::open(
            c.as_ptr(),
            libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_CLOEXEC,
            0o600,
        )
    };
    if fd < 0 {
        die(&format!("open {path}"));
    }
    // SAFETY: c is a valid C string.
    if unsafe { libc::unlink(c.as_ptr()) } != 0 {
        die(&format!("unlink {path}"));
    }
    fd
}

/// This thread on `cpu` only.
fn pin(cpu: usize) {
    // SAFETY: a zeroed cpu_set_t is a valid empty set; the calls only read it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
            eprintln!("syncloop: cannot pin to CPU {cpu}");
            std::process::exit(1);
        }
    }
}

fn die(what: &str) -> ! {
    eprintln!("syncloop: {what}: {}", std::io::Error::last_os_error());
    std::process::exit(1)
}

//! Cost of one full /proc pass (meminfo, vmstat, pressure/io, diskstats) on
//! the live system, for the device behind /var/tmp. The sampler runs once
//! per interval next to the writers, so it must stay well under 1 ms.
//!
//! `cargo bench --bench sampler`

use std::path::Path;
use std::time::Instant;

use stallscope::source::proc::{resolve_device, ProcRoot, ProcSampler};

const PASSES: usize = 2000;
const WARMUP: usize = 50;

fn main() {
    let root = ProcRoot::default();
    let device = match resolve_device(&root, Path::new("/var/tmp")) {
        Ok(d) => Some(d),
        Err(why) => {
            eprintln!("/var/tmp: {why}; sampling without a device");
            None
        }
    };
    println!("device of /var/tmp: {device:?}");
    let mut sampler = ProcSampler::new(root, vec![device]);
    let t0 = Instant::now();
    for _ in 0..WARMUP {
        std::hint::black_box(sampler.sample(0));
    }
    let mut us: Vec<f64> = Vec::with_capacity(PASSES);
    for _ in 0..PASSES {
        let start = Instant::now();
        let s = sampler.sample(start.duration_since(t0).as_nanos() as u64);
        us.push(start.elapsed().as_secs_f64() * 1e6);
        std::hint::black_box(s);
    }
    us.sort_by(f64::total_cmp);
    let at = |q: f64| us[((us.len() - 1) as f64 * q).round() as usize];
    println!(
        "sampler: {PASSES} passes, µs per pass: median {:.1}, p90 {:.1}, max {:.1}",
        at(0.5),
        at(0.9),
        us[us.len() - 1]
    );
}

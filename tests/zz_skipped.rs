//! The last test binary of `cargo test` (they run in name order; doctests
//! are off): it prints which tests of this run were skipped and why, so a
//! run without root does not look like a full pass. Without the harness,
//! so its output is never captured. cargo reaches it after a failing
//! binary only with `--no-fail-fast`, hence the README's test command.

fn main() {
    let skipped = stallscope::base::skips::take_this_run();
    if skipped.is_empty() {
        println!("\nno test was skipped in this run");
        return;
    }
    println!(
        "\n{} test(s) did not run here and are NOT covered by this pass:",
        skipped.len()
    );
    for s in &skipped {
        println!("  {s}");
    }
    println!(
        "run the suite as root (as CI does, with STALLSCOPE_REQUIRE_ROOT_TESTS=1 making a skip a failure) to include them"
    );
}

//! Errors a person caused (bad input: exit 2) versus errors the run hit (exit 1).

use std::fmt;

/// Bad input: a one-line message naming the problem and the value; exit code 2.
#[derive(Debug)]
pub struct UsageError(pub String);

impl UsageError {
    pub fn new(msg: impl Into<String>) -> Self {
        UsageError(msg.into())
    }
}

impl fmt::Display for UsageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UsageError {}

/// Exit code for an error chain: 2 when any link is a `UsageError`.
pub fn exit_code(e: &anyhow::Error) -> i32 {
    if e.chain().any(|c| c.is::<UsageError>()) {
        2
    } else {
        1
    }
}

/// Like `eprintln!`, but a closed stderr (a dropped SSH session) is ignored
/// instead of panicking: used on shutdown paths that must finish cleaning up.
macro_rules! note {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($arg)*);
    }};
}
pub(crate) use note;

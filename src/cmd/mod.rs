//! The subcommands other than the dashboard: `compare`, `report`, `probe`
//! and `lab`. Each is an entry point over `session` and the sinks.

pub mod advise;
pub mod compare;
pub mod imitate;
pub mod lab;
pub mod lanes;
pub mod outfile;
pub mod probe;
pub mod report;
pub mod report_cmd;

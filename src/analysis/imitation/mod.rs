//! An imitation of an observed server: `plan` what it runs, read off the
//! server's recording (its captured write pattern); `fidelity` the gate
//! that says whether an imitation did and suffered what the server did,
//! before any verdict on it counts for the server.

pub mod fidelity;
pub mod plan;

//! The analysis that `advise`, `trial`, `report` and the dashboard's
//! advice panel share, below the commands and the dashboard: `span` a
//! recording's span as every reader counts it (its one list of stalls,
//! its segments), `advice` the advice engine (diagnosis, the machine's
//! knobs, the catalog of cards, their text), `imitation` a server's
//! write pattern replayed in the lab and the gate on how faithfully.

pub mod advice;
pub mod imitation;
pub mod span;

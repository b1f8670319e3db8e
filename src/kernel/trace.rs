//! tracefs writeback events (filled in by the kernel-correlation work).

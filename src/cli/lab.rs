//! `stallscope lab up|down|status|exec|adopt`'s arguments and examples.

use crate::base::units::ByteSize;
use clap::Subcommand;
use std::path::PathBuf;

const LAB_UP_EXAMPLES: &str = "Examples:
  sudo stallscope lab up
      ext4 and xfs, 4GiB sparse images, writes capped at 50MiB/s
  sudo stallscope lab up --fs ext4 --cap 20MiB --dirty-bytes 256M
  sudo stallscope run --target /var/tmp/stallscope-lab/mnt/ext4 --mode buffered

On cgroup v1 the root blkio group's throttle caps every writer. On cgroup v2
the root group cannot be capped: the lab makes the group stallscope-lab
(+io +memory enabled in the root), caps the devices in its io.max, and only
processes in it are capped: `run` and the dashboard join it for lab targets;
`lab exec` and `lab adopt` put other programs there. Buffered writes are
capped only when memory is on v2 too, on ext4, btrfs and xfs (5.3+).";

const LAB_DOWN_EXAMPLES: &str = "Examples:
  sudo stallscope lab down
      names the processes using a lab mount and stops (exit 2), else undoes all
  sudo stallscope lab down --force
      stops those processes (SIGTERM, SIGKILL after 5 s), then undoes all
  sudo stallscope lab down --force --lazy
      detaches the mounts (umount -l), leaving them running; their images
      stay until they let go: run lab down again then

Ctrl-C stops it between steps; what is left stays in the state file
(`lab status` lists it) and the next `lab down` finishes it.";

const LAB_EXEC_EXAMPLES: &str = "Examples:
  sudo stallscope lab exec -- fio --name w --directory /var/tmp/stallscope-lab/mnt/ext4 --rw write --size 1G
  sudo stallscope lab exec -- su postgres -c 'pg_ctl -D /var/tmp/stallscope-lab/mnt/ext4/pg start'

Exits with the command's status. Its processes are moved back by lab down.
On cgroup v1 (the root group is capped) it just runs the command.
systemd's way: systemd-run --scope -p IOWriteBandwidthMax=\"/dev/loopN 20M\" CMD";

const LAB_ADOPT_EXAMPLES: &str = "Examples:
  sudo stallscope lab adopt $(head -1 /var/tmp/stallscope-lab/mnt/ext4/pg/postmaster.pid)
      PostgreSQL's postmaster and all its children

lab down moves each back to the cgroup it came from (those still alive).
systemd's way: systemctl set-property --runtime UNIT IOWriteBandwidthMax=\"/dev/loopN 20M\"";

#[derive(Subcommand, Debug)]
pub enum LabCommand {
    /// Image files in DIR, loop devices (direct I/O), mkfs, mounts under DIR/mnt/<fs>, a write cap, optional dirty limits.
    #[command(after_help = LAB_UP_EXAMPLES)]
    Up {
        /// Filesystems to build, comma-separated.
        #[arg(long, value_delimiter = ',', default_value = "ext4,xfs")]
        fs: Vec<String>,
        /// Size of each (sparse) image; the disk needs room for what a run writes (its --disk-budget), not all of it.
        #[arg(long, default_value = "4GiB")]
        size: ByteSize,
        /// Where the images, mounts and state file go.
        #[arg(long, default_value = crate::cmd::lab::cmd::DEFAULT_DIR)]
        dir: PathBuf,
        /// Write bandwidth cap per device, per second (0 = none), e.g. 50MiB.
        #[arg(long, default_value = "50MiB", value_parser = parse_rate)]
        cap: ByteSize,
        /// Lower vm.dirty_bytes to this (restored by lab down).
        #[arg(long, value_name = "SIZE")]
        dirty_bytes: Option<ByteSize>,
        /// vm.dirty_background_bytes [default: a quarter of --dirty-bytes].
        #[arg(long, value_name = "SIZE")]
        dirty_background_bytes: Option<ByteSize>,
        /// Turn on stable_writes on the loop devices (rewriting a page under writeback waits; kernel 5.10+).
        #[arg(long)]
        stable_writes: bool,
    },
    /// Undo everything lab up changed (also after a crash), unless a process still uses the lab.
    #[command(after_help = LAB_DOWN_EXAMPLES)]
    Down {
        /// The DIR given to lab up (its state file says what to undo).
        #[arg(long, default_value = crate::cmd::lab::cmd::DEFAULT_DIR)]
        dir: PathBuf,
        /// Go on when processes use a lab mount: stop them (SIGTERM, then SIGKILL).
        #[arg(long)]
        force: bool,
        /// With --force: unmount lazily instead, leaving those processes running.
        #[arg(long, requires = "force")]
        lazy: bool,
    },
    /// What is up, and what is left to undo.
    Status {
        /// The DIR given to lab up.
        #[arg(long, default_value = crate::cmd::lab::cmd::DEFAULT_DIR)]
        dir: PathBuf,
    },
    /// Run a command under the lab's write cap (cgroup v2: in its group).
    #[command(after_help = LAB_EXEC_EXAMPLES)]
    Exec {
        /// The DIR given to lab up.
        #[arg(long, default_value = crate::cmd::lab::cmd::DEFAULT_DIR)]
        dir: PathBuf,
        /// The command and its arguments, after `--`.
        #[arg(
            required = true,
            trailing_var_arg = true,
            allow_hyphen_values = true,
            value_name = "CMD"
        )]
        command: Vec<String>,
    },
    /// Put a running process and all its descendants under the lab's cap (cgroup v2: into its group).
    #[command(after_help = LAB_ADOPT_EXAMPLES)]
    Adopt {
        /// The DIR given to lab up.
        #[arg(long, default_value = crate::cmd::lab::cmd::DEFAULT_DIR)]
        dir: PathBuf,
        /// The process (e.g. PostgreSQL's postmaster).
        pid: u32,
    },
}

/// "50MiB/s" or "50MiB" (per second either way).
fn parse_rate(s: &str) -> Result<ByteSize, String> {
    s.strip_suffix("/s").unwrap_or(s).parse()
}

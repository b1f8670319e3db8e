//! A real PostgreSQL (Debian's `postgresql` 15) on a capped lab ext4, for
//! tests that compare stallscope with a server none of us wrote. Dropping
//! `PgLab` stops the server and puts every setting back (fields drop in
//! order: server, dirty limits, cap, filesystem, folder).

use stallscope::cmd::lab::guards::{sh, BlkioCap, DirtyGuard, LoopFs};
use std::path::{Path, PathBuf};
use std::process::Command;

pub const PG_BIN: &str = "/usr/lib/postgresql/15/bin";

/// Whether the server's binaries and pgbench are installed.
pub fn have_postgres() -> bool {
    Path::new(PG_BIN).join("initdb").exists() && super::have("pgbench")
}

/// The running server; stops it on drop.
pub struct PgServer {
    pub data: PathBuf,
    pub socket_dir: PathBuf,
    pub port: u16,
}

impl PgServer {
    fn ctl(&self, args: &[&str]) -> std::io::Result<std::process::Output> {
        Command::new("runuser")
            .args(["-u", "postgres", "--", &format!("{PG_BIN}/pg_ctl"), "-D"])
            .arg(&self.data)
            .args(args)
            .output()
    }

    /// The postmaster's pid (first line of postmaster.pid).
    pub fn pid(&self) -> u32 {
        std::fs::read_to_string(self.data.join("postmaster.pid"))
            .ok()
            .and_then(|s| s.lines().next()?.trim().parse().ok())
            .expect("postmaster.pid")
    }

    /// One SQL statement through psql as user postgres; panics on failure.
    pub fn psql(&self, sql: &str) {
        self.query(sql);
    }

    /// One SQL statement through psql as user postgres, its result
    /// unaligned and without headers (`-At`); panics on failure.
    pub fn query(&self, sql: &str) -> String {
        let out = Command::new("runuser")
            .args(["-u", "postgres", "--", "psql", "-h"])
            .arg(&self.socket_dir)
            .args([
                "-p",
                &self.port.to_string(),
                "-X",
                "-q",
                "-At",
                "-c",
                sql,
                "postgres",
            ])
            .output()
            .expect("run psql");
        assert!(
            out.status.success(),
            "psql {sql}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    /// pgbench as user postgres against this server.
    pub fn pgbench(&self, args: &[&str]) -> std::process::Output {
        Command::new("runuser")
            .args(["-u", "postgres", "--", "pgbench", "-h"])
            .arg(&self.socket_dir)
            .args(["-p", &self.port.to_string()])
            .args(args)
            .arg("postgres")
            .output()
            .expect("run pgbench")
    }
}

impl Drop for PgServer {
    fn drop(&mut self) {
        let _ = self.ctl(&["stop", "-m", "immediate", "-w"]);
        // Whatever is left of it (a crashed stop): no process may keep the
        // filesystem busy.
        let _ = Command::new("pkill")
            .args(["-9", "-f", &self.data.to_string_lossy()])
            .status();
    }
}

/// PostgreSQL on a loop ext4 capped at `cap_mib` MiB/s, dirty limits
/// 256M/64M, `pgbench -i -s scale` loaded before the cap (loading is not
/// what is measured; scale 0: nothing loaded, a fresh cluster).
pub struct PgLab {
    pub server: PgServer,
    _dirty: Option<DirtyGuard>,
    _cap: Option<BlkioCap>,
    pub fs: LoopFs,
    _dir: tempfile::TempDir,
}

impl PgLab {
    pub fn start(cap_mib: u64, scale: u32) -> PgLab {
        let dir = tempfile::tempdir_in("/var/tmp").unwrap();
        // The server runs as user postgres: it must reach its socket folder.
        sh("chmod", &["755", &dir.path().to_string_lossy()]).unwrap();
        let fs = LoopFs::create(dir.path(), "ext4", 4 << 30).expect("loop ext4");
        let data = fs.mount.join("pg");
        let socket_dir = dir.path().join("sock");
        for d in [&data, &socket_dir] {
            std::fs::create_dir_all(d).unwrap();
            sh("chown", &["postgres:postgres", &d.to_string_lossy()]).unwrap();
        }
        let port = free_port();
        let server = PgServer {
            data: data.join("data"),
            socket_dir,
            port,
        };
        let out = Command::new("runuser")
            .args([
                "-u",
                "postgres",
                "--",
                &format!("{PG_BIN}/initdb"),
                "-A",
                "trust",
                "-D",
            ])
            .arg(&server.data)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "initdb: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let conf = format!(
            "shared_buffers = 512MB\ncheckpoint_timeout = 30s\nmax_wal_size = 4GB\n\
             listen_addresses = '127.0.0.1'\nport = {port}\nunix_socket_directories = '{}'\n",
            server.socket_dir.display()
        );
        let mut pc = std::fs::read_to_string(server.data.join("postgresql.conf")).unwrap();
        pc.push_str(&conf);
        std::fs::write(server.data.join("postgresql.conf"), pc).unwrap();
        let log = data.join("server.log");
        let out = server
            .ctl(&["-l", &log.to_string_lossy(), "start", "-w"])
            .unwrap();
        assert!(
            out.status.success(),
            "pg_ctl start: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        if scale > 0 {
            let init = server.pgbench(&["-i", "-q", "-s", &scale.to_string()]);
            assert!(
                init.status.success(),
                "pgbench -i: {}",
                String::from_utf8_lossy(&init.stderr)
            );
        }
        let cap = BlkioCap::set(fs.major, fs.minor, cap_mib << 20).expect("blkio cap");
        let dirty = DirtyGuard::set_bytes(256 << 20, 64 << 20).expect("dirty limits");
        PgLab {
            server,
            _dirty: Some(dirty),
            _cap: Some(cap),
            fs,
            _dir: dir,
        }
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// One second of `pgbench -P 1 --progress-timestamp`: its end (epoch s)
/// and tps.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Progress {
    pub end_s: f64,
    pub tps: f64,
}

/// Parses `progress: 1796320456.798 s, 782.3 tps, lat 10.2 ms stddev ...`.
pub fn progress(stderr: &str) -> Vec<Progress> {
    stderr
        .lines()
        .filter_map(|l| {
            let mut w = l.strip_prefix("progress: ")?.split_whitespace();
            let end_s = w.next()?.parse().ok()?;
            w.next()?; // "s,"
            let tps = w.next()?.parse().ok()?;
            Some(Progress { end_s, tps })
        })
        .collect()
}

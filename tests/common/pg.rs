//! A real PostgreSQL (Debian's `postgresql`, the newest major version
//! installed) on a capped lab ext4, for tests that compare stallscope with
//! a server none of us wrote. Dropping `PgLab` stops the server and puts
//! every setting back (fields drop in order: server, lab).

use stallscope::cmd::lab::guards::sh;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Where Debian puts each major version's server binaries.
const PG_ROOT: &str = "/usr/lib/postgresql";

/// The bin folder of the newest PostgreSQL installed
/// (`/usr/lib/postgresql/N/bin` with an initdb, highest N), if any.
pub fn pg_bin() -> Option<PathBuf> {
    newest_pg_bin(Path::new(PG_ROOT))
}

/// [`pg_bin`] under another root (a fake one in tests).
pub fn newest_pg_bin(root: &Path) -> Option<PathBuf> {
    let version =
        |name: &str| -> Option<Vec<u32>> { name.split('.').map(|p| p.parse().ok()).collect() };
    std::fs::read_dir(root)
        .ok()?
        .filter_map(Result::ok)
        .filter_map(|e| Some((version(e.file_name().to_str()?)?, e.path().join("bin"))))
        .filter(|(_, bin)| bin.join("initdb").exists())
        .max()
        .map(|(_, bin)| bin)
}

/// Whether the server's binaries and pgbench are installed.
pub fn have_postgres() -> bool {
    pg_bin().is_some() && super::have("pgbench")
}

/// A program of the server's bin folder, as text for a command line.
fn pg_prog(name: &str) -> String {
    pg_bin()
        .expect("PostgreSQL installed")
        .join(name)
        .to_string_lossy()
        .into_owned()
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
            .args(["-u", "postgres", "--", &pg_prog("pg_ctl"), "-D"])
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
        self.pgbench_cmd(args).output().expect("run pgbench")
    }

    /// The command of [`PgServer::pgbench`], to spawn it in the background.
    pub fn pgbench_cmd(&self, args: &[&str]) -> Command {
        let mut c = Command::new("runuser");
        c.args(["-u", "postgres", "--", "pgbench", "-h"])
            .arg(&self.socket_dir)
            .args(["-p", &self.port.to_string()])
            .args(args)
            .arg("postgres");
        c
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

/// PostgreSQL on a lab ext4 capped at `cap_mib` MiB/s, dirty limits
/// 256M/64M (`common::capped`: on cgroup v2 the server starts inside the
/// lab's group), `pgbench -i -s scale` loaded with the cap and dirty limits lifted (scale 0:
/// nothing loaded, a fresh cluster).
pub struct PgLab {
    pub server: PgServer,
    pub lab: super::CappedFs,
}

impl PgLab {
    pub fn start(cap_mib: u64, scale: u32) -> PgLab {
        let lab = super::capped("PgLab", "ext4", cap_mib).expect("root");
        // The server runs as user postgres: it must reach its data and its
        // socket folder (beside the lab's).
        let base = lab.lab.dir.parent().unwrap();
        for d in [base, &lab.lab.dir] {
            sh("chmod", &["755", &d.to_string_lossy()]).unwrap();
        }
        let data = lab.fs.mount.join("pg");
        let socket_dir = base.join("sock");
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
                &pg_prog("initdb"),
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
            // Loading is not what is measured: at full speed and under the
            // machine's dirty limits, as before any lab.
            let _lifted = lab.lab.lifted(&lab.fs);
            let init = server.pgbench(&["-i", "-q", "-s", &scale.to_string()]);
            assert!(
                init.status.success(),
                "pgbench -i: {}",
                String::from_utf8_lossy(&init.stderr)
            );
        }
        PgLab { server, lab }
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

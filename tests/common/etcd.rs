//! A real etcd (Debian's `etcd-server`), one member on loopback, for tests
//! that observe a server none of us wrote. Dropping `Etcd` stops it.

use super::observer::free_port;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub struct Etcd {
    child: Child,
    pub client_port: u16,
    pub data: PathBuf,
}

impl Etcd {
    /// Starts etcd with its data in `data` (created), logging to
    /// `data/../etcd.log`, and waits until `/health` says true.
    pub fn start(data: &Path) -> Etcd {
        let (client, peer) = (free_port(), free_port());
        let url = |p: u16| format!("http://127.0.0.1:{p}");
        let log = std::fs::File::create(data.with_extension("log")).unwrap();
        let child = Command::new("etcd")
            .args(["--name", "idle", "--data-dir"])
            .arg(data)
            .args(["--listen-client-urls", &url(client)])
            .args(["--advertise-client-urls", &url(client)])
            .args(["--listen-peer-urls", &url(peer)])
            .args(["--initial-advertise-peer-urls", &url(peer)])
            .args(["--initial-cluster", &format!("idle={}", url(peer))])
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("start etcd");
        let mut e = Etcd {
            child,
            client_port: client,
            data: data.to_path_buf(),
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        while !e.healthy() {
            if let Ok(Some(st)) = e.child.try_wait() {
                panic!(
                    "etcd exited ({st}): {}",
                    std::fs::read_to_string(data.with_extension("log")).unwrap_or_default()
                );
            }
            assert!(Instant::now() < deadline, "etcd not healthy after 30 s");
            std::thread::sleep(Duration::from_millis(200));
        }
        e
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// GET /health answers `{"health":"true"}`.
    pub fn healthy(&self) -> bool {
        let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", self.client_port)) else {
            return false;
        };
        let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
        let req = "GET /health HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n";
        if s.write_all(req.as_bytes()).is_err() {
            return false;
        }
        let mut body = String::new();
        let _ = s.read_to_string(&mut body);
        body.contains("\"health\":\"true\"")
    }
}

impl Drop for Etcd {
    fn drop(&mut self) {
        // SIGTERM first (etcd closes its WAL), then make sure.
        // SAFETY: kill with a valid pid and signal.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(10);
        while matches!(self.child.try_wait(), Ok(None)) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

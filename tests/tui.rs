//! The dashboard in a real terminal: tmux runs the binary, send-keys types,
//! capture-pane reads the screen. Needs tmux (CI installs it).

mod common;

use common::{have, skip};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

/// A tmux server of the test's own: its socket is in a temp folder, so
/// parallel tests never share (or race to start) the user's default server,
/// and dropping it kills the server and removes the socket.
struct Tmux {
    session: String,
    sock: std::path::PathBuf,
    _dir: tempfile::TempDir,
}

impl Tmux {
    /// Runs `cmd` in a detached `cols`×`rows` session; when it ends the pane
    /// shows `EXIT=<status>`.
    fn start(cmd: &str, cols: u16, rows: u16) -> Tmux {
        let dir = tempfile::tempdir().unwrap();
        let t = Tmux {
            session: "ss-test".into(),
            sock: dir.path().join("tmux"),
            _dir: dir,
        };
        let ok = t
            .tmux()
            .args(["new-session", "-d", "-s", &t.session, "-x"])
            .arg(cols.to_string())
            .arg("-y")
            .arg(rows.to_string())
            .arg(format!("{cmd}; echo EXIT=$?; sleep 30"))
            .env("TERM", "xterm-256color")
            // The server runs commands in $SHELL (else the login shell):
            // sh, not a person's fish or a user's nologin.
            .env("SHELL", "/bin/sh")
            .status()
            .unwrap();
        assert!(ok.success(), "tmux new-session");
        t
    }

    /// `tmux` talking to this server, which reads no ~/.tmux.conf.
    fn tmux(&self) -> Command {
        let mut c = Command::new("tmux");
        c.arg("-S").arg(&self.sock).args(["-f", "/dev/null"]);
        c
    }

    fn keys(&self, keys: &[&str]) {
        let ok = self
            .tmux()
            .args(["send-keys", "-t", &self.session])
            .args(keys)
            .status()
            .unwrap();
        assert!(ok.success());
    }

    fn capture(&self) -> String {
        let out = self
            .tmux()
            .args(["capture-pane", "-p", "-t", &self.session])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Waits until the screen contains `needle`; returns the screen.
    fn wait_for(&self, needle: &str, secs: u64) -> String {
        let t0 = Instant::now();
        loop {
            let s = self.capture();
            if s.contains(needle) {
                return s;
            }
            if t0.elapsed() > Duration::from_secs(secs) {
                panic!("screen never showed {needle:?}; last screen:\n{s}");
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    fn pid(&self) -> i32 {
        let out = self
            .tmux()
            .args(["list-panes", "-t", &self.session, "-F", "#{pane_pid}"])
            .output()
            .unwrap();
        let shell: i32 = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap();
        // The stallscope process is the shell's child.
        let kids = std::fs::read_to_string(format!("/proc/{shell}/task/{shell}/children"))
            .unwrap_or_default();
        kids.split_whitespace()
            .next()
            .and_then(|p| p.parse().ok())
            .unwrap_or(shell)
    }

    /// Ends the server: its panes' terminals close under their programs.
    fn kill_server(&self) {
        let _ = self.tmux().arg("kill-server").output();
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        self.kill_server();
    }
}

fn leftovers(dir: &Path) -> usize {
    std::fs::read_dir(dir)
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .file_name()
                .to_string_lossy()
                .starts_with(".stallscope-")
        })
        .count()
}

fn dashboard_cmd(a: &Path, b: &Path) -> String {
    format!(
        "{} --target {} --target {} --mode mmap --threads 2 --sync none",
        env!("CARGO_BIN_EXE_stallscope"),
        a.display(),
        b.display()
    )
}

#[test]
fn keys_switch_target_and_mode_then_quit_cleanly() {
    if !have("tmux") {
        skip(
            "keys_switch_target_and_mode_then_quit_cleanly",
            "tmux is not installed",
        );
        return;
    }
    let a = tempfile::tempdir_in("/dev/shm").unwrap();
    let b = tempfile::tempdir_in("/dev/shm").unwrap();
    let t = Tmux::start(&dashboard_cmd(a.path(), b.path()), 120, 40);
    let s = t.wait_for("1/2", 15);
    assert!(
        s.contains(&a.path().display().to_string()),
        "header shows target 1:\n{s}"
    );
    assert!(s.contains("mmap"), "{s}");
    t.keys(&["Tab"]);
    let s = t.wait_for("2/2", 10);
    assert!(
        s.contains(&b.path().display().to_string()),
        "header shows target 2:\n{s}"
    );
    t.keys(&["m"]);
    let s = t.wait_for("buffered", 10);
    assert!(s.contains("2/2"), "{s}");
    t.keys(&["+"]);
    t.wait_for("× 3", 10);
    t.keys(&["?"]);
    let s = t.wait_for("next target", 10);
    assert!(s.contains("quit"), "help lists the keys:\n{s}");
    t.keys(&["Escape"]);
    // A key right after Esc would read as Alt+key; a person pauses.
    std::thread::sleep(Duration::from_millis(400));
    let s = t.capture();
    assert!(!s.contains("next target"), "Esc closed the help:\n{s}");
    t.keys(&["q"]);
    t.wait_for("EXIT=0", 20);
    assert_eq!(
        leftovers(a.path()) + leftovers(b.path()),
        0,
        "scratch removed"
    );
}

#[test]
fn sighup_restores_and_cleans_up() {
    if !have("tmux") {
        skip("sighup_restores_and_cleans_up", "tmux is not installed");
        return;
    }
    let a = tempfile::tempdir_in("/dev/shm").unwrap();
    let b = tempfile::tempdir_in("/dev/shm").unwrap();
    let t = Tmux::start(&dashboard_cmd(a.path(), b.path()), 100, 30);
    t.wait_for("1/2", 15);
    let pid = t.pid();
    // SAFETY: signalling the child we started.
    unsafe { libc::kill(pid, libc::SIGHUP) };
    let s = t.wait_for("EXIT=", 20);
    assert!(s.contains("EXIT=0"), "clean exit on SIGHUP:\n{s}");
    assert_eq!(
        leftovers(a.path()) + leftovers(b.path()),
        0,
        "scratch removed"
    );
}

#[test]
fn tiny_terminal_and_resize_do_not_crash() {
    if !have("tmux") {
        skip(
            "tiny_terminal_and_resize_do_not_crash",
            "tmux is not installed",
        );
        return;
    }
    let a = tempfile::tempdir_in("/dev/shm").unwrap();
    let b = tempfile::tempdir_in("/dev/shm").unwrap();
    let t = Tmux::start(&dashboard_cmd(a.path(), b.path()), 80, 24);
    t.wait_for("1/2", 15);
    for (w, h) in [(20, 5), (200, 50), (80, 24)] {
        let ok = t
            .tmux()
            .args([
                "resize-window",
                "-t",
                &t.session,
                "-x",
                &w.to_string(),
                "-y",
                &h.to_string(),
            ])
            .status()
            .unwrap();
        assert!(ok.success());
        std::thread::sleep(Duration::from_millis(1500));
        assert!(!t.capture().contains("EXIT="), "still running at {w}x{h}");
    }
    t.keys(&["q"]);
    t.wait_for("EXIT=0", 20);
}

#[test]
fn r_key_records_a_replayable_session_with_markers() {
    if !have("tmux") {
        skip(
            "r_key_records_a_replayable_session_with_markers",
            "tmux is not installed",
        );
        return;
    }
    let a = tempfile::tempdir_in("/dev/shm").unwrap();
    let b = tempfile::tempdir_in("/dev/shm").unwrap();
    let cwd = tempfile::tempdir().unwrap();
    let cmd = format!(
        "cd {} && {}",
        cwd.path().display(),
        dashboard_cmd(a.path(), b.path())
    );
    let t = Tmux::start(&cmd, 120, 40);
    t.wait_for("1/2", 15);
    t.keys(&["r"]);
    t.wait_for("recording to", 10);
    std::thread::sleep(Duration::from_millis(2500));
    t.keys(&["Tab"]);
    t.wait_for("2/2", 10);
    std::thread::sleep(Duration::from_millis(2500));
    t.keys(&["r"]);
    t.wait_for("recording saved", 10);
    t.keys(&["q"]);
    t.wait_for("EXIT=0", 20);
    let files: Vec<_> = std::fs::read_dir(cwd.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(files.len(), 1, "{files:?}");
    let rec = stallscope::sink::recording::read(&files[0]).unwrap();
    assert!(
        rec.snapshots.len() >= 3,
        "{} intervals",
        rec.snapshots.len()
    );
    let kinds: Vec<&str> = rec.markers.iter().map(|m| m.kind.as_str()).collect();
    assert_eq!(
        kinds,
        ["recording_start", "target_switch", "recording_stop"]
    );
}

/// A dropped SSH link: the terminal goes away under the dashboard (its pty
/// closes, SIGHUP arrives, writes to the tty fail). Killing a private tmux
/// server does exactly that; stallscope must exit and leave nothing behind.
#[test]
fn a_vanished_terminal_like_a_dropped_ssh_link_leaves_nothing_behind() {
    if !have("tmux") {
        skip(
            "a_vanished_terminal_like_a_dropped_ssh_link_leaves_nothing_behind",
            "tmux is not installed",
        );
        return;
    }
    let a = tempfile::tempdir_in("/dev/shm").unwrap();
    let b = tempfile::tempdir_in("/dev/shm").unwrap();
    let t = Tmux::start(&dashboard_cmd(a.path(), b.path()), 100, 30);
    t.wait_for("1/2", 15);
    let pid = t.pid();
    let comm = |p: i32| std::fs::read_to_string(format!("/proc/{p}/comm")).unwrap_or_default();
    assert_eq!(comm(pid).trim(), "stallscope");
    t.kill_server();
    let t0 = Instant::now();
    while Path::new(&format!("/proc/{pid}")).exists() && !comm(pid).is_empty() {
        let state = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        if state.contains(") Z ") {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "stallscope still running 20 s after its terminal vanished"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(
        leftovers(a.path()) + leftovers(b.path()),
        0,
        "scratch removed after the terminal vanished"
    );
}

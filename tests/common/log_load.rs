//! A small log writer in C, compiled by the test with `cc`: in a loop
//! until killed, `write()` 4 MiB, `write()` 4 MiB, `fdatasync`,
//! `fdatasync` (back to back) on one file, rewound and truncated every
//! 64 MiB. Beside it, load on the same filesystem: a `dd` writer in a
//! loop (its flags chosen by the test: buffered, or `oflag=direct`), and
//! the CPUs kept busy by spinning processes. Dropping it kills every child
//! (each runs in its own process group) and removes its files.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

const SOURCE: &str = r#"
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void spin(void) {
    volatile unsigned long n = 0;
    for (;;) n++;
}

static void write_all(int fd, const char *b, size_t n) {
    while (n > 0) {
        ssize_t w = write(fd, b, n);
        if (w < 0) {
            if (errno == EINTR) continue;
            perror("write");
            exit(1);
        }
        b += w;
        n -= (size_t)w;
    }
}

int main(int argc, char **argv) {
    if (argc == 2 && strcmp(argv[1], "spin") == 0) spin();
    if (argc != 3 || strcmp(argv[1], "log") != 0) {
        fprintf(stderr, "usage: logwriter log FILE | logwriter spin\n");
        return 2;
    }
    int fd = open(argv[2], O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) { perror("open"); return 1; }
    size_t chunk = 4u << 20;
    char *buf = malloc(chunk);
    memset(buf, 'l', chunk);
    unsigned long long written = 0;
    for (;;) {
        write_all(fd, buf, chunk);
        write_all(fd, buf, chunk);
        if (fdatasync(fd) < 0) { perror("fdatasync"); return 1; }
        if (fdatasync(fd) < 0) { perror("fdatasync"); return 1; }
        written += 2 * chunk;
        if (written >= (64ull << 20)) {
            if (ftruncate(fd, 0) < 0 || lseek(fd, 0, SEEK_SET) < 0) {
                perror("rewind");
                return 1;
            }
            written = 0;
        }
    }
}
"#;

pub struct LogLoad {
    /// The log writer (single-threaded: its pid is its only tid).
    pub writer: Child,
    others: Vec<Child>,
    dir: PathBuf,
    _bin: tempfile::TempDir,
}

impl LogLoad {
    /// Compiles the writer and starts it, the dd loop (`dd_mib` MiB per
    /// pass, with `dd_flags` such as `conv=notrunc` or `oflag=direct`) and
    /// `spinners` busy processes, all writing in `dir/stallscope-log-load`
    /// (created, removed on drop). With `prealloc`, dd's file is first
    /// allocated in full (fallocate), so that its buffered overwrites are
    /// not new blocks.
    pub fn start(
        dir: &Path,
        dd_mib: u64,
        dd_flags: &str,
        prealloc: bool,
        spinners: usize,
    ) -> LogLoad {
        let bin = tempfile::tempdir().unwrap();
        let src = bin.path().join("logwriter.c");
        let exe = bin.path().join("logwriter");
        std::fs::write(&src, SOURCE).unwrap();
        let out = Command::new("cc")
            .args(["-O2", "-Wall", "-o"])
            .arg(&exe)
            .arg(&src)
            .output()
            .expect("run cc");
        assert!(
            out.status.success(),
            "cc logwriter.c: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let dir = dir.join("stallscope-log-load");
        std::fs::create_dir_all(&dir).unwrap();
        let spawn = |c: &mut Command| {
            c.stdin(Stdio::null())
                .stdout(Stdio::null())
                .process_group(0)
                .spawn()
                .expect("start load")
        };
        let writer = spawn(Command::new(&exe).arg("log").arg(dir.join("log")));
        let mut others = Vec::new();
        let ddfile = dir.join("dd");
        if prealloc {
            let f = std::fs::File::create(&ddfile).unwrap();
            // SAFETY: fallocate(2) on a file we own, mode 0.
            let rc = unsafe {
                libc::fallocate(
                    std::os::fd::AsRawFd::as_raw_fd(&f),
                    0,
                    0,
                    (dd_mib << 20) as libc::off_t,
                )
            };
            assert_eq!(rc, 0, "fallocate {}", ddfile.display());
        }
        let dd = format!(
            "while :; do dd if=/dev/zero of='{}' bs=1M count={dd_mib} {dd_flags} status=none; done",
            ddfile.display()
        );
        others.push(spawn(Command::new("sh").args(["-c", &dd])));
        for _ in 0..spinners {
            others.push(spawn(Command::new(&exe).arg("spin")));
        }
        LogLoad {
            writer,
            others,
            dir,
            _bin: bin,
        }
    }

    pub fn writer_pid(&self) -> u32 {
        self.writer.id()
    }
}

impl Drop for LogLoad {
    fn drop(&mut self) {
        for c in std::iter::once(&mut self.writer).chain(self.others.iter_mut()) {
            // SAFETY: kill(2) of the process group of our own child.
            unsafe { libc::kill(-(c.id() as i32), libc::SIGKILL) };
            let _ = c.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

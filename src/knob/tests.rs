//! The registry over a temp dir, with plain files standing in for the
//! kernel's. Live owners are labs (a temp dir with a state file) and this
//! process; a dead one is a child we spawned and waited for.

use super::owner::LAB_STATE_FILE;
use super::*;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

struct Fixture {
    t: tempfile::TempDir,
    reg: Registry,
}

fn fixture() -> Fixture {
    let t = tempfile::tempdir().unwrap();
    let reg = Registry::at(t.path().join("run"));
    Fixture { t, reg }
}

impl Fixture {
    /// A plain file standing in for a knob's, with `text`.
    fn knob(&self, name: &str, text: &str) -> (Knob, PathBuf) {
        let p = self.t.path().join(name);
        std::fs::write(&p, format!("{text}\n")).unwrap();
        (Knob::file(&p), p)
    }

    /// A live lab: a folder with a state file.
    fn lab(&self, name: &str) -> (Owner, PathBuf) {
        let d = self.t.path().join(name);
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join(LAB_STATE_FILE), "{}").unwrap();
        (Owner::lab(&d), d)
    }

    fn entries(&self) -> Vec<Entry> {
        self.reg.entries().unwrap()
    }
}

fn text(v: &str) -> Value {
    Value::Text(v.into())
}

fn read(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap().trim().to_string()
}

/// A running child and its owner; `end` makes it a dead one.
fn child() -> (Owner, std::process::Child) {
    let child = Command::new("sleep").arg("30").spawn().unwrap();
    let owner = Owner::process(child.id()).expect("running");
    assert!(owner.alive());
    (owner, child)
}

fn end(mut child: std::process::Child) {
    child.kill().unwrap();
    child.wait().unwrap();
}

#[test]
fn holds_stack_and_the_original_comes_back_last() {
    let f = fixture();
    let (k, p) = f.knob("stable_writes", "0");
    let (a, _) = f.lab("a");
    let (b, _) = f.lab("b");
    f.reg.set(&k, &text("1"), &a, "lab up --dir a").unwrap();
    f.reg.set(&k, &text("2"), &b, "lab up --dir b").unwrap();
    assert_eq!(read(&p), "2");
    let e = f.entries();
    assert_eq!(e.len(), 1);
    assert_eq!(e[0].original, text("0"), "read by the first claimant");
    assert_eq!(e[0].holds.len(), 2);
    f.reg.release(&k, &a).unwrap();
    assert_eq!(read(&p), "2", "B's value stays");
    f.reg.release(&k, &a).unwrap();
    assert_eq!(read(&p), "2", "a second release changes nothing");
    f.reg.release(&k, &b).unwrap();
    assert_eq!(read(&p), "0", "the original");
    assert!(f.entries().is_empty(), "the entry goes with its last hold");
}

#[test]
fn releasing_the_top_writes_the_hold_below_not_the_original() {
    let f = fixture();
    let (k, p) = f.knob("k", "orig");
    let (a, _) = f.lab("a");
    let (b, _) = f.lab("b");
    f.reg.set(&k, &text("a"), &a, "a").unwrap();
    f.reg.set(&k, &text("b"), &b, "b").unwrap();
    f.reg.release(&k, &b).unwrap();
    assert_eq!(read(&p), "a", "A is alive: its value is written back");
    // A setting again replaces its own hold, on top.
    f.reg.set(&k, &text("b"), &b, "b").unwrap();
    f.reg.set(&k, &text("a2"), &a, "a").unwrap();
    assert_eq!(f.entries()[0].holds.len(), 2);
    f.reg.release_all(&a).unwrap();
    assert_eq!(read(&p), "b");
    f.reg.release_all(&b).unwrap();
    assert_eq!(read(&p), "orig");
}

#[test]
fn a_dead_process_and_a_removed_lab_are_put_back() {
    let f = fixture();
    let (k, p) = f.knob("strict_limit", "0");
    let (k2, p2) = f.knob("max_ratio", "100");
    let (trial, c) = child();
    let (lab, dir) = f.lab("lab");
    f.reg.set(&k, &text("1"), &trial, "trial pid x").unwrap();
    f.reg.set(&k2, &text("5"), &lab, "lab up").unwrap();
    assert!(f.reg.recover().unwrap().is_empty(), "both alive");
    assert_eq!((read(&p), read(&p2)), ("1".into(), "5".into()));
    let Owner::Process { pid, .. } = trial else {
        unreachable!()
    };
    end(c);
    std::fs::remove_file(dir.join(LAB_STATE_FILE)).unwrap();
    let lines = f.reg.recover().unwrap();
    assert_eq!(read(&p), "0");
    assert_eq!(read(&p2), "100");
    assert_eq!(lines.len(), 2, "{lines:?}");
    assert!(
        lines[0].ends_with(&format!(
            "strict_limit=0, left by pid {pid}, which exited (trial pid x)"
        )),
        "{lines:?}"
    );
    assert!(
        lines[1].contains("max_ratio=100, left by the lab at")
            && lines[1].ends_with("whose state file is gone (lab up)"),
        "{lines:?}"
    );
    assert!(f.entries().is_empty());
    assert!(f.reg.recover().unwrap().is_empty(), "once");
}

#[test]
fn a_live_owner_is_never_undone_by_a_dead_ones_recovery() {
    let f = fixture();
    let (k, p) = f.knob("k", "orig");
    let (a, _) = f.lab("a");
    // A dead one under the live one: nothing to write.
    let (under, c) = child();
    f.reg.set(&k, &text("dead"), &under, "trial").unwrap();
    f.reg.set(&k, &text("a"), &a, "a").unwrap();
    end(c);
    assert!(f.reg.recover().unwrap().is_empty());
    assert_eq!(read(&p), "a");
    assert_eq!(f.entries()[0].holds.len(), 1);
    assert_eq!(f.entries()[0].original, text("orig"));
    // A dead one on top: the live one's value comes back, not the original.
    let (over, c) = child();
    f.reg.set(&k, &text("dead"), &over, "trial").unwrap();
    end(c);
    let lines = f.reg.recover().unwrap();
    assert_eq!(read(&p), "a", "{lines:?}");
    assert_eq!(lines.len(), 1, "{lines:?}");
    // A set recovers first too.
    let (over, c) = child();
    f.reg.set(&k, &text("dead"), &over, "trial").unwrap();
    end(c);
    let (b, _) = f.lab("b");
    f.reg.set(&k, &text("b"), &b, "b").unwrap();
    assert_eq!(f.entries()[0].holds.len(), 2, "a and b");
    f.reg.release(&k, &b).unwrap();
    assert_eq!(read(&p), "a");
}

#[test]
fn the_hold_is_saved_before_the_knob_is_written() {
    let f = fixture();
    let (k, p) = f.knob("max_ratio_fine", "1000000");
    let fifo = f.t.path().join("max_bytes");
    let made = Command::new("mkfifo").arg(&fifo).status().unwrap();
    assert!(made.success());
    let (lab, _) = f.lab("lab");
    let (reg, k2, fifo2, lab2) = (f.reg.clone(), k.clone(), fifo.clone(), lab.clone());
    // The write to the fifo blocks until it is read: the registry as it
    // is then is the registry before the write.
    let writer = std::thread::spawn(move || {
        let v = Value::Via {
            file: fifo2,
            text: "33554432".into(),
        };
        reg.set(&k2, &v, &lab2, "trial").unwrap();
    });
    let t0 = std::time::Instant::now();
    let saved = loop {
        let s = std::fs::read_to_string(f.reg.file()).unwrap_or_default();
        if s.contains("33554432") {
            break s;
        }
        assert!(t0.elapsed() < Duration::from_secs(10), "never saved");
        std::thread::sleep(Duration::from_millis(5));
    };
    assert!(saved.contains("1000000"), "with the original: {saved}");
    assert!(!writer.is_finished(), "the knob not written yet");
    assert_eq!(std::fs::read_to_string(&fifo).unwrap(), "33554432");
    writer.join().unwrap();
    assert_eq!(read(&p), "1000000", "written through the other file");
    f.reg.release(&k, &lab).unwrap();
    assert_eq!(read(&p), "1000000");
}

#[test]
fn a_failed_write_takes_the_hold_out_again() {
    let f = fixture();
    let (k, p) = f.knob("k", "orig");
    let (a, _) = f.lab("a");
    let (b, _) = f.lab("b");
    f.reg.set(&k, &text("a"), &a, "a").unwrap();
    let nowhere = Value::Via {
        file: f.t.path().join("no/such/file"),
        text: "x".into(),
    };
    let e = f.reg.set(&k, &nowhere, &b, "b").unwrap_err();
    assert!(format!("{e:#}").contains("no/such/file"), "{e:#}");
    let st = f.entries();
    assert_eq!(st[0].holds.len(), 1, "{st:?}");
    assert_eq!(st[0].holds[0].owner, a);
    assert_eq!(read(&p), "a");
    // A first claimant's failed write leaves no entry.
    let (k2, _) = f.knob("k2", "orig2");
    let _ = f.reg.set(&k2, &nowhere, &b, "b").unwrap_err();
    assert_eq!(f.entries().len(), 1);
}

/// flock locks belong to an open file: a second open, in another thread,
/// waits for the first to close, as another process would.
#[test]
fn every_operation_waits_for_the_lock() {
    let f = fixture();
    let (k, p) = f.knob("k", "orig");
    let (a, _) = f.lab("a");
    let held = f.reg.lock().unwrap();
    let (reg, k2) = (f.reg.clone(), k.clone());
    let setter = std::thread::spawn(move || reg.set(&k2, &text("a"), &a, "a").unwrap());
    std::thread::sleep(Duration::from_millis(300));
    assert!(!setter.is_finished(), "set waits for the lock");
    assert_eq!(read(&p), "orig");
    drop(held);
    setter.join().unwrap();
    assert_eq!(read(&p), "a");
    // And another process's lock (flock(1)) holds it off too.
    if Command::new("flock").arg("-V").output().is_ok() {
        let lock = f.reg.dir().join("knobs.lock");
        let mut other = Command::new("flock")
            .arg(&lock)
            .args(["-c", "sleep 0.5"])
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(100));
        let t0 = std::time::Instant::now();
        f.reg.recover().unwrap();
        assert!(t0.elapsed() >= Duration::from_millis(200), "waited");
        other.wait().unwrap();
    }
}

#[test]
fn each_kind_reads_and_writes_its_file() {
    let f = fixture();
    let vm = f.t.path().join("vm");
    std::fs::create_dir_all(&vm).unwrap();
    for (n, v) in [
        ("dirty_bytes", "0"),
        ("dirty_ratio", "20"),
        ("dirty_background_bytes", "0"),
        ("dirty_background_ratio", "10"),
    ] {
        std::fs::write(vm.join(n), format!("{v}\n")).unwrap();
    }
    let dirty = Knob::Dirty { dir: vm.clone() };
    let Value::Dirty(d) = dirty.read().unwrap() else {
        panic!()
    };
    assert_eq!(
        d.describe(),
        "vm.dirty_ratio=20 vm.dirty_background_ratio=10"
    );
    let lower = d.with("vm.dirty_bytes", 256 << 20).unwrap();
    assert_eq!((lower.dirty_bytes, lower.dirty_ratio), (256 << 20, 0));
    assert_eq!(d.with("vm.swappiness", 1), None);
    dirty.write(&Value::Dirty(lower)).unwrap();
    assert_eq!(read(&vm.join("dirty_bytes")), "268435456");
    assert_eq!(read(&vm.join("dirty_background_ratio")), "10");
    assert_eq!(Knob::sysctl("vm.dirty_background_bytes"), Knob::dirty());
    assert_eq!(
        Knob::sysctl("vm.dirty_expire_centisecs").name(),
        "vm.dirty_expire_centisecs"
    );
    let throttle = f.t.path().join("blkio.throttle.write_bps_device");
    std::fs::write(&throttle, "7:0 52428800\n7:3 1000\n").unwrap();
    let blkio = Knob::Blkio {
        file: throttle.clone(),
        major: 7,
        minor: 3,
    };
    assert_eq!(blkio.read().unwrap(), Value::Bps(1000));
    blkio.write(&Value::Bps(0)).unwrap();
    assert_eq!(read(&throttle), "7:3 0");
    assert_eq!(
        blkio.show(&Value::Bps(20 << 20)),
        "blkio write cap on 7:3=20MiB/s"
    );
    let sub = f.t.path().join("cgroup.subtree_control");
    std::fs::write(&sub, "memory pids\n").unwrap();
    let io = Knob::controller(&sub, "io");
    assert_eq!(io.read().unwrap(), Value::On(false));
    assert_eq!(
        Knob::controller(&sub, "memory").read().unwrap(),
        Value::On(true)
    );
    io.write(&Value::On(true)).unwrap();
    assert_eq!(read(&sub), "+io");
    io.write(&Value::On(false)).unwrap();
    assert_eq!(read(&sub), "-io");
    assert!(io.write(&Value::Bps(1)).is_err(), "a value of another kind");
}

#[test]
fn owners_are_alive_while_their_process_or_state_file_is() {
    let me = Owner::this_process();
    assert!(me.alive());
    let Owner::Process { pid, start } = me else {
        unreachable!()
    };
    assert_eq!(pid, std::process::id());
    let reused = Owner::Process {
        pid,
        start: start + 1,
    };
    assert!(
        !reused.alive(),
        "a pid with another start time is another process"
    );
    let (gone, c) = child();
    end(c);
    assert!(!gone.alive());
    let f = fixture();
    let (lab, dir) = f.lab("x");
    assert!(lab.alive());
    assert_eq!(Owner::lab(&dir.join("../x")), lab, "one lab, one owner");
    std::fs::remove_file(dir.join(LAB_STATE_FILE)).unwrap();
    assert!(!lab.alive());
}

#[test]
fn no_registry_means_nothing_held() {
    let f = fixture();
    assert!(f.reg.recover().unwrap().is_empty());
    assert!(f.entries().is_empty());
    let (k, _) = f.knob("k", "v");
    f.reg.release(&k, &Owner::this_process()).unwrap();
    assert!(
        !f.reg.dir().exists(),
        "nothing made for a release or a read"
    );
}

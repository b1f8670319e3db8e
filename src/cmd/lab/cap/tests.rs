use super::*;
use crate::cmd::lab::down::undo_step;
use crate::knob::Registry;

fn cgroups(mountinfo: &str) -> Cgroups {
    Cgroups::parse(mountinfo)
}

const HYBRID: &str = "\
35 31 0:32 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory
38 31 0:35 / /sys/fs/cgroup/blkio rw - cgroup cgroup rw,blkio
41 31 0:38 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw
";
const UNIFIED: &str = "30 22 0:26 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw,nsdelegate\n";
const HYBRID_IO_ON_V2: &str = "\
35 31 0:32 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory
41 31 0:38 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw
";

#[test]
fn v1_blkio_first_then_v2_io_and_why_not() {
    assert_eq!(
        choose(&cgroups(HYBRID), ""),
        Ok(CapMethod::V1 {
            file: "/sys/fs/cgroup/blkio/blkio.throttle.write_bps_device".into()
        })
    );
    assert_eq!(
        choose(
            &cgroups(UNIFIED),
            "cpuset cpu io memory hugetlb pids rdma misc\n"
        ),
        Ok(CapMethod::V2 {
            root: "/sys/fs/cgroup".into(),
            writeback: true
        })
    );
    assert_eq!(
        choose(&cgroups(HYBRID_IO_ON_V2), "io"),
        Ok(CapMethod::V2 {
            root: "/sys/fs/cgroup/unified".into(),
            writeback: false
        }),
        "memory on v1: no cgroup writeback"
    );
    let e = choose(&cgroups(UNIFIED), "cpu memory pids").unwrap_err();
    assert!(e.contains("no io controller"), "{e}");
    assert!(choose(&cgroups(""), "").is_err());
}

#[test]
fn warnings_say_what_the_cap_leaves_out() {
    let fs = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let v1 = CapMethod::V1 { file: "/x".into() };
    assert!(writeback_warnings(&v1, &fs(&["xfs"]), (4, 18)).is_empty());
    let v2 = |writeback| CapMethod::V2 {
        root: "/sys/fs/cgroup".into(),
        writeback,
    };
    assert!(writeback_warnings(&v2(true), &fs(&["ext4", "xfs", "btrfs"]), (6, 1)).is_empty());
    let old = writeback_warnings(&v2(true), &fs(&["ext4", "xfs"]), (4, 19));
    assert_eq!(old.len(), 1);
    assert!(old[0].starts_with("xfs on kernel 4.19"), "{old:?}");
    let hybrid = writeback_warnings(&v2(false), &fs(&["ext4"]), (6, 1));
    assert!(hybrid[0].contains("not capped"), "{hybrid:?}");
}

#[test]
fn controllers_held_are_io_and_memory_where_available() {
    assert_eq!(wanted_controllers("cpu io memory pids"), ["io", "memory"]);
    assert_eq!(wanted_controllers("cpu io pids\n"), ["io"]);
    assert!(wanted_controllers("cpu pids").is_empty());
    assert_eq!(
        subtree_text('-', &["io".into(), "memory".into()]),
        "-io -memory"
    );
}

/// A fake v2 root like Debian 12's: root passes memory and pids down.
fn fake_root() -> (tempfile::TempDir, PathBuf, PathBuf) {
    let t = tempfile::tempdir().unwrap();
    let root = t.path().join("cg");
    std::fs::create_dir_all(&root).unwrap();
    std::fs::write(
        root.join("cgroup.controllers"),
        "cpuset cpu io memory pids\n",
    )
    .unwrap();
    std::fs::write(root.join("cgroup.subtree_control"), "memory pids\n").unwrap();
    let dir = t.path().join("lab");
    std::fs::create_dir_all(&dir).unwrap();
    (t, root, dir)
}

#[test]
fn v2_cap_steps_on_a_fake_root_are_recorded_first_and_undone() {
    let (t, root, dir) = fake_root();
    let sub = root.join("cgroup.subtree_control");
    // Neither on: a plain file keeps only the last write, so a second
    // controller's original read after the first's write would be wrong.
    std::fs::write(&sub, "pids\n").unwrap();
    let knobs = Registry::at(t.path().join("run"));
    let by = Claimant::lab(&knobs, &dir);
    let mut st = LabState::default();
    let g = ensure_group(&root, &dir, &mut st, &by).unwrap();
    assert_eq!(g, root.join(LAB_GROUP));
    assert!(g.is_dir());
    // The fake file keeps the last write: io's, then memory's.
    assert_eq!(std::fs::read_to_string(&sub).unwrap(), "+memory");
    let held = knobs.entries().unwrap();
    assert_eq!(held.len(), 2, "io and memory, each held by the lab");
    assert_eq!(held[0].knob, crate::knob::Knob::controller(&sub, "io"));
    assert_eq!(held[0].original, crate::knob::Value::On(false));
    cap_v2(&g, &dir, &mut st, (7, 3), 20 << 20).unwrap();
    assert_eq!(
        ensure_group(&root, &dir, &mut st, &by).unwrap(),
        g,
        "made once"
    );
    cap_v2(&g, &dir, &mut st, (7, 4), 20 << 20).unwrap();
    assert_eq!(
        std::fs::read_to_string(g.join("io.max")).unwrap(),
        "7:4 wbps=20971520"
    );
    assert_eq!(
        st.steps,
        [
            Step::Subtree {
                file: sub.clone(),
                original: "pids".into(),
                added: vec!["io".into(), "memory".into()],
                registered: true,
            },
            Step::Cgroup { path: g.clone() },
            Step::IoMax {
                file: g.join("io.max"),
                major: 7,
                minor: 3,
                original: None
            },
            Step::IoMax {
                file: g.join("io.max"),
                major: 7,
                minor: 4,
                original: None
            },
        ]
    );
    assert_eq!(LabState::load(&dir).unwrap().as_ref(), Some(&st), "saved");
    let none = HashMap::new();
    let proc = Path::new("/nonexistent");
    undo_v2(&st.steps[3], proc, &none).unwrap().unwrap();
    assert_eq!(
        std::fs::read_to_string(g.join("io.max")).unwrap(),
        "7:4 wbps=max"
    );
    assert!(
        undo_v2(&st.steps[0], proc, &none).is_none(),
        "held: released"
    );
    undo_step(&st.steps[0], false, &none, (&knobs, &by.owner)).unwrap();
    assert_eq!(
        std::fs::read_to_string(&sub).unwrap(),
        "-memory",
        "off again"
    );
    assert!(knobs.entries().unwrap().is_empty());
    assert!(undo_v2(&Step::Image { path: "/x".into() }, proc, &none).is_none());
    // A step of an older build disables what it added.
    let old = Step::Subtree {
        file: sub.clone(),
        original: "memory pids".into(),
        added: vec!["io".into()],
        registered: false,
    };
    undo_v2(&old, proc, &none).unwrap().unwrap();
    assert_eq!(std::fs::read_to_string(&sub).unwrap(), "-io");
}

/// Two v2 labs: the second's `up` fails (the group is the first's) and
/// its undo releases io, which the first still holds: io stays on.
#[test]
fn a_second_labs_undo_leaves_the_first_ones_controller_on() {
    let (t, root, dir) = fake_root();
    std::fs::write(root.join("cgroup.controllers"), "io\n").unwrap();
    let sub = root.join("cgroup.subtree_control");
    std::fs::write(&sub, "\n").unwrap();
    let knobs = Registry::at(t.path().join("run"));
    let first = Claimant::lab(&knobs, &dir);
    let mut st = LabState::default();
    ensure_group(&root, &dir, &mut st, &first).unwrap();
    let dir_b = t.path().join("lab-b");
    std::fs::create_dir_all(&dir_b).unwrap();
    let second = Claimant::lab(&knobs, &dir_b);
    let mut st_b = LabState::default();
    let e = ensure_group(&root, &dir_b, &mut st_b, &second).unwrap_err();
    assert!(e.to_string().contains("mkdir"), "{e}");
    let none = HashMap::new();
    undo_step(&st_b.steps[0], false, &none, (&knobs, &second.owner)).unwrap();
    assert_eq!(std::fs::read_to_string(&sub).unwrap(), "+io", "the first's");
    undo_step(&st.steps[0], false, &none, (&knobs, &first.owner)).unwrap();
    assert_eq!(
        std::fs::read_to_string(&sub).unwrap(),
        "-io",
        "the original"
    );
}

#[test]
fn the_group_is_emptied_into_recorded_origins_else_the_root() {
    let (t, root, _) = fake_root();
    let g = root.join(LAB_GROUP);
    let scope = root.join("user.slice/session-1.scope");
    std::fs::create_dir_all(&g).unwrap();
    std::fs::create_dir_all(&scope).unwrap();
    std::fs::write(scope.join("cgroup.procs"), "").unwrap();
    std::fs::write(root.join("cgroup.procs"), "").unwrap();
    // 50 was adopted from the scope; 51 is its child, born in the group;
    // 60 was put there by someone else.
    std::fs::write(g.join("cgroup.procs"), "50\n51\n60\n").unwrap();
    let proc = t.path().join("proc");
    for (pid, ppid) in [(50, 1), (51, 50), (60, 1)] {
        std::fs::create_dir_all(proc.join(pid.to_string())).unwrap();
        std::fs::write(
            proc.join(format!("{pid}/stat")),
            format!("{pid} (p) S {ppid} 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 99 1 1 1"),
        )
        .unwrap();
    }
    let moved = HashMap::from([(50, scope.clone())]);
    assert_eq!(evacuate(&g, &proc, &moved).unwrap(), 3);
    // The fake files keep the last pid written to them.
    assert_eq!(
        std::fs::read_to_string(scope.join("cgroup.procs")).unwrap(),
        "51"
    );
    assert_eq!(
        std::fs::read_to_string(root.join("cgroup.procs")).unwrap(),
        "60"
    );
}

#[test]
fn systemd_hint_names_each_device() {
    let h = systemd_hint(&["/dev/loop0".into(), "/dev/loop1".into()], 20 << 20);
    assert!(h.contains(
        "systemctl set-property --runtime UNIT IOWriteBandwidthMax=\"/dev/loop0 20M\" IOWriteBandwidthMax=\"/dev/loop1 20M\""
    ), "{h}");
    assert!(h.contains("systemd-run --scope -p IOWriteBandwidthMax=\"/dev/loop0 20M\" -p IOWriteBandwidthMax=\"/dev/loop1 20M\" CMD"), "{h}");
    assert!(systemd_hint(&["/dev/loop0".into()], 1000).contains("\"/dev/loop0 1000\""));
}

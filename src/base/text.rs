//! Text for people: paths fitted into a width (they keep their end, the
//! informative part, cut at a `/` so no component is half shown), counted
//! nouns, local date-times for file names.

/// "1 thread", "4 threads".
pub fn count(n: u64, noun: &str) -> String {
    if n == 1 {
        format!("1 {noun}")
    } else {
        format!("{n} {noun}s")
    }
}

/// The local date and time as `2026-12-03_23-50-12`, for file names.
pub fn local_stamp() -> String {
    // SAFETY: time(NULL) and localtime_r into a zeroed tm have no other
    // preconditions.
    let tm = unsafe {
        let t = libc::time(std::ptr::null_mut());
        let mut tm: libc::tm = std::mem::zeroed();
        libc::localtime_r(&t, &mut tm);
        tm
    };
    format!(
        "{:04}-{:02}-{:02}_{:02}-{:02}-{:02}",
        tm.tm_year + 1900,
        tm.tm_mon + 1,
        tm.tm_mday,
        tm.tm_hour,
        tm.tm_min,
        tm.tm_sec
    )
}

/// `path` in at most `max` characters: whole, or "…/" and the longest run
/// of its last components that fits; a last component longer than the
/// room is cut from its left. Widths are in characters.
pub fn elide_path(path: &str, max: usize) -> String {
    let n = path.chars().count();
    if n <= max {
        return path.to_string();
    }
    if max <= 1 {
        return "…".chars().take(max).collect();
    }
    // Try the suffixes that start at a '/', longest first.
    for (i, _) in path.match_indices('/') {
        let tail = &path[i..];
        if tail.chars().count() < max {
            return format!("…{tail}");
        }
    }
    let tail: Vec<char> = path.chars().collect();
    let keep = max - 1;
    format!("…{}", tail[n - keep..].iter().collect::<String>())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_and_stamps() {
        assert_eq!(count(1, "thread"), "1 thread");
        assert_eq!(count(4, "thread"), "4 threads");
        let st = local_stamp();
        assert_eq!(st.len(), 19, "{st}");
        assert!(st.starts_with("20") && st.as_bytes()[10] == b'_', "{st}");
    }

    #[test]
    fn paths_keep_whole_last_components() {
        assert_eq!(elide_path("/tmp/x", 20), "/tmp/x");
        assert_eq!(
            elide_path("/var/tmp/stallscope-lab/mnt/ext4", 20),
            "…/mnt/ext4"
        );
        assert_eq!(elide_path("/tmp/newcomer/ctrlc", 18), "…/newcomer/ctrlc");
        assert_eq!(elide_path("/a/averyveryverylongname", 10), "…ylongname");
        for max in 0..40 {
            let e = elide_path("/var/tmp/stallscope-lab/mnt/ext4", max);
            assert!(e.chars().count() <= max, "{max}: {e}");
        }
    }
}

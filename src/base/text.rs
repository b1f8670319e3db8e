//! Fitting text into a width: paths keep their end (the informative part),
//! cut at a `/` so no component is half shown.

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

//! Text for people: paths fitted into a width (they keep their end, the
//! informative part, cut at a `/` so no component is half shown), text cut
//! at a word or shortened from its middle with a mark that says so, ASCII
//! stand-ins for the few other characters we print, counted nouns, local
//! date-times for file names. Widths are in characters.

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
/// room is cut from its left.
pub fn elide_path(path: &str, max: usize) -> String {
    elide_path_with(path, max, "\u{2026}")
}

/// `elide_path` with another mark (`~` where only ASCII may be drawn).
pub fn elide_path_with(path: &str, max: usize, mark: &str) -> String {
    let n = path.chars().count();
    if n <= max {
        return path.to_string();
    }
    let mw = mark.chars().count();
    if max <= mw {
        return mark.chars().take(max).collect();
    }
    // Try the suffixes that start at a '/', longest first.
    for (i, _) in path.match_indices('/') {
        let tail = &path[i..];
        if tail.chars().count() + mw <= max {
            return format!("{mark}{tail}");
        }
    }
    let tail: Vec<char> = path.chars().collect();
    let keep = max - mw;
    format!("{mark}{}", tail[n - keep..].iter().collect::<String>())
}

/// `path` in `max` characters so that it still differs from `other` (two
/// targets side by side): as `elide_path_with` when the tail it keeps
/// reaches the first component where they differ, else that component and
/// the last one (`…/a/…/data` beside `…/b/…/data`).
pub fn elide_path_apart(path: &str, other: &str, max: usize, mark: &str) -> String {
    let e = elide_path_with(path, max, mark);
    if e == path {
        return e;
    }
    // Byte length of the folders both paths start with.
    let mut common = 0;
    for ((i, a), b) in path.char_indices().zip(other.chars()) {
        if a != b {
            break;
        }
        if a == '/' {
            common = i + 1;
        }
    }
    let shown = e.len().saturating_sub(mark.len());
    if path.len() - shown <= common {
        return e;
    }
    let rest = &path[common..];
    match (rest.split('/').next(), rest.rsplit('/').next()) {
        (Some(first), Some(last)) if first != rest => {
            let both = format!("{mark}/{first}/{mark}/{last}");
            if both.chars().count() <= max {
                both
            } else {
                e
            }
        }
        _ => e,
    }
}

/// `text` cut after its last whole word that fits in `max` characters with
/// " " and `mark` after it; None when not even its first word fits (a cut
/// inside a word would hide what the word says).
pub fn cut_words(text: &str, max: usize, mark: &str) -> Option<String> {
    if text.chars().count() <= max {
        return Some(text.to_string());
    }
    let room = max.checked_sub(mark.chars().count() + 1)?;
    let chars: Vec<char> = text.chars().collect();
    // The last space at or before `room` that ends a word.
    let end = (1..=room.min(chars.len() - 1))
        .rev()
        .find(|&i| chars[i] == ' ' && chars[i - 1] != ' ')?;
    let keep: String = chars[..end].iter().collect();
    Some(format!("{} {mark}", keep.trim_end()))
}

/// `text` split into a row of at most `max` characters and the rest: before
/// the last word that starts within the row, or after a `/` of a long path
/// when breaking before it would leave a third of the row empty (inside a
/// word only when nothing else fits). The first row of a message wrapped
/// onto two.
pub fn split_at_word(text: &str, max: usize) -> (String, String) {
    let chars: Vec<char> = text.chars().collect();
    if chars.len() <= max {
        return (text.to_string(), String::new());
    }
    let space = (1..=max)
        .rev()
        .find(|&i| chars[i] == ' ' && chars[i - 1] != ' ');
    let slash = (1..=max).rev().find(|&i| chars[i - 1] == '/');
    let at = match (space, slash) {
        (Some(s), Some(p)) if p > s && s * 3 < max * 2 => p,
        (Some(s), _) => s,
        (None, Some(p)) => p,
        (None, None) => max,
    };
    let (head, tail) = chars.split_at(at);
    let head: String = head.iter().collect();
    let tail: String = tail.iter().collect();
    (head.trim_end().to_string(), tail.trim_start().to_string())
}

/// `text` in `max` characters: whole, cut at a word, or (a single long
/// word) cut inside it; the mark says so whenever it is cut.
pub fn cut_end(text: &str, max: usize, mark: &str) -> String {
    cut_words(text, max, mark).unwrap_or_else(|| {
        let keep = max.saturating_sub(mark.chars().count());
        let head: String = text.chars().take(keep).collect();
        format!("{head}{mark}").chars().take(max).collect()
    })
}

/// `text` in `max` characters with its start and its end kept and `mark`
/// in place of the middle, cut at words where it can: a message's subject
/// and its reason (`open /var/… : No such file or directory`) both stay.
pub fn shorten_middle(text: &str, max: usize, mark: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let n = chars.len();
    if n <= max {
        return text.to_string();
    }
    let mw = mark.chars().count();
    let Some(budget) = max.checked_sub(mw + 2).filter(|&b| b >= 4) else {
        return cut_end(text, max, mark);
    };
    let head_room = budget.div_ceil(2);
    // The head ends at a word's end, else it is cut inside the word.
    let head_end = (1..=head_room)
        .rev()
        .find(|&i| chars[i] == ' ' && chars[i - 1] != ' ')
        .unwrap_or(head_room);
    let head: String = chars[..head_end].iter().collect();
    let head = head.trim_end();
    let tail_room = budget - head.chars().count();
    // The tail starts at a word's start, else inside the word.
    let first = n - tail_room;
    let tail_start = (first..n)
        .find(|&j| chars[j - 1] == ' ' && chars[j] != ' ')
        .unwrap_or(first);
    let tail: String = chars[tail_start..].iter().collect();
    format!("{head} {mark} {}", tail.trim_start())
}

/// `text` with the non-ASCII characters we print (×, …, —, ←, →, ●) spelt
/// in ASCII, and any other shown as `?`: what `--ascii` draws.
pub fn to_ascii(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            c if c.is_ascii() => out.push(c),
            '\u{d7}' => out.push('x'),
            '\u{2026}' => out.push_str("..."),
            '\u{2014}' | '\u{2013}' => out.push('-'),
            '\u{2190}' => out.push_str("<-"),
            '\u{2192}' => out.push_str("->"),
            '\u{25cf}' | '\u{2022}' => out.push('*'),
            '\u{b5}' => out.push('u'),
            _ => out.push('?'),
        }
    }
    out
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
            let e = elide_path_with("/var/tmp/stallscope-lab/mnt/ext4", max, "~");
            assert!(e.chars().count() <= max && e.is_ascii(), "{max}: {e}");
        }
        assert_eq!(elide_path_with("/var/tmp/mnt/ext4", 10, "~"), "~/mnt/ext4");
    }

    /// Defect: at 80 columns the compare view cut both paths before the
    /// part that tells them apart.
    #[test]
    fn two_paths_keep_what_tells_them_apart() {
        let (a, b) = (
            "/var/tmp/stallscope-lab/mnt/ext4",
            "/var/tmp/stallscope-lab/mnt/xfs",
        );
        assert_eq!(elide_path_apart(a, b, 20, "~"), "~/mnt/ext4");
        assert_eq!(elide_path_apart(b, a, 20, "~"), "~/mnt/xfs");
        assert_eq!(elide_path_apart(a, b, 40, "~"), a);
        // They differ in the middle: the tail alone would read the same.
        let (c, d) = ("/srv/node-a/var/lib/data", "/srv/node-b/var/lib/data");
        assert_eq!(elide_path_apart(c, d, 16, "~"), "~/node-a/~/data");
        assert_eq!(elide_path_apart(d, c, 16, "~"), "~/node-b/~/data");
        for max in 0..30 {
            assert!(elide_path_apart(c, d, max, "~").chars().count() <= max);
        }
    }

    /// Defect: header words were cut mid-word (`tracing: of`).
    #[test]
    fn cuts_fall_between_words_and_say_so() {
        let t = "tracing: off (not root)";
        assert_eq!(cut_words(t, 30, "~").unwrap(), t);
        assert_eq!(cut_words(t, 20, "~").unwrap(), "tracing: off (not ~");
        assert_eq!(cut_words(t, 14, "~").unwrap(), "tracing: off ~");
        assert_eq!(cut_words(t, 13, "~").unwrap(), "tracing: ~");
        assert_eq!(cut_words(t, 9, "~"), None, "no whole word fits");
        assert_eq!(cut_end("averylongword", 6, "~"), "avery~");
        for max in 0..30 {
            assert!(cut_end(t, max, "\u{2026}").chars().count() <= max, "{max}");
        }
    }

    /// Defect: an error at the bottom ended `…No such file or dir`.
    #[test]
    fn the_middle_gives_way_so_subject_and_reason_stay() {
        let e = "writer 2 failed: open /var/tmp/stallscope-lab/mnt/ext4/.stallscope-1/e0/seg-000017: No such file or directory";
        let s = shorten_middle(e, 60, "~");
        assert!(s.chars().count() <= 60, "{s}");
        assert!(s.starts_with("writer 2 failed:"), "{s}");
        assert!(s.ends_with("No such file or directory"), "{s}");
        assert!(s.contains(" ~ "), "{s}");
        assert_eq!(shorten_middle("short", 60, "~"), "short");
        for max in 0..80 {
            assert!(shorten_middle(e, max, "~").chars().count() <= max, "{max}");
        }
    }

    #[test]
    fn a_split_falls_between_words() {
        let (a, b) = split_at_word("open /var/x: No such file", 14);
        assert_eq!((a.as_str(), b.as_str()), ("open /var/x:", "No such file"));
        let (a, b) = split_at_word("abcdefgh ij", 4);
        assert_eq!((a.as_str(), b.as_str()), ("abcd", "efgh ij"));
        // A long path breaks after a `/` rather than leave the row empty.
        let (a, b) = split_at_word("failed: open /var/tmp/lab/mnt/ext4/seg-17: ENOENT", 30);
        assert_eq!(
            (a.as_str(), b.as_str()),
            ("failed: open /var/tmp/lab/mnt/", "ext4/seg-17: ENOENT")
        );
        assert_eq!(split_at_word("short", 10).0, "short");
    }

    #[test]
    fn ascii_stand_ins() {
        assert_eq!(to_ascii("mmap \u{d7} 4"), "mmap x 4");
        assert_eq!(to_ascii("\u{2190} a \u{2190} \u{2026}"), "<- a <- ...");
        assert_eq!(to_ascii("caf\u{e9}"), "caf?");
    }
}

//! Files the subcommands write at the end of a long job (a chart, a CSV):
//! their folder checked before the job starts, so a typo does not cost the
//! job, and the file written whole or not at all.

use crate::base::error::UsageError;
use std::path::Path;

/// Whether `path`'s folder exists (the current one when it names none).
pub fn check_dir(path: &Path) -> Result<(), UsageError> {
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    if dir.is_dir() {
        return Ok(());
    }
    let msg = format!("{}: {} is not a directory", path.display(), dir.display());
    Err(UsageError::new(msg))
}

/// Writes `bytes` to a temporary name beside `path` and renames it over
/// `path`: a reader never sees half a file, and a failure leaves none.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    let tmp = path.with_extension("stallscope-tmp");
    let wrote = std::fs::write(&tmp, bytes)
        .map_err(|e| anyhow::anyhow!("{}: {e}", tmp.display()))
        .and_then(|()| {
            std::fs::rename(&tmp, path).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))
        });
    if wrote.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    wrote
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_is_written_whole_or_not_at_all() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("chart.svg");
        write_atomic(&out, b"<svg/>").unwrap();
        assert_eq!(std::fs::read(&out).unwrap(), b"<svg/>");
        // A folder in the way of the rename: the error names the file and
        // the temporary one is gone.
        let blocked = dir.path().join("taken.svg");
        std::fs::create_dir(blocked.join("x").parent().unwrap()).unwrap();
        std::fs::write(blocked.join("x"), "").unwrap();
        let e = write_atomic(&blocked, b"<svg/>").unwrap_err().to_string();
        assert!(e.contains("taken.svg"), "{e}");
        let left: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert!(
            !left.iter().any(|n| n.contains("stallscope-tmp")),
            "{left:?}"
        );
        let nowhere = dir.path().join("missing/chart.svg");
        assert!(write_atomic(&nowhere, b"x").is_err());
        assert!(check_dir(&nowhere)
            .unwrap_err()
            .0
            .contains("not a directory"));
        assert!(check_dir(&out).is_ok() && check_dir(Path::new("chart.svg")).is_ok());
    }
}

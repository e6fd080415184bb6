//! Small filesystem helpers: private directories and atomically replaced private files.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

/// Permission bits of the files this module writes (owner read/write only).
#[cfg(unix)]
const FILE_MODE: u32 = 0o600;
/// Permission bits of the directories this module creates (owner only).
#[cfg(unix)]
const DIR_MODE: u32 = 0o700;

/// Creates `dir` and any missing parents with mode 0700. Existing directories are left alone.
pub(super) fn create_private_dir_all(dir: &Path) -> io::Result<()> {
    let mut builder = fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::DirBuilderExt;
        builder.mode(DIR_MODE);
    }
    builder.create(dir)
}

/// Sets `dir`'s permissions to 0700 (no-op on non-Unix platforms).
pub(super) fn restrict_dir(dir: &Path) -> io::Result<()> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        fs::set_permissions(dir, fs::Permissions::from_mode(DIR_MODE))?;
    }
    #[cfg(not(unix))]
    let _ = dir;
    Ok(())
}

/// Replaces `path` with `contents` atomically: writes a sibling temporary file with mode 0600,
/// syncs it, renames it over `path` and syncs the directory. Readers see the old or the new
/// contents, never a partial file.
pub(super) fn write_private_atomic(path: &Path, contents: &[u8]) -> io::Result<()> {
    let tmp = temp_path(path);
    match fs::remove_file(&tmp) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    let mut options = OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(FILE_MODE);
    }
    let result = (|| {
        let mut file = options.open(&tmp)?;
        file.write_all(contents)?;
        file.sync_all()?;
        drop(file);
        fs::rename(&tmp, path)
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result?;
    if let Some(parent) = path.parent() {
        sync_dir(parent);
    }
    Ok(())
}

/// True when `path` is readable or writable by group or others (always false off Unix).
pub(super) fn is_group_or_world_accessible(path: &Path) -> bool {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        fs::metadata(path)
            .map(|m| m.permissions().mode() & 0o077 != 0)
            .unwrap_or(false)
    }
    #[cfg(not(unix))]
    {
        let _ = path;
        false
    }
}

fn temp_path(path: &Path) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(".tmp");
    path.with_file_name(name)
}

/// Best effort: makes a rename in `dir` durable. Failure only weakens crash safety.
fn sync_dir(dir: &Path) {
    let dir = if dir.as_os_str().is_empty() {
        Path::new(".")
    } else {
        dir
    };
    if let Ok(handle) = File::open(dir) {
        let _ = handle.sync_all();
    }
}

//! Input files are regular files of bounded size (issue 41): a FIFO would
//! block the read forever, `/dev/zero` would read until memory runs out,
//! a huge file would be read whole. Every reader of a results.csv,
//! spec.toml or groups.csv(.gz) goes through here: the file type is checked
//! from metadata before the file is opened, its length before it is read,
//! and the read itself is through `take`, so a file that grows meanwhile
//! cannot exceed the bound either.

use std::io::{self, Read};
use std::path::Path;

/// The largest results.csv read (a row is ~600 bytes: 400,000 rows).
pub const MAX_RESULTS_BYTES: u64 = 256 << 20;
/// The largest spec.toml read.
pub const MAX_SPEC_BYTES: u64 = 1 << 20;
/// The largest groups.csv read, or groups.csv.gz once decompressed (a
/// 1024TiB volume's 8388608 groups at ~40 bytes a line is 336 MB).
pub const MAX_GROUPS_BYTES: u64 = 1 << 30;

const EISDIR: i32 = 21;

/// Why `path` is not a regular file of at most `limit` bytes, checked
/// from its metadata (symlinks followed) before it is opened.
pub fn check_regular(path: &Path, limit: u64, what: &str) -> io::Result<u64> {
    let m = std::fs::metadata(path)?;
    let ft = m.file_type();
    if ft.is_dir() {
        // The results reader says "a folder; pass the results.csv in it".
        return Err(io::Error::from_raw_os_error(EISDIR));
    }
    if !ft.is_file() {
        use std::os::unix::fs::FileTypeExt;
        let kind = if ft.is_fifo() {
            "a FIFO"
        } else if ft.is_char_device() {
            "a character device"
        } else if ft.is_block_device() {
            "a block device"
        } else if ft.is_socket() {
            "a socket"
        } else {
            "not a file"
        };
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{kind}, not a regular file: give the {what} itself"),
        ));
    }
    too_big(m.len(), limit, what)?;
    Ok(m.len())
}

fn too_big(len: u64, limit: u64, what: &str) -> io::Result<()> {
    if len > limit {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "{len} bytes, more than the {} MiB a {what} may have",
                limit >> 20
            ),
        ));
    }
    Ok(())
}

/// The bytes of the regular file `path`, refused when larger than `limit`.
pub fn read_bounded(path: &Path, limit: u64, what: &str) -> io::Result<Vec<u8>> {
    check_regular(path, limit, what)?;
    let f = std::fs::File::open(path)?;
    // The file opened is the one checked, or is checked again here.
    let m = f.metadata()?;
    if !m.is_file() {
        return check_regular(path, limit, what).map(|_| Vec::new());
    }
    read_limited(f, limit, what)
}

/// At most `limit` bytes of `r`; more is an error, not a cut.
pub fn read_limited(r: impl Read, limit: u64, what: &str) -> io::Result<Vec<u8>> {
    let mut bytes = Vec::new();
    r.take(limit.saturating_add(1)).read_to_end(&mut bytes)?;
    too_big(bytes.len() as u64, limit, what)?;
    Ok(bytes)
}

/// [`read_bounded`] as UTF-8 text.
pub fn read_text_bounded(path: &Path, limit: u64, what: &str) -> io::Result<String> {
    String::from_utf8(read_bounded(path, limit, what)?).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            "stream did not contain valid UTF-8",
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fifos_devices_folders_and_big_files_are_refused_before_reading() {
        let d = tempfile::tempdir().unwrap();
        let fifo = d.path().join("fifo");
        let made = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap();
        assert!(made.success());
        let e = read_bounded(&fifo, 100, "results file").unwrap_err();
        assert!(e.to_string().contains("a FIFO, not a regular file"), "{e}");
        let e = read_bounded(Path::new("/dev/zero"), 100, "results file").unwrap_err();
        assert!(e.to_string().contains("a character device"), "{e}");
        let e = read_bounded(d.path(), 100, "results file").unwrap_err();
        assert_eq!(e.raw_os_error(), Some(EISDIR));
        let big = d.path().join("big");
        std::fs::write(&big, [b'x'; 101]).unwrap();
        let e = read_bounded(&big, 100, "results file").unwrap_err();
        assert!(e.to_string().contains("101 bytes, more than"), "{e}");
        std::fs::write(&big, [b'x'; 100]).unwrap();
        assert_eq!(read_bounded(&big, 100, "x").unwrap().len(), 100);
        let e = read_limited(std::io::repeat(0), 1000, "groups.csv").unwrap_err();
        assert!(e.to_string().contains("1001 bytes"), "{e}");
    }
}

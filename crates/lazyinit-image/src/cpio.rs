//! A newc ("070701") cpio writer: the format the kernel unpacks as initramfs.
//!
//! Written here rather than with the host's `cpio` so that ownership (root),
//! modes, device nodes and timestamps are exactly what we say, without
//! fakeroot, and the archive is byte-for-byte reproducible.

use std::collections::BTreeMap;

/// One thing in the archive. Paths are relative (`bin/busybox`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Entry {
    Dir { mode: u32 },
    File { mode: u32, data: Vec<u8> },
    Symlink { target: String },
    CharDev { mode: u32, major: u32, minor: u32 },
}

const S_IFDIR: u32 = 0o040000;
const S_IFREG: u32 = 0o100000;
const S_IFLNK: u32 = 0o120000;
const S_IFCHR: u32 = 0o020000;

/// A tree of entries; parents are created (0755) as needed and every entry
/// is written after its parent, as the kernel's unpacker requires.
#[derive(Debug, Default, Clone)]
pub struct Archive {
    entries: BTreeMap<String, Entry>,
}

impl Archive {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds or replaces `path`. Missing parent directories are added.
    pub fn insert(&mut self, path: &str, entry: Entry) {
        let path = path.trim_start_matches('/').trim_end_matches('/');
        let mut parent = String::new();
        for part in path
            .split('/')
            .take(path.split('/').count().saturating_sub(1))
        {
            if !parent.is_empty() {
                parent.push('/');
            }
            parent.push_str(part);
            self.entries
                .entry(parent.clone())
                .or_insert(Entry::Dir { mode: 0o755 });
        }
        self.entries.insert(path.to_string(), entry);
    }

    pub fn get(&self, path: &str) -> Option<&Entry> {
        self.entries.get(path.trim_start_matches('/'))
    }

    pub fn contains(&self, path: &str) -> bool {
        self.get(path).is_some()
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    pub fn paths(&self) -> impl Iterator<Item = &str> {
        self.entries.keys().map(String::as_str)
    }

    /// The archive bytes, uncompressed. Owner root, mtime 0, inode numbers in
    /// path order: the same tree always gives the same bytes.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::new();
        // BTreeMap order puts "a" before "a/b", so parents come first.
        for (ino, (path, entry)) in self.entries.iter().enumerate() {
            let (mode, data, nlink, rdev): (u32, &[u8], u32, (u32, u32)) = match entry {
                Entry::Dir { mode } => (S_IFDIR | mode, &[], 2, (0, 0)),
                Entry::File { mode, data } => (S_IFREG | mode, data, 1, (0, 0)),
                Entry::Symlink { target } => (S_IFLNK | 0o777, target.as_bytes(), 1, (0, 0)),
                Entry::CharDev { mode, major, minor } => (S_IFCHR | mode, &[], 1, (*major, *minor)),
            };
            write_entry(&mut out, ino as u32 + 1, mode, nlink, rdev, path, data);
        }
        write_entry(&mut out, 0, 0, 1, (0, 0), "TRAILER!!!", &[]);
        // Pad to 512 bytes like GNU cpio, so concatenated archives stay aligned.
        out.resize(out.len().div_ceil(512) * 512, 0);
        out
    }
}

fn pad4(out: &mut Vec<u8>) {
    out.resize(out.len().div_ceil(4) * 4, 0);
}

fn write_entry(
    out: &mut Vec<u8>,
    ino: u32,
    mode: u32,
    nlink: u32,
    rdev: (u32, u32),
    name: &str,
    data: &[u8],
) {
    let fields = [
        ino,
        mode,
        0, // uid
        0, // gid
        nlink,
        0, // mtime
        data.len() as u32,
        0, // dev major
        0, // dev minor
        rdev.0,
        rdev.1,
        name.len() as u32 + 1,
        0, // check
    ];
    out.extend_from_slice(b"070701");
    for f in fields {
        out.extend_from_slice(format!("{f:08x}").as_bytes());
    }
    out.extend_from_slice(name.as_bytes());
    out.push(0);
    pad4(out);
    out.extend_from_slice(data);
    pad4(out);
}

/// gzip, which every kernel with `CONFIG_RD_GZIP` (the default) unpacks.
/// The host's gzip (Essential in Debian) rather than a Rust encoder: in the
/// debug builds we run, an unoptimised encoder takes seconds per image.
/// `-n` leaves name and time out of the header, so output is reproducible.
pub fn gzip(bytes: &[u8]) -> std::io::Result<Vec<u8>> {
    use std::io::Write;
    use std::process::{Command, Stdio};
    let mut child = Command::new("gzip")
        .args(["-9", "-n", "-c"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    let mut stdin = child.stdin.take().expect("piped");
    // Feed from a thread: gzip's output pipe would fill while we still write.
    let input = bytes.to_vec();
    let feeder = std::thread::spawn(move || stdin.write_all(&input));
    let out = child.wait_with_output()?;
    feeder
        .join()
        .map_err(|_| std::io::Error::other("gzip feeder panicked"))??;
    if !out.status.success() {
        return Err(std::io::Error::other(format!(
            "gzip failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(out.stdout)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_layout_matches_newc() {
        let mut a = Archive::new();
        a.insert(
            "init",
            Entry::File {
                mode: 0o755,
                data: b"#!/bin/sh\n".to_vec(),
            },
        );
        let bytes = a.to_bytes();
        let header = std::str::from_utf8(&bytes[..110]).unwrap();
        assert_eq!(&header[..6], "070701");
        // mode field: regular file 0755
        assert_eq!(&header[14..22], format!("{:08x}", 0o100755));
        // filesize and namesize ("init" + NUL)
        assert_eq!(&header[54..62], "0000000a");
        assert_eq!(&header[94..102], "00000005");
        assert_eq!(&bytes[110..114], b"init");
        // name (110 + 5 bytes) padded to 116, then the data
        assert_eq!(&bytes[116..126], b"#!/bin/sh\n");
        assert_eq!(bytes.len() % 512, 0);
        let trailer = bytes.windows(10).position(|w| w == b"TRAILER!!!");
        assert!(trailer.is_some());
    }

    #[test]
    fn parents_are_created_and_written_first() {
        let mut a = Archive::new();
        a.insert(
            "/usr/sbin/dropbear",
            Entry::File {
                mode: 0o755,
                data: vec![],
            },
        );
        a.insert(
            "bin/sh",
            Entry::Symlink {
                target: "busybox".into(),
            },
        );
        let paths: Vec<&str> = a.paths().collect();
        assert_eq!(
            paths,
            ["bin", "bin/sh", "usr", "usr/sbin", "usr/sbin/dropbear"]
        );
        assert_eq!(a.get("usr"), Some(&Entry::Dir { mode: 0o755 }));
    }

    #[test]
    fn same_tree_same_bytes() {
        let build = || {
            let mut a = Archive::new();
            a.insert(
                "dev/console",
                Entry::CharDev {
                    mode: 0o600,
                    major: 5,
                    minor: 1,
                },
            );
            a.insert(
                "etc/passwd",
                Entry::File {
                    mode: 0o644,
                    data: b"root".to_vec(),
                },
            );
            gzip(&a.to_bytes()).unwrap()
        };
        assert_eq!(build(), build());
    }
}

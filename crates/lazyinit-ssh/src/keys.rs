//! The project's key material: a client key pair the harness logs in with,
//! and the guest's host key pair, pinned in a known_hosts file.
//!
//! Generated once with the host's `ssh-keygen` (client, OpenSSH format, which
//! libssh2 reads) and `dropbearkey` (host key, in the format the guest's
//! dropbear reads). Private keys are 0600 files and never printed or logged.

use std::fs;
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;

use lazyinit_core::aside::Aside;
use lazyinit_core::exit;

use crate::error::SshError;
use base64::engine::general_purpose::{
    GeneralPurpose, GeneralPurposeConfig, STANDARD, STANDARD_NO_PAD,
};
use base64::engine::DecodePaddingMode;
use base64::Engine;

const CLIENT_KEY: &str = "client_ed25519";
const HOST_KEY: &str = "guest_host_ed25519.dropbear";
const HOST_PUB: &str = "guest_host_ed25519.pub";
const KNOWN_HOSTS: &str = "known_hosts";
/// Subdirectory of the state directory that holds the keys.
const KEYS_DIR: &str = "ssh";

/// Key blobs in .pub and known_hosts lines: standard base64, padded or not.
const KEY_BLOB: GeneralPurpose = GeneralPurpose::new(
    &base64::alphabet::STANDARD,
    GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::Indifferent),
);

/// A public host key as pinned: algorithm and key blob.
#[derive(Clone, PartialEq, Eq)]
pub struct HostKeyPin {
    pub algorithm: String,
    pub blob: Vec<u8>,
}

impl std::fmt::Debug for HostKeyPin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.algorithm, fingerprint(&self.blob))
    }
}

impl HostKeyPin {
    /// Parses `ssh-ed25519 AAAA... [comment]` (a .pub line or the key part of
    /// a known_hosts line).
    pub fn parse_public_line(line: &str) -> Option<HostKeyPin> {
        let mut words = line.split_whitespace();
        let algorithm = words.next()?;
        if !algorithm.starts_with("ssh-") && !algorithm.starts_with("ecdsa-") {
            return None;
        }
        let blob = KEY_BLOB.decode(words.next()?).ok()?;
        Some(HostKeyPin {
            algorithm: algorithm.to_string(),
            blob,
        })
    }

    /// The OpenSSH public-key line, without comment.
    pub fn public_line(&self) -> String {
        format!("{} {}", self.algorithm, STANDARD.encode(&self.blob))
    }

    pub fn fingerprint(&self) -> String {
        fingerprint(&self.blob)
    }

    /// The known_hosts line. The pattern `*` pins the key for every address
    /// (guests come and go on many ports), so a manual
    /// `ssh -o UserKnownHostsFile=... -o StrictHostKeyChecking=yes` works too.
    pub fn known_hosts_line(&self) -> String {
        format!("* {} lazyinit-bench-guest\n", self.public_line())
    }

    /// The first pinned key of a known_hosts file's text.
    pub fn from_known_hosts(text: &str) -> Option<HostKeyPin> {
        text.lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
            .find_map(|l| {
                let (_pattern, rest) = l.split_once(char::is_whitespace)?;
                HostKeyPin::parse_public_line(rest)
            })
    }
}

/// OpenSSH-style fingerprint of a key blob: `SHA256:` and unpadded base64.
pub fn fingerprint(blob: &[u8]) -> String {
    use sha2::{Digest, Sha256};
    format!("SHA256:{}", STANDARD_NO_PAD.encode(Sha256::digest(blob)))
}

/// Paths of the project's keys and the pinned host key. Holds no secret in
/// memory: the private keys stay in their files.
#[derive(Debug, Clone)]
pub struct Keys {
    pub dir: PathBuf,
    /// Client private key (OpenSSH format), used by the harness to log in.
    pub client_private: PathBuf,
    /// Client public key line, for the guest's `authorized_keys`.
    pub client_public: String,
    /// Guest host private key in dropbear's format, shipped in the launch-time cpio.
    pub host_private: PathBuf,
    /// The pinned guest host key.
    pub host_public: HostKeyPin,
    /// known_hosts file holding the pin.
    pub known_hosts: PathBuf,
}

impl Keys {
    /// Loads the keys from `<state_dir>/ssh`, generating them the first time.
    /// Generation happens in a private temporary directory renamed into
    /// place, so two processes starting at once end up with the same keys.
    pub fn load_or_create(state_dir: &Path) -> Result<Keys, SshError> {
        let dir = state_dir.join(KEYS_DIR);
        if !dir.join(KNOWN_HOSTS).exists() {
            create_dir_private(state_dir)?;
            // A private folder of an unpredictable name (0700), gone
            // unless published; someone else's keys, there first, are the
            // keys (a folder without its known_hosts is replaced).
            let tmp =
                Aside::with_mode(&dir, &format!("{KEYS_DIR}.tmp-"), 0o700).map_err(|source| {
                    SshError::KeyFile {
                        action: "create a temporary key folder in",
                        path: state_dir.to_path_buf(),
                        source,
                    }
                })?;
            generate(tmp.path())?;
            tmp.publish(|d| d.join(KNOWN_HOSTS).exists())
                .map_err(|source| SshError::KeyFile {
                    action: "move new keys into",
                    path: dir.clone(),
                    source,
                })?;
            tracing::info!(dir = %dir.display(), "generated the project's SSH keys");
        }
        Keys::load(&dir)
    }

    fn load(dir: &Path) -> Result<Keys, SshError> {
        let read = |name: &str| {
            let path = dir.join(name);
            fs::read_to_string(&path).map_err(|source| SshError::KeyFile {
                action: "read",
                path,
                source,
            })
        };
        let client_pub_path = format!("{CLIENT_KEY}.pub");
        let client_public = read(&client_pub_path)?.trim().to_string();
        if HostKeyPin::parse_public_line(&client_public).is_none() {
            return Err(SshError::BadKeyFile {
                path: dir.join(client_pub_path),
                reason: "not an OpenSSH public key line".into(),
            });
        }
        let known_hosts = dir.join(KNOWN_HOSTS);
        let host_public = HostKeyPin::from_known_hosts(&read(KNOWN_HOSTS)?).ok_or_else(|| {
            SshError::BadKeyFile {
                path: known_hosts.clone(),
                reason: "no pinned host key in it".into(),
            }
        })?;
        for private in [CLIENT_KEY, HOST_KEY] {
            let path = dir.join(private);
            let meta = fs::metadata(&path).map_err(|source| SshError::KeyFile {
                action: "read",
                path: path.clone(),
                source,
            })?;
            if meta.permissions().mode() & 0o077 != 0 {
                return Err(SshError::BadKeyFile {
                    path,
                    reason: "readable by others (must be 0600)".into(),
                });
            }
        }
        Ok(Keys {
            dir: dir.to_path_buf(),
            client_private: dir.join(CLIENT_KEY),
            client_public,
            host_private: dir.join(HOST_KEY),
            host_public,
            known_hosts,
        })
    }
}

pub(crate) fn create_dir_private(dir: &Path) -> Result<(), SshError> {
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|source| SshError::KeyFile {
            action: "create directory",
            path: dir.to_path_buf(),
            source,
        })
}

fn run_keygen(
    tool: &'static str,
    install: &str,
    args: &[&std::ffi::OsStr],
) -> Result<String, SshError> {
    let stdout = lazyinit_core::command::run(Command::new(tool).args(args)).map_err(|e| {
        if e.not_found() {
            SshError::MissingTool(exit::missing_tool(tool, install))
        } else {
            SshError::KeyGen {
                tool,
                stderr: e.detail(),
            }
        }
    })?;
    // stdout may carry key material (dropbearkey prints the public half); the
    // caller picks what it needs and nothing is logged.
    Ok(String::from_utf8_lossy(&stdout).into_owned())
}

/// The public line in `dropbearkey -y` output ("Public key portion is:" ...).
pub(crate) fn public_line_of_dropbearkey(stdout: &str) -> Option<HostKeyPin> {
    stdout.lines().find_map(HostKeyPin::parse_public_line)
}

fn generate(dir: &Path) -> Result<(), SshError> {
    let client = dir.join(CLIENT_KEY);
    run_keygen(
        "ssh-keygen",
        "apt-get install openssh-client",
        &[
            "-q".as_ref(),
            "-t".as_ref(),
            "ed25519".as_ref(),
            "-N".as_ref(),
            "".as_ref(),
            "-C".as_ref(),
            "lazyinit-bench-client".as_ref(),
            "-f".as_ref(),
            client.as_os_str(),
        ],
    )?;
    let host = dir.join(HOST_KEY);
    let install = "apt-get install dropbear-bin";
    run_keygen(
        "dropbearkey",
        install,
        &[
            "-t".as_ref(),
            "ed25519".as_ref(),
            "-f".as_ref(),
            host.as_os_str(),
        ],
    )?;
    let public = run_keygen(
        "dropbearkey",
        install,
        &["-y".as_ref(), "-f".as_ref(), host.as_os_str()],
    )?;
    let pin = public_line_of_dropbearkey(&public).ok_or_else(|| SshError::KeyGen {
        tool: "dropbearkey",
        stderr: "`dropbearkey -y` printed no public key line".into(),
    })?;
    for key in [&client, &host] {
        fs::set_permissions(key, fs::Permissions::from_mode(0o600)).map_err(|source| {
            SshError::KeyFile {
                action: "restrict permissions of",
                path: key.clone(),
                source,
            }
        })?;
    }
    write_new(&dir.join(HOST_PUB), &format!("{}\n", pin.public_line()))?;
    write_new(&dir.join(KNOWN_HOSTS), &pin.known_hosts_line())
}

fn write_new(path: &Path, text: &str) -> Result<(), SshError> {
    let err = |source| SshError::KeyFile {
        action: "write",
        path: path.to_path_buf(),
        source,
    };
    let mut f = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o644)
        .open(path)
        .map_err(err)?;
    f.write_all(text.as_bytes()).map_err(err)
}

#[cfg(test)]
mod tests {
    use super::*;

    const ED: &str =
        "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIBNmVPMN9ey0YCUfVCDg9ZE0Dyeg2YWDSKwIYCgmUbuT";

    #[test]
    fn parses_dropbearkey_output() {
        let out = format!("Public key portion is:\n{ED} root@vm\nFingerprint: SHA256:xyz\n");
        let pin = public_line_of_dropbearkey(&out).unwrap();
        assert_eq!(pin.algorithm, "ssh-ed25519");
        assert_eq!(pin.public_line(), ED);
        assert!(public_line_of_dropbearkey("Fingerprint: x\n").is_none());
    }

    #[test]
    fn known_hosts_round_trip() {
        let pin = HostKeyPin::parse_public_line(ED).unwrap();
        let text = format!("# pinned\n\n{}", pin.known_hosts_line());
        assert_eq!(HostKeyPin::from_known_hosts(&text).unwrap(), pin);
        assert!(HostKeyPin::from_known_hosts("# nothing\n").is_none());
    }

    #[test]
    fn fingerprint_matches_openssh() {
        // `ssh-keygen -lf` on this key prints this fingerprint.
        let pin = HostKeyPin::parse_public_line(ED).unwrap();
        assert_eq!(
            pin.fingerprint(),
            "SHA256:J+funKfAO+VTScZuy7xzyEB0ZOykNHyo9A5X+PhWQao"
        );
    }
}

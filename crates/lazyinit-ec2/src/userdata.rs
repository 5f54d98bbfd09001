//! Instance user data (cloud-config): the pinned host key, root's
//! authorized key, and the self-destruct timer of the AMI's userspace.
//!
//! The host key's private half travels in user data, which anyone allowed
//! `ec2:DescribeInstanceAttribute` in the account (and a process on the
//! instance holding an IMDSv2 session token: the provider requires tokens
//! and one hop) can read. So it is a key generated for one run (the CLI
//! makes it in a folder that goes with the run), the same one appended to
//! the initramfs the instance kexecs into, whose only job is to let the
//! harness pin what it connects to during that run.
//!
//! The timer here dies with the AMI's userspace at the kexec; the kernel
//! under test carries the expiry on its command line instead
//! (`machine::kexec_plan`, honoured by the guest's /init).

use chrono::{DateTime, Utc};
use lazyinit_core::command::CommandError;

use crate::tags::rfc3339;

/// SSH keys the instance must carry. The `image` helper of `lazyinit-ssh`
/// generates them; the provider only passes them on.
#[derive(Clone, PartialEq, Eq)]
pub struct GuestKeys {
    /// OpenSSH private host key (`-----BEGIN OPENSSH PRIVATE KEY-----`).
    pub host_private: String,
    /// Its public half, one line (`ssh-ed25519 AAAA...`).
    pub host_public: String,
    /// The harness's client public key, installed for root.
    pub client_public: String,
}

impl std::fmt::Debug for GuestKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GuestKeys")
            .field("host_public", &self.host_public)
            .field("client_public", &self.client_public)
            .finish_non_exhaustive()
    }
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum KeyError {
    #[error("host public key `{0}` is not an ed25519, ecdsa or rsa OpenSSH key")]
    HostKeyType(String),
    #[error("host private key is not in OpenSSH PEM form (-----BEGIN ... PRIVATE KEY-----)")]
    HostPrivate,
    #[error("client public key must be one line `<type> <base64> [comment]`")]
    ClientPublic,
    #[error("cannot convert the dropbear host key {path} to OpenSSH form: {detail}")]
    Convert { path: String, detail: String },
    #[error("cannot read the project's SSH keys: {0}")]
    Load(String),
}

/// cloud-init's name for a host key type (`ssh_keys: <name>_private`).
fn cloud_init_key_name(public: &str) -> Result<&'static str, KeyError> {
    let ty = public.split_whitespace().next().unwrap_or("");
    match ty {
        "ssh-ed25519" => Ok("ed25519"),
        t if t.starts_with("ecdsa-sha2-") => Ok("ecdsa"),
        "ssh-rsa" => Ok("rsa"),
        _ => Err(KeyError::HostKeyType(ty.to_string())),
    }
}

impl GuestKeys {
    /// From the project's key files (`lazyinit_ssh::Keys`): the guest host
    /// key is kept in dropbear's format for the initramfs, cloud-init wants
    /// OpenSSH's, so it is converted with `dropbearconvert`.
    pub fn from_dropbear(
        host_private: &std::path::Path,
        host_public: &str,
        client_public: &str,
    ) -> Result<GuestKeys, KeyError> {
        let err = |detail: String| KeyError::Convert {
            path: host_private.display().to_string(),
            detail,
        };
        let dir = tempfile::tempdir().map_err(|e| err(e.to_string()))?;
        let out = dir.path().join("host_openssh");
        lazyinit_core::command::run(
            std::process::Command::new("dropbearconvert")
                .args(["dropbear", "openssh"])
                .arg(host_private)
                .arg(&out),
        )
        .map_err(|e| match e {
            CommandError::Spawn { source, .. } => err(format!(
                "dropbearconvert: {source} (apt-get install dropbear-bin)"
            )),
            e @ CommandError::Failed { .. } => err(e.detail()),
        })?;
        let keys = GuestKeys {
            host_private: std::fs::read_to_string(&out).map_err(|e| err(e.to_string()))?,
            host_public: host_public.trim().to_string(),
            client_public: client_public.trim().to_string(),
        };
        keys.validate()?;
        Ok(keys)
    }

    pub fn validate(&self) -> Result<(), KeyError> {
        cloud_init_key_name(&self.host_public)?;
        let p = self.host_private.trim();
        if !(p.starts_with("-----BEGIN ") && p.contains("PRIVATE KEY-----")) {
            return Err(KeyError::HostPrivate);
        }
        let c = self.client_public.trim();
        if c.lines().count() != 1 || c.split_whitespace().count() < 2 {
            return Err(KeyError::ClientPublic);
        }
        Ok(())
    }
}

/// The cloud-config document. `shutdown -h` at the expiry, with shutdown
/// behaviour terminate set on the instance, removes the instance and the
/// volumes marked delete-on-termination even if the harness is gone. The
/// minutes are computed on the instance from the absolute expiry, so a
/// slow boot does not extend the life.
pub fn cloud_config(keys: &GuestKeys, expires_at: DateTime<Utc>) -> Result<String, KeyError> {
    keys.validate()?;
    let kind = cloud_init_key_name(&keys.host_public)?;
    let private: String = keys
        .host_private
        .trim()
        .lines()
        .map(|l| format!("    {l}\n"))
        .collect();
    let epoch = expires_at.timestamp();
    Ok(format!(
        "#cloud-config\n\
         # lazyinit-bench instance; expires {expiry}\n\
         ssh_deletekeys: true\n\
         ssh_genkeytypes: []\n\
         ssh_keys:\n  \
           {kind}_private: |\n{private}  \
           {kind}_public: {host_public}\n\
         disable_root: false\n\
         ssh_pwauth: false\n\
         ssh_authorized_keys:\n  \
           - {client}\n\
         runcmd:\n  \
           - [sh, -c, 'left=$(( ({epoch} - $(date +%s)) / 60 )); [ \"$left\" -ge 1 ] || left=1; shutdown -h +\"$left\"']\n",
        expiry = rfc3339(expires_at),
        host_public = keys.host_public.trim(),
        client = keys.client_public.trim(),
    ))
}

/// User data as RunInstances wants it.
pub fn encode(user_data: &str) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(user_data.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    pub(crate) fn keys() -> GuestKeys {
        GuestKeys {
            host_private: "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjE=\nAAAA\n-----END OPENSSH PRIVATE KEY-----\n".into(),
            host_public: "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHost lazyinit-host".into(),
            client_public: "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIClient harness".into(),
        }
    }

    #[test]
    fn cloud_config_installs_keys_and_timer() {
        let exp = Utc.with_ymd_and_hms(2026, 11, 30, 0, 0, 0).unwrap();
        let doc = cloud_config(&keys(), exp).unwrap();
        assert!(doc.starts_with("#cloud-config\n"));
        assert!(
            doc.contains("  ed25519_private: |\n    -----BEGIN OPENSSH PRIVATE KEY-----\n    b3Bl")
        );
        assert!(doc.contains("    -----END OPENSSH PRIVATE KEY-----\n  ed25519_public: ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHost"));
        assert!(doc.contains("disable_root: false\n"));
        assert!(doc.contains("  - ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIClient harness\n"));
        assert!(doc.contains(&format!("({} - $(date +%s)) / 60", exp.timestamp())));
        assert!(doc.contains("shutdown -h +\"$left\""));
        // Debug output must not print the private key.
        assert!(!format!("{:?}", keys()).contains("PRIVATE"));
    }

    #[test]
    fn bad_keys_are_refused() {
        let exp = Utc.with_ymd_and_hms(2026, 11, 30, 0, 0, 0).unwrap();
        let mut k = keys();
        k.host_public = "ssh-dss AAAA".into();
        assert!(matches!(
            cloud_config(&k, exp),
            Err(KeyError::HostKeyType(_))
        ));
        let mut k = keys();
        k.host_private = "not a key".into();
        assert_eq!(cloud_config(&k, exp), Err(KeyError::HostPrivate));
        let mut k = keys();
        k.client_public = "ssh-ed25519\nAAAA".into();
        assert_eq!(cloud_config(&k, exp), Err(KeyError::ClientPublic));
        let mut k = keys();
        k.host_public = "ecdsa-sha2-nistp256 AAAA".into();
        assert!(cloud_config(&k, exp).unwrap().contains("ecdsa_private: |"));
    }

    /// With the real dropbear tools: generate a host key as the image
    /// helper does, convert it, and get a valid key set.
    #[test]
    fn dropbear_host_key_converts() {
        let dir = tempfile::tempdir().unwrap();
        let key = dir.path().join("host.dropbear");
        let gen = std::process::Command::new("dropbearkey")
            .args(["-t", "ed25519", "-f"])
            .arg(&key)
            .output()
            .expect("dropbearkey (dropbear-bin, scripts/setup-host.sh)");
        assert!(gen.status.success());
        let public = String::from_utf8_lossy(&gen.stdout)
            .lines()
            .find(|l| l.starts_with("ssh-ed25519 "))
            .unwrap()
            .to_string();
        let k = GuestKeys::from_dropbear(&key, &public, "ssh-ed25519 AAAAC3Nz client").unwrap();
        assert!(k
            .host_private
            .starts_with("-----BEGIN OPENSSH PRIVATE KEY-----"));
        let exp = Utc.with_ymd_and_hms(2026, 11, 30, 0, 0, 0).unwrap();
        assert!(cloud_config(&k, exp)
            .unwrap()
            .contains("ed25519_private: |"));
        let e = GuestKeys::from_dropbear(&dir.path().join("missing"), &public, "x y").unwrap_err();
        assert!(e.to_string().contains("cannot convert"), "{e}");
    }

    #[test]
    fn encode_is_base64() {
        assert_eq!(encode("#cloud-config\n"), "I2Nsb3VkLWNvbmZpZwo=");
    }
}

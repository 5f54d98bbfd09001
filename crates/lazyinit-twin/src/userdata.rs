//! What cloud-init would do with the provider's user data, as far as the
//! twin needs it: the host key and root's authorized key (the instance
//! answers SSH with the run's key only because the user data said so).
//! Reads the cloud-config that `lazyinit_ec2::userdata::cloud_config`
//! writes, not YAML in general.

/// The keys a cloud-config installs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InstalledKeys {
    /// OpenSSH private host key.
    pub host_private: String,
    pub host_public: String,
    pub authorized: Vec<String>,
}

pub fn keys(cloud_config: &str) -> Result<InstalledKeys, String> {
    let lines: Vec<&str> = cloud_config.lines().collect();
    let mut host_private = None;
    let mut host_public = None;
    let mut authorized = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let l = lines[i];
        let t = l.trim_start();
        let indent = l.len() - t.len();
        if t.ends_with("_private: |") && indent > 0 {
            let mut key = String::new();
            i += 1;
            while i < lines.len() {
                let k = lines[i];
                let kt = k.trim_start();
                if kt.is_empty() || k.len() - kt.len() <= indent {
                    break;
                }
                key.push_str(kt);
                key.push('\n');
                i += 1;
            }
            host_private = Some(key);
            continue;
        }
        if let Some((k, v)) = t.split_once(": ") {
            if k.ends_with("_public") && indent > 0 {
                host_public = Some(v.trim().to_string());
            }
        }
        if t == "ssh_authorized_keys:" {
            i += 1;
            while i < lines.len() {
                match lines[i].trim_start().strip_prefix("- ") {
                    Some(k) => authorized.push(k.trim().to_string()),
                    None => break,
                }
                i += 1;
            }
            continue;
        }
        i += 1;
    }
    Ok(InstalledKeys {
        host_private: host_private.ok_or("no ssh_keys.<type>_private in the user data")?,
        host_public: host_public.ok_or("no ssh_keys.<type>_public in the user data")?,
        authorized,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_what_the_provider_writes() {
        let k = lazyinit_ec2::GuestKeys {
            host_private: "-----BEGIN OPENSSH PRIVATE KEY-----\nb3Bl\nAAAA\n-----END OPENSSH PRIVATE KEY-----\n".into(),
            host_public: "ssh-ed25519 AAAAhost lazyinit-host".into(),
            client_public: "ssh-ed25519 AAAAclient harness".into(),
        };
        let doc = lazyinit_ec2::userdata::cloud_config(&k, chrono::Utc::now()).unwrap();
        let got = keys(&doc).unwrap();
        assert_eq!(got.host_private, k.host_private);
        assert_eq!(got.host_public, k.host_public);
        assert_eq!(got.authorized, [k.client_public]);
        assert!(keys("#cloud-config\n").is_err());
    }
}

//! `[provider-config.ec2]`: everything the EC2 provider reads from the experiment spec.
//!
//! Keys are kebab-case, unknown keys are refused (a typo must not silently
//! fall back to a default that costs money), durations are humantime
//! (`3h`, `5s`). Terraform's outputs fill the network part: see
//! [`from_terraform_outputs`] and `terraform/README.md`.

use std::collections::BTreeMap;
use std::time::Duration;

use lazyinit_core::Arch;
use serde::{Deserialize, Serialize};

/// Debian's AWS account, which publishes the official Debian AMIs.
pub const DEBIAN_AMI_OWNER: &str = "136693071363";

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct Ec2Config {
    /// AWS region; unset means the standard chain (AWS_REGION, profile).
    #[serde(default)]
    pub region: Option<String>,
    /// Named profile from ~/.aws/config; unset means the standard chain.
    #[serde(default)]
    pub profile: Option<String>,
    /// API endpoint override: an emulator or a VPC endpoint.
    #[serde(default)]
    pub endpoint_url: Option<String>,
    #[serde(default)]
    pub instance_types: PerArch,
    #[serde(default)]
    pub ami: AmiConfig,
    /// Unset: the default VPC's default subnet for the region.
    #[serde(default)]
    pub subnet_id: Option<String>,
    #[serde(default)]
    pub security_group_id: Option<String>,
    /// EC2 key pair; optional because user data installs the client key.
    #[serde(default)]
    pub key_name: Option<String>,
    #[serde(default)]
    pub volume: VolumeConfig,
    /// Life of every resource: the instance shuts itself down (and, with
    /// shutdown behaviour terminate, disappears) this long after launch,
    /// and `cleanup --expired` removes anything older.
    #[serde(with = "humantime_serde", default = "default_expiry")]
    pub expiry: Duration,
    /// `Owner` tag; defaults to $USER.
    #[serde(default)]
    pub owner: Option<String>,
    /// Login user before the kernel under test is installed.
    #[serde(default = "default_ssh_user")]
    pub ssh_user: String,
    /// Connect to the private address (harness running inside the VPC).
    #[serde(default)]
    pub use_private_ip: bool,
    /// Device name given to AttachVolume; Nitro guests see an NVMe device
    /// whatever this is, found by the volume id (see `nvme`).
    #[serde(default = "default_device_name")]
    pub device_name: String,
    #[serde(with = "humantime_serde", default = "default_poll_interval")]
    pub poll_interval: Duration,
    /// Longest one API call may take, its retries included (connect,
    /// read and attempt timeouts fit inside: see `client::ApiBudget`).
    #[serde(with = "humantime_serde", default = "default_api_timeout")]
    pub api_timeout: Duration,
    /// Longest wait for one state change (running, available, attached, terminated).
    #[serde(with = "humantime_serde", default = "default_state_timeout")]
    pub state_timeout: Duration,
    /// Time a cell spends beyond ext4lazyinit (boot, kernel install and
    /// reboot, mkfs, teardown), for cost estimates.
    #[serde(with = "humantime_serde", default = "default_cell_overhead")]
    pub cell_overhead: Duration,
    #[serde(default)]
    pub prices: PriceTable,
}

/// One value per architecture: `x86_64 = ...`, `arm64 = ...`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PerArch {
    pub x86_64: String,
    pub arm64: String,
}

impl Default for PerArch {
    fn default() -> Self {
        // The machines of the 2021 report.
        PerArch {
            x86_64: "c5.2xlarge".into(),
            arm64: "c6g.2xlarge".into(),
        }
    }
}

impl PerArch {
    pub fn get(&self, arch: Arch) -> &str {
        match arch {
            Arch::X86_64 => &self.x86_64,
            Arch::Arm64 => &self.arm64,
        }
    }
}

/// An AMI per arch, or a lookup for the newest image matching a filter.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct AmiConfig {
    // kebab-case would spell this `x86-64`; the arch is written as Arch prints it.
    #[serde(rename = "x86_64", default)]
    pub x86_64: Option<String>,
    #[serde(default)]
    pub arm64: Option<String>,
    #[serde(default)]
    pub lookup: AmiLookup,
}

impl AmiConfig {
    pub fn fixed(&self, arch: Arch) -> Option<&str> {
        match arch {
            Arch::X86_64 => self.x86_64.as_deref(),
            Arch::Arm64 => self.arm64.as_deref(),
        }
    }
}

/// DescribeImages filter; the architecture filter is added per arch.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct AmiLookup {
    pub owner: String,
    /// Image name glob, e.g. `debian-12-*`.
    pub name: String,
}

impl Default for AmiLookup {
    fn default() -> Self {
        // Debian 12 matches the host distribution the kernels are built on,
        // and its AMIs carry kexec-capable kernels and cloud-init.
        AmiLookup {
            owner: DEBIAN_AMI_OWNER.into(),
            name: "debian-12-*".into(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct VolumeConfig {
    #[serde(rename = "type", default = "default_volume_type")]
    pub volume_type: String,
    /// Provisioned IOPS (gp3: 3000..16000, io1/io2 required).
    #[serde(default)]
    pub iops: Option<i32>,
    /// MiB/s (gp3 only: 125..1000).
    #[serde(default)]
    pub throughput: Option<i32>,
}

impl Default for VolumeConfig {
    fn default() -> Self {
        VolumeConfig {
            volume_type: default_volume_type(),
            iops: None,
            throughput: None,
        }
    }
}

/// USD list prices. The defaults are us-east-1 on-demand prices (2024);
/// set your region's in the spec.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct PriceTable {
    /// USD per instance-hour, by instance type.
    #[serde(default = "default_instance_prices")]
    pub instance_hour: BTreeMap<String, f64>,
    /// USD per GB-month, by volume type.
    #[serde(default = "default_volume_prices")]
    pub volume_gb_month: BTreeMap<String, f64>,
    /// USD per provisioned IOPS-month above gp3's free 3000.
    #[serde(default = "default_gp3_iops_price")]
    pub gp3_iops_month: f64,
    /// USD per MiB/s-month above gp3's free 125.
    #[serde(default = "default_gp3_throughput_price")]
    pub gp3_throughput_month: f64,
}

impl Default for PriceTable {
    fn default() -> Self {
        PriceTable {
            instance_hour: default_instance_prices(),
            volume_gb_month: default_volume_prices(),
            gp3_iops_month: default_gp3_iops_price(),
            gp3_throughput_month: default_gp3_throughput_price(),
        }
    }
}

fn default_instance_prices() -> BTreeMap<String, f64> {
    [("c5.2xlarge", 0.34), ("c6g.2xlarge", 0.272)]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect()
}
fn default_volume_prices() -> BTreeMap<String, f64> {
    [("gp3", 0.08), ("gp2", 0.10), ("io2", 0.125), ("io1", 0.125)]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect()
}
fn default_gp3_iops_price() -> f64 {
    0.005
}
fn default_gp3_throughput_price() -> f64 {
    0.04
}
fn default_volume_type() -> String {
    "gp3".into()
}
fn default_expiry() -> Duration {
    Duration::from_secs(3 * 3600)
}
fn default_ssh_user() -> String {
    "root".into()
}
fn default_device_name() -> String {
    "/dev/sdf".into()
}
fn default_poll_interval() -> Duration {
    Duration::from_secs(5)
}
fn default_api_timeout() -> Duration {
    Duration::from_secs(40)
}
/// Longer than any answer EC2 takes, short enough that a dead endpoint
/// is said within minutes.
pub const MAX_API_TIMEOUT: Duration = Duration::from_secs(600);
fn default_state_timeout() -> Duration {
    Duration::from_secs(600)
}
fn default_cell_overhead() -> Duration {
    Duration::from_secs(300)
}

impl Default for Ec2Config {
    fn default() -> Self {
        // Same as an empty `[provider-config.ec2]` table.
        toml::from_str("").expect("an empty table takes every default")
    }
}

#[derive(Debug, thiserror::Error)]
#[error("[provider-config.ec2]: {0}")]
pub struct ConfigError(pub String);

impl Ec2Config {
    pub fn from_toml(text: &str) -> Result<Ec2Config, ConfigError> {
        let cfg: Ec2Config = toml::from_str(text).map_err(|e| ConfigError(e.to_string()))?;
        cfg.validate()?;
        Ok(cfg)
    }

    /// Checks what the API would only refuse after an instance is running.
    /// Combinations the API itself checks (IOPS for a volume type, ...) are
    /// left to it, and a refusal there is cleaned up like any failure.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.expiry < Duration::from_secs(60) {
            return Err(ConfigError(format!(
                "expiry {} is under a minute: instances schedule `shutdown -h +<minutes>`",
                humantime::format_duration(self.expiry)
            )));
        }
        // Bounded: an ExpiresAt tag past it would keep a leak alive for
        // ages (and a huge one overflows the date arithmetic).
        if self.expiry > Duration::from_secs(7 * 86_400) {
            return Err(ConfigError(format!(
                "expiry {} is over 7 days: use at most 7d (a run that long is a leak)",
                humantime::format_duration(self.expiry)
            )));
        }
        if self.poll_interval.is_zero() || self.state_timeout < self.poll_interval {
            return Err(ConfigError(
                "poll-interval must be positive and below state-timeout".into(),
            ));
        }
        if self.api_timeout < Duration::from_secs(1) || self.api_timeout > MAX_API_TIMEOUT {
            return Err(ConfigError(format!(
                "api-timeout {} must be between 1s and {}",
                humantime::format_duration(self.api_timeout),
                humantime::format_duration(MAX_API_TIMEOUT)
            )));
        }
        if !self.device_name.starts_with("/dev/") {
            return Err(ConfigError(format!(
                "device-name `{}` must be a /dev path such as /dev/sdf",
                self.device_name
            )));
        }
        for arch in Arch::ALL {
            if let Some(ami) = self.ami.fixed(arch) {
                if !ami.starts_with("ami-") {
                    return Err(ConfigError(format!(
                        "ami.{arch} `{ami}` is not an AMI id (ami-...)"
                    )));
                }
            }
        }
        Ok(())
    }

    /// The command that removes what a run of this configuration left
    /// behind: its run id, its owner, and where its API is.
    pub fn cleanup_command(&self, run_id: &str) -> String {
        let mut c = format!(
            "lazyinit-bench cleanup --run-id {run_id} --owner {}",
            self.owner_tag()
        );
        for (flag, v) in [
            ("--region", &self.region),
            ("--profile", &self.profile),
            ("--endpoint-url", &self.endpoint_url),
        ] {
            if let Some(v) = v {
                c.push_str(&format!(" {flag} {v}"));
            }
        }
        c
    }

    /// The `Owner` tag: configured, else the login name.
    pub fn owner_tag(&self) -> String {
        self.owner
            .clone()
            .or_else(|| std::env::var("USER").ok())
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| "unknown".into())
    }
}

/// Reads the `[provider-config.ec2]` table of an experiment spec; a spec without
/// one gets every default.
pub fn from_spec_file(path: &std::path::Path) -> Result<Ec2Config, ConfigError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| ConfigError(format!("cannot read {}: {e}", path.display())))?;
    from_spec(&text).map_err(|e| ConfigError(format!("{}: {}", path.display(), e.0)))
}

/// The `[provider-config.ec2]` table of a spec's text.
pub fn from_spec(text: &str) -> Result<Ec2Config, ConfigError> {
    let spec: toml::Table = toml::from_str(text).map_err(|e| ConfigError(e.to_string()))?;
    let table = spec
        .get("provider-config")
        .and_then(|p| p.get("ec2"))
        .cloned()
        .unwrap_or_else(|| toml::Value::Table(toml::Table::new()));
    let cfg: Ec2Config = table
        .try_into()
        .map_err(|e: toml::de::Error| ConfigError(e.to_string()))?;
    cfg.validate()?;
    Ok(cfg)
}

/// Turns `terraform output -json` into the network keys of a
/// `[provider-config.ec2]` table (region, subnet-id, security-group-id, key-name),
/// ready to paste into a spec.
pub fn from_terraform_outputs(json: &str) -> Result<String, ConfigError> {
    let v: serde_json::Value = serde_json::from_str(json)
        .map_err(|e| ConfigError(format!("terraform output is not JSON: {e}")))?;
    let get = |k: &str| -> Result<String, ConfigError> {
        v.get(k)
            .and_then(|o| o.get("value"))
            .and_then(|x| x.as_str())
            .map(str::to_string)
            .ok_or_else(|| {
                ConfigError(format!(
                    "terraform output `{k}` is missing: run `terraform apply` in terraform/ first"
                ))
            })
    };
    let mut t = toml::map::Map::new();
    for (out, key) in [
        ("region", "region"),
        ("subnet_id", "subnet-id"),
        ("security_group_id", "security-group-id"),
        ("key_name", "key-name"),
        // The policy refuses launches tagged with any other Owner.
        ("owner", "owner"),
    ] {
        t.insert(key.into(), toml::Value::String(get(out)?));
    }
    let body = toml::to_string(&toml::Value::Table(t)).expect("strings serialise");
    Ok(format!("[provider-config.ec2]\n{body}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_table_takes_report_defaults() {
        let c = Ec2Config::from_toml("").unwrap();
        assert_eq!(c.instance_types.get(Arch::X86_64), "c5.2xlarge");
        assert_eq!(c.instance_types.get(Arch::Arm64), "c6g.2xlarge");
        assert_eq!(c.volume.volume_type, "gp3");
        assert_eq!(c.expiry, Duration::from_secs(3 * 3600));
        assert_eq!(c.ami.lookup.owner, DEBIAN_AMI_OWNER);
        assert_eq!(c.ssh_user, "root");
        assert_eq!(c, Ec2Config::default());
    }

    #[test]
    fn full_table_parses() {
        let c = Ec2Config::from_toml(
            r#"
            region = "eu-west-1"
            profile = "bench"
            endpoint-url = "http://127.0.0.1:5000"
            subnet-id = "subnet-1"
            security-group-id = "sg-1"
            key-name = "lazyinit"
            expiry = "90m"
            owner = "ci"
            poll-interval = "200ms"
            instance-types = { x86_64 = "c5.xlarge", arm64 = "c6g.xlarge" }
            ami = { arm64 = "ami-0123", lookup = { owner = "137112412989", name = "al2023-*" } }
            volume = { type = "io2", iops = 6000 }
            prices = { instance-hour = { "c5.xlarge" = 0.17 } }
            "#,
        )
        .unwrap();
        assert_eq!(c.expiry, Duration::from_secs(5400));
        assert_eq!(c.poll_interval, Duration::from_millis(200));
        assert_eq!(c.ami.fixed(Arch::Arm64), Some("ami-0123"));
        assert_eq!(c.ami.fixed(Arch::X86_64), None);
        assert_eq!(c.volume.iops, Some(6000));
        assert_eq!(c.prices.instance_hour["c5.xlarge"], 0.17);
        // A partial price table keeps the other defaults.
        assert_eq!(c.prices.volume_gb_month["gp3"], 0.08);
    }

    #[test]
    fn typos_and_bad_values_are_refused() {
        let e = Ec2Config::from_toml("subnet = \"subnet-1\"").unwrap_err();
        assert!(e.to_string().contains("unknown field `subnet`"), "{e}");
        let e = Ec2Config::from_toml("expiry = \"3 hours and a bit\"").unwrap_err();
        assert!(e.to_string().contains("expiry"), "{e}");
        let e = Ec2Config::from_toml("expiry = \"10s\"").unwrap_err();
        assert!(e.to_string().contains("under a minute"), "{e}");
        let e = Ec2Config::from_toml("ami = { x86_64 = \"debian\" }").unwrap_err();
        assert!(e.to_string().contains("not an AMI id"), "{e}");
        let e = Ec2Config::from_toml("device-name = \"sdf\"").unwrap_err();
        assert!(e.to_string().contains("/dev path"), "{e}");
        for t in ["0s", "11m"] {
            let e = Ec2Config::from_toml(&format!("api-timeout = \"{t}\"")).unwrap_err();
            assert!(e.to_string().contains("between 1s and 10m"), "{e}");
        }
    }

    #[test]
    fn cleanup_command_names_run_owner_and_api() {
        let c = Ec2Config::from_toml(
            "region = \"eu-west-1\"\nowner = \"ci\"\nendpoint-url = \"http://127.0.0.1:5000\"",
        )
        .unwrap();
        assert_eq!(
            c.cleanup_command("quick-1"),
            "lazyinit-bench cleanup --run-id quick-1 --owner ci --region eu-west-1 --endpoint-url http://127.0.0.1:5000"
        );
    }

    #[test]
    fn spec_table_is_found_or_defaulted() {
        let c = from_spec(
            "[provider-config.ec2]\nregion = \"eu-north-1\"\n[provider-config.qemu]\njobs = 2\n",
        )
        .unwrap();
        assert_eq!(c.region.as_deref(), Some("eu-north-1"));
        assert_eq!(from_spec("name = \"x\"\n").unwrap(), Ec2Config::default());
        let e = from_spec("[provider-config.ec2]\nregoin = \"x\"\n").unwrap_err();
        assert!(e.to_string().contains("regoin"), "{e}");
    }

    #[test]
    fn terraform_outputs_become_a_table() {
        let json = r#"{
          "region": {"sensitive": false, "type": "string", "value": "us-east-1"},
          "subnet_id": {"sensitive": false, "type": "string", "value": "subnet-0a"},
          "security_group_id": {"sensitive": false, "type": "string", "value": "sg-0b"},
          "key_name": {"sensitive": false, "type": "string", "value": "lazyinit-bench"},
          "owner": {"sensitive": false, "type": "string", "value": "ci"},
          "harness_policy_arn": {"sensitive": false, "type": "string", "value": "arn:x"}
        }"#;
        let t = from_terraform_outputs(json).unwrap();
        assert!(t.starts_with("[provider-config.ec2]\n"), "{t}");
        // The table must be accepted by the config it feeds.
        let body = t.trim_start_matches("[provider-config.ec2]\n");
        let c = Ec2Config::from_toml(body).unwrap();
        assert_eq!(c.subnet_id.as_deref(), Some("subnet-0a"));
        assert_eq!(c.security_group_id.as_deref(), Some("sg-0b"));
        assert_eq!(c.region.as_deref(), Some("us-east-1"));
        // The Owner tag the IAM policy requires.
        assert_eq!(c.owner.as_deref(), Some("ci"));
        let e = from_terraform_outputs("{}").unwrap_err();
        assert!(e.to_string().contains("terraform apply"), "{e}");
    }
}

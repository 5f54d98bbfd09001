//! Where the harness reaches a launched instance: the one seam between the
//! provider and whatever plays the instance.
//!
//! In production that is the instance itself, on port 22 of its public (or,
//! with `use-private-ip`, private) address: [`InstanceAddress`]. A test twin
//! (a local QEMU guest playing each instance the EC2 emulator runs, crate
//! `lazyinit-twin`) gives the provider its own resolver through
//! [`crate::Ec2Provider::with_instance_resolver`]; production code never
//! calls that, and nothing else of the provider changes.
//!
//! The volume needs no seam: a twin presents each attached volume with the
//! NVMe serial Nitro gives an EBS volume ([`crate::nvme::serial`]), and the
//! guest finds it by that serial exactly as on a real instance.

use async_trait::async_trait;

use crate::error::Ec2Error;
use crate::ops::InstanceView;

/// The `accel` value of rows measured on real EC2 instances.
pub const NITRO: &str = "nitro";

#[async_trait]
pub trait InstanceResolver: Send + Sync {
    /// Host and port where SSH answers for `instance`, which is running
    /// with its volume attached.
    async fn ssh_endpoint(&self, instance: &InstanceView) -> Result<(String, u16), Ec2Error>;

    /// What the rows measured through this resolver ran on (their `accel`
    /// column): [`NITRO`], or a twin's `twin-...` value
    /// (`lazyinit_core::results::is_twin`).
    fn platform(&self) -> String;
}

/// The instance's own address, port 22.
#[derive(Debug, Clone, Copy)]
pub struct InstanceAddress {
    pub use_private_ip: bool,
}

#[async_trait]
impl InstanceResolver for InstanceAddress {
    async fn ssh_endpoint(&self, i: &InstanceView) -> Result<(String, u16), Ec2Error> {
        let host = if self.use_private_ip {
            i.private_ip.clone()
        } else {
            i.public_ip.clone().or(i.private_ip.clone())
        };
        let host = host.ok_or_else(|| {
            Ec2Error::BadInput(format!(
                "instance {} has no {} IP address: use a subnet that assigns public IPs, or use-private-ip = true",
                i.id,
                if self.use_private_ip { "private" } else { "public or private" }
            ))
        })?;
        Ok((host, 22))
    }

    fn platform(&self) -> String {
        NITRO.into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view(public: Option<&str>, private: Option<&str>) -> InstanceView {
        InstanceView {
            id: "i-1".into(),
            state: "running".into(),
            az: Some("us-east-1a".into()),
            public_ip: public.map(Into::into),
            private_ip: private.map(Into::into),
            tags: vec![],
        }
    }

    #[tokio::test]
    async fn public_first_private_on_request() {
        let public = InstanceAddress {
            use_private_ip: false,
        };
        let private = InstanceAddress {
            use_private_ip: true,
        };
        let both = view(Some("3.3.3.3"), Some("10.0.0.5"));
        assert_eq!(
            public.ssh_endpoint(&both).await.unwrap(),
            ("3.3.3.3".into(), 22)
        );
        assert_eq!(
            private.ssh_endpoint(&both).await.unwrap(),
            ("10.0.0.5".into(), 22)
        );
        let only_private = view(None, Some("10.0.0.5"));
        assert_eq!(
            public.ssh_endpoint(&only_private).await.unwrap().0,
            "10.0.0.5"
        );
        let e = private
            .ssh_endpoint(&view(Some("3.3.3.3"), None))
            .await
            .unwrap_err();
        assert!(e.to_string().contains("no private IP"), "{e}");
        assert_eq!(public.platform(), "nitro");
    }
}

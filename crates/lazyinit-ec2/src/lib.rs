//! The EC2 provider: c5 / c6g instances with EBS volumes.
//!
//! [`Ec2Provider`] implements the shared `Provider` trait: per cell one
//! instance of the arch's type and one blank EBS volume of the cell's size,
//! both tagged at creation ([`tags`]), both removed on every exit path
//! ([`resources`]) and, failing that, by the instance's own expiry timer
//! (carried across the kexec into the kernel under test) and by
//! [`cleanup::cleanup`]. [`cost::estimate`] prices a plan. Tested against
//! moto's EC2 emulator (`scripts/ec2-emulator.sh`), and end to end on a
//! twin of the instances ([`reach`], crate `lazyinit-twin`).

pub mod cleanup;
pub mod client;
pub mod config;
pub mod cost;
pub mod error;
pub mod machine;
pub mod nvme;
pub mod ops;
pub mod provider;
pub mod reach;
pub mod resources;
pub mod tags;
pub mod userdata;
pub mod wait;

pub use cleanup::{cleanup, CleanupReport, Sweep};
pub use client::{ApiCounter, Counts, IAM_ACTIONS};
pub use config::Ec2Config;
pub use cost::{api_calls, estimate, CostEstimate};
pub use error::Ec2Error;
pub use machine::kexec_plan;
pub use machine::{Ec2Machine, LaunchRecord};
pub use provider::{Ec2Provider, KeyLoader};
pub use reach::{InstanceAddress, InstanceResolver};
pub use userdata::GuestKeys;

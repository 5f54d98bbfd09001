//! Is the booted guest the one the cell asked for? Pure, so every refusal
//! reason is unit-tested.

use super::Expectation;
use crate::GuestError;

/// Checks the guest's facts against the expectation.
pub fn verify_facts(
    facts: &std::collections::BTreeMap<String, String>,
    exp: &Expectation,
) -> Result<(), GuestError> {
    let get = |k: &str| facts.get(k).map(String::as_str).unwrap_or("");
    if get("release") != exp.kernel_release {
        return Err(GuestError::WrongKernel {
            what: "release".into(),
            expected: exp.kernel_release.clone(),
            found: get("release").into(),
        });
    }
    if get("machine") != exp.arch.uname_machine() {
        return Err(GuestError::WrongKernel {
            what: "machine".into(),
            expected: exp.arch.uname_machine().into(),
            found: get("machine").into(),
        });
    }
    if get("hz") != exp.hz.to_string() {
        return Err(GuestError::WrongKernel {
            what: "CONFIG_HZ (from /proc/config.gz)".into(),
            expected: exp.hz.to_string(),
            found: get("hz").into(),
        });
    }
    let variant_tag = format!("-{}", exp.variant);
    if !get("localversion").ends_with(&variant_tag) {
        return Err(GuestError::WrongKernel {
            what: "variant (CONFIG_LOCALVERSION)".into(),
            expected: format!("…{variant_tag}"),
            found: get("localversion").into(),
        });
    }
    let cs = get("clocksource");
    if cs.is_empty() || cs.contains("jiffies") {
        return Err(GuestError::JiffiesClocksource(cs.into()));
    }
    if get("tracing") != "yes" {
        return Err(GuestError::NoTracing);
    }
    Ok(())
}

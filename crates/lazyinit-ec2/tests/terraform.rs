//! Offline checks of terraform/ (the provider registry `terraform init`
//! needs is unreachable): parse every .tf file with hcl-rs and check the
//! IAM policy against the actions the harness calls, the security group
//! against "SSH only, from the given CIDR", and the outputs against what
//! the config reads.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use hcl::{Block, Body, Expression};
use lazyinit_ec2::IAM_ACTIONS;

fn terraform_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../terraform")
}

/// All .tf files of terraform/, parsed, as one list of top-level blocks.
fn blocks() -> Vec<Block> {
    let mut out = Vec::new();
    let mut n = 0;
    for entry in std::fs::read_dir(terraform_dir()).expect("terraform/ exists") {
        let path = entry.unwrap().path();
        if path.extension().and_then(|e| e.to_str()) != Some("tf") {
            continue;
        }
        n += 1;
        let text = std::fs::read_to_string(&path).unwrap();
        let body: Body = hcl::parse(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        out.extend(body.blocks().cloned());
    }
    assert!(n >= 5, "expected the terraform files, found {n}");
    out
}

fn find<'a>(blocks: &'a [Block], kind: &str, labels: &[&str]) -> &'a Block {
    blocks
        .iter()
        .find(|b| {
            b.identifier() == kind
                && b.labels()
                    .iter()
                    .map(|l| l.as_str())
                    .eq(labels.iter().copied())
        })
        .unwrap_or_else(|| panic!("no {kind} {labels:?} in terraform/"))
}

fn attr<'a>(b: &'a Body, key: &str) -> Option<&'a Expression> {
    b.attributes().find(|a| a.key() == key).map(|a| a.expr())
}

fn strings(e: &Expression) -> Vec<String> {
    match e {
        Expression::String(s) => vec![s.clone()],
        Expression::TemplateExpr(t) => vec![t.to_string()],
        Expression::Array(v) => v.iter().flat_map(strings).collect(),
        other => panic!("expected string(s), found {other:?}"),
    }
}

fn statements(blocks: &[Block]) -> Vec<&Body> {
    let doc = find(blocks, "data", &["aws_iam_policy_document", "harness"]);
    doc.body()
        .blocks()
        .filter(|b| b.identifier() == "statement")
        .map(|b| b.body())
        .collect()
}

#[test]
fn iam_policy_grants_exactly_the_harness_actions() {
    let blocks = blocks();
    let mut granted = BTreeSet::new();
    for st in statements(&blocks) {
        assert_eq!(
            attr(st, "effect").map(strings),
            Some(vec!["Allow".to_string()])
        );
        let actions = strings(attr(st, "actions").expect("statement has actions"));
        assert!(!actions.is_empty(), "a statement without actions");
        for a in actions {
            let name = a
                .strip_prefix("ec2:")
                .unwrap_or_else(|| panic!("{a} is not an EC2 action"));
            assert!(!name.contains('*'), "wildcard action {a}");
            granted.insert(name.to_string());
        }
    }
    let wanted: BTreeSet<String> = IAM_ACTIONS.iter().map(|s| s.to_string()).collect();
    let missing: Vec<_> = wanted.difference(&granted).collect();
    let extra: Vec<_> = granted.difference(&wanted).collect();
    assert!(missing.is_empty(), "terraform/iam.tf lacks {missing:?}");
    assert!(
        extra.is_empty(),
        "terraform/iam.tf grants {extra:?}, which the harness never calls"
    );
}

/// A condition block: its test, its variable, and its values with each
/// `var.X` read as variables.tf's default for X (a variable without one,
/// such as `var.owner`, stays as written).
#[derive(Debug, Clone, PartialEq)]
struct Cond {
    test: String,
    variable: String,
    values: Vec<String>,
}

fn defaults(blocks: &[Block]) -> BTreeMap<String, Vec<String>> {
    blocks
        .iter()
        .filter(|b| b.identifier() == "variable")
        .filter_map(|b| {
            let d = attr(b.body(), "default")?;
            let vals = match d {
                Expression::Array(_) | Expression::String(_) => strings(d),
                _ => return None,
            };
            Some((format!("var.{}", b.labels()[0].as_str()), vals))
        })
        .collect()
}

fn values(e: &Expression, vars: &BTreeMap<String, Vec<String>>) -> Vec<String> {
    match e {
        Expression::Traversal(_) => {
            let name = e.to_string();
            vars.get(&name).cloned().unwrap_or(vec![name])
        }
        Expression::Array(v) => v.iter().flat_map(|x| values(x, vars)).collect(),
        other => strings(other),
    }
}

fn conditions(st: &Body, vars: &BTreeMap<String, Vec<String>>) -> Vec<Cond> {
    st.blocks()
        .filter(|b| b.identifier() == "condition")
        .map(|c| {
            let one =
                |k| strings(attr(c.body(), k).unwrap_or_else(|| panic!("condition without {k}")));
            Cond {
                test: one("test").concat(),
                variable: one("variable").concat(),
                values: values(attr(c.body(), "values").expect("condition values"), vars),
            }
        })
        .collect()
}

fn cond(test: &str, variable: &str, values: &[&str]) -> Cond {
    Cond {
        test: test.into(),
        variable: variable.into(),
        values: values.iter().map(|v| v.to_string()).collect(),
    }
}

/// An IAM StringLike pattern (`*` and `?`) against a value.
fn glob(pattern: &str, v: &str) -> bool {
    match (pattern.chars().next(), v.chars().next()) {
        (None, None) => true,
        (Some('*'), _) => glob(&pattern[1..], v) || (!v.is_empty() && glob(pattern, &v[1..])),
        (Some('?'), Some(c)) => glob(&pattern[1..], &v[c.len_utf8()..]),
        (Some(p), Some(c)) if p == c => glob(&pattern[1..], &v[c.len_utf8()..]),
        _ => false,
    }
}

/// What every statement granting an action on a kind of resource must
/// require, values included: the project's tags, the owner, the report's
/// instance types, IMDSv2, Debian's images, the one attribute modified.
fn required(action: &str, resource: &str) -> Vec<Cond> {
    let project_request = cond(
        "StringEquals",
        "aws:RequestTag/Project",
        &["lazyinit-bench"],
    );
    let owner_request = cond("StringEquals", "aws:RequestTag/Owner", &["var.owner"]);
    let project_resource = cond(
        "StringEquals",
        "aws:ResourceTag/Project",
        &["lazyinit-bench"],
    );
    match (action, resource) {
        ("ec2:RunInstances", "instance") => vec![
            project_request,
            owner_request,
            cond("StringEquals", "ec2:MetadataHttpTokens", &["required"]),
            cond(
                "NumericLessThanEquals",
                "ec2:MetadataHttpPutResponseHopLimit",
                &["1"],
            ),
        ],
        ("ec2:RunInstances", "image") => vec![cond(
            "StringEquals",
            "ec2:Owner",
            &[lazyinit_ec2::config::DEBIAN_AMI_OWNER],
        )],
        ("ec2:RunInstances" | "ec2:CreateVolume", "volume") => vec![project_request, owner_request],
        ("ec2:CreateTags", _) => vec![cond(
            "StringEquals",
            "ec2:CreateAction",
            &["RunInstances", "CreateVolume"],
        )],
        ("ec2:ModifyInstanceAttribute", _) => vec![
            project_resource,
            cond(
                "StringEqualsIgnoreCase",
                "ec2:Attribute",
                &["BlockDeviceMapping"],
            ),
        ],
        (_, "instance" | "volume") => vec![project_resource],
        _ => vec![],
    }
}

/// The kind of resource an ARN pattern names (`instance`, `image`, ...).
fn kind(resource: &str) -> &str {
    resource
        .rsplit(':')
        .next()
        .and_then(|r| r.split('/').next())
        .unwrap_or(resource)
}

#[test]
fn iam_conditions_have_the_values_the_harness_needs() {
    let blocks = blocks();
    let vars = defaults(&blocks);
    let mut checked = BTreeSet::new();
    for st in statements(&blocks) {
        let actions = strings(attr(st, "actions").expect("statement has actions"));
        let resources = strings(attr(st, "resources").expect("statement has resources"));
        assert!(
            !actions.is_empty() && !resources.is_empty(),
            "empty statement"
        );
        let conds = conditions(st, &vars);
        for c in &conds {
            // Both pass a request that lacks the key altogether.
            assert!(
                !c.test.starts_with("ForAllValues") && !c.test.ends_with("IfExists"),
                "{c:?} passes when the key is absent"
            );
            assert!(!c.values.is_empty(), "{c:?} has no values");
        }
        if resources == ["*"] {
            assert!(
                actions.iter().all(|a| a.starts_with("ec2:Describe")),
                "only Describe* may use Resource *: {actions:?}"
            );
            continue;
        }
        for a in &actions {
            for r in &resources {
                for want in required(a, kind(r)) {
                    assert!(
                        conds.contains(&want),
                        "{a} on {r} lacks {want:?}; it has {conds:?}"
                    );
                }
                checked.insert((a.clone(), kind(r).to_string()));
            }
        }
        // Instance types: patterns of the c5 / c6g classes only, matching
        // the types the harness launches by default.
        if actions.iter().any(|a| a == "ec2:RunInstances")
            && resources.iter().any(|r| kind(r) == "instance")
        {
            let types = conds
                .iter()
                .find(|c| c.variable == "ec2:InstanceType")
                .expect("RunInstances on instances limits ec2:InstanceType");
            assert_eq!(types.test, "StringLike");
            assert!(
                types
                    .values
                    .iter()
                    .all(|p| p.starts_with("c5.") || p.starts_with("c6g.")),
                "instance types beyond c5/c6g: {:?}",
                types.values
            );
            let cfg = lazyinit_ec2::Ec2Config::default();
            for arch in lazyinit_core::Arch::ALL {
                let t = cfg.instance_types.get(arch);
                assert!(
                    types.values.iter().any(|p| glob(p, t)),
                    "{t} is not allowed"
                );
            }
        }
    }
    // Every mutation the harness makes was found and checked.
    for want in [
        ("ec2:RunInstances", "instance"),
        ("ec2:RunInstances", "image"),
        ("ec2:RunInstances", "volume"),
        ("ec2:CreateVolume", "volume"),
        ("ec2:CreateTags", "instance"),
        ("ec2:ModifyInstanceAttribute", "instance"),
        ("ec2:TerminateInstances", "instance"),
        ("ec2:DeleteVolume", "volume"),
        ("ec2:AttachVolume", "volume"),
    ] {
        assert!(
            checked.contains(&(want.0.to_string(), want.1.to_string())),
            "no statement grants {} on {}",
            want.0,
            want.1
        );
    }
}

#[test]
fn glob_matches_as_iam_string_like() {
    assert!(glob("c5.*", "c5.2xlarge"));
    assert!(!glob("c5.*", "c5d.2xlarge"));
    assert!(glob("c6g.?xlarge", "c6g.2xlarge"));
    assert!(!glob("c6g.*", "p4d.24xlarge"));
}

/// `terraform plan` over variables.tf alone (no provider to download):
/// the variable's own validation block refuses every CIDR wider than /16,
/// `0.0.0.0/1` included, and admits a host and a /16.
#[test]
fn ssh_cidr_wider_than_a_16_is_refused_by_terraform() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(
        terraform_dir().join("variables.tf"),
        dir.path().join("variables.tf"),
    )
    .unwrap();
    let tf = |args: &[&str]| {
        std::process::Command::new("terraform")
            .args(args)
            .current_dir(dir.path())
            .env("TF_IN_AUTOMATION", "1")
            .env("NO_COLOR", "1")
            .output()
            .unwrap_or_else(|e| panic!("cannot run terraform (scripts/test.sh installs it): {e}"))
    };
    let init = tf(&["init", "-input=false", "-backend=false"]);
    assert!(
        init.status.success(),
        "{}",
        String::from_utf8_lossy(&init.stderr)
    );
    let plan = |cidr: &str| {
        let var = format!("ssh_cidr={cidr}");
        let o = tf(&[
            "plan",
            "-input=false",
            "-no-color",
            "-var",
            &var,
            "-var",
            "owner=ci",
            "-var",
            "public_key=ssh-ed25519 AAAA",
        ]);
        (
            o.status.success(),
            String::from_utf8_lossy(&o.stderr).into_owned(),
        )
    };
    for ok in ["203.0.113.7/32", "10.42.0.0/16", "192.0.2.0/24"] {
        let (passed, err) = plan(ok);
        assert!(passed, "{ok} refused: {err}");
    }
    for bad in [
        "0.0.0.0/0",
        "0.0.0.0/1",
        "128.0.0.0/1",
        "10.0.0.0/8",
        "203.0.113.7/24",
        "::/0",
        "any",
    ] {
        let (passed, err) = plan(bad);
        assert!(!passed, "{bad} accepted");
        assert!(
            err.contains("ssh_cidr must be an IPv4 network of /16 or narrower"),
            "{bad}: {err}"
        );
    }
}

#[test]
fn security_group_admits_ssh_only_from_the_given_cidr() {
    let blocks = blocks();
    let ingress: Vec<&Block> = blocks
        .iter()
        .filter(|b| {
            b.identifier() == "resource"
                && b.labels().first().map(|l| l.as_str())
                    == Some("aws_vpc_security_group_ingress_rule")
        })
        .collect();
    assert_eq!(ingress.len(), 1, "one ingress rule");
    let b = ingress[0].body();
    let num = |k: &str| match attr(b, k) {
        Some(Expression::Number(n)) => n.as_u64(),
        other => panic!("{k}: {other:?}"),
    };
    assert_eq!((num("from_port"), num("to_port")), (Some(22), Some(22)));
    assert_eq!(strings(attr(b, "ip_protocol").unwrap()), ["tcp"]);
    match attr(b, "cidr_ipv4") {
        Some(Expression::Traversal(t)) => {
            assert_eq!(Expression::Traversal(t.clone()).to_string(), "var.ssh_cidr")
        }
        other => panic!("ingress source must be var.ssh_cidr, found {other:?}"),
    }
    // No inline ingress on the group itself.
    let sg = find(&blocks, "resource", &["aws_security_group", "ssh"]);
    assert!(sg.body().blocks().all(|b| b.identifier() != "ingress"));
}

#[test]
fn outputs_feed_the_harness_config() {
    let blocks = blocks();
    // Simulate `terraform output -json` with every output set, and let the
    // config helper read it: an output renamed on either side fails here.
    let mut json = serde_json::Map::new();
    for b in blocks.iter().filter(|b| b.identifier() == "output") {
        let name = b.labels()[0].as_str().to_string();
        json.insert(
            name.clone(),
            serde_json::json!({ "value": format!("{name}-value") }),
        );
    }
    let table =
        lazyinit_ec2::config::from_terraform_outputs(&serde_json::Value::Object(json).to_string())
            .expect("every output the config reads exists");
    let cfg =
        lazyinit_ec2::Ec2Config::from_toml(table.trim_start_matches("[provider-config.ec2]\n"))
            .unwrap();
    assert_eq!(cfg.subnet_id.as_deref(), Some("subnet_id-value"));
    assert_eq!(
        cfg.security_group_id.as_deref(),
        Some("security_group_id-value")
    );
    assert_eq!(cfg.key_name.as_deref(), Some("key_name-value"));
}

/// `terraform fmt -check` (scripts/test.sh installs terraform, and refuses
/// to run without it): a missing terraform fails, never skips.
#[test]
fn terraform_fmt_is_clean() {
    let out = match std::process::Command::new("terraform")
        .args(["fmt", "-check", "-recursive"])
        .arg(terraform_dir())
        .output()
    {
        Ok(o) => o,
        Err(e) => {
            panic!("cannot run terraform (install terraform >= 1.5; scripts/test.sh needs it): {e}")
        }
    };
    assert!(
        out.status.success(),
        "terraform fmt -check failed: {}",
        String::from_utf8_lossy(&out.stdout)
    );
}

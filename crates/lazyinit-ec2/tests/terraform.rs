//! Offline checks of terraform/ (the provider registry `terraform init`
//! needs is unreachable): parse every .tf file with hcl-rs and check the
//! IAM policy against the actions the harness calls, the security group
//! against "SSH only, from the given CIDR", and the outputs against what
//! the config reads.

use std::collections::BTreeSet;
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
        for a in strings(attr(st, "actions").expect("statement has actions")) {
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

#[test]
fn iam_mutations_are_scoped_by_tag() {
    let blocks = blocks();
    for st in statements(&blocks) {
        let actions = strings(attr(st, "actions").unwrap());
        let resources = strings(attr(st, "resources").unwrap());
        let conditions: Vec<String> = st
            .blocks()
            .filter(|b| b.identifier() == "condition")
            .flat_map(|c| strings(attr(c.body(), "variable").unwrap()))
            .collect();
        let read_only = actions.iter().all(|a| a.starts_with("ec2:Describe"));
        if resources == ["*"] {
            assert!(read_only, "only Describe* may use Resource *: {actions:?}");
            continue;
        }
        let touches_ours = resources
            .iter()
            .any(|r| r.contains(":instance/") || r.contains(":volume/"));
        if touches_ours {
            let want = if actions.iter().any(|a| a == "ec2:CreateTags") {
                "ec2:CreateAction"
            } else if actions
                .iter()
                .any(|a| a == "ec2:RunInstances" || a == "ec2:CreateVolume")
            {
                "aws:RequestTag/Project"
            } else {
                "aws:ResourceTag/Project"
            };
            assert!(
                conditions.iter().any(|c| c == want),
                "{actions:?} on {resources:?} lacks condition {want}"
            );
        }
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

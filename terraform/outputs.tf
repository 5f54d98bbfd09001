# The first five are the keys of the spec's [provider-config.ec2] table;
# lazyinit_ec2::config::from_terraform_outputs reads these names from
# `terraform output -json` (see README.md here).

output "region" {
  description = "region of [provider-config.ec2]"
  value       = var.region
}

output "subnet_id" {
  description = "subnet-id of [provider-config.ec2]"
  value       = aws_subnet.bench.id
}

output "security_group_id" {
  description = "security-group-id of [provider-config.ec2]"
  value       = aws_security_group.ssh.id
}

output "key_name" {
  description = "key-name of [provider-config.ec2]"
  value       = aws_key_pair.harness.key_name
}

output "owner" {
  description = "owner of [provider-config.ec2]: the Owner tag the IAM policy requires"
  value       = var.owner
}

output "vpc_id" {
  description = "VPC the subnet is in"
  value       = local.vpc_id
}

output "harness_policy_arn" {
  description = "IAM policy to attach to whoever runs the harness"
  value       = aws_iam_policy.harness.arn
}

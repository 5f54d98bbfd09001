locals {
  create_vpc = var.vpc_id == null
  vpc_id     = local.create_vpc ? aws_vpc.bench[0].id : var.vpc_id
}

# Flow logs would cost more than the benchmark: the VPC carries nothing but
# short-lived test instances.
resource "aws_vpc" "bench" {
  count                = local.create_vpc ? 1 : 0
  cidr_block           = var.vpc_cidr
  enable_dns_support   = true
  enable_dns_hostnames = true
  tags                 = { Name = "lazyinit-bench" }
}

resource "aws_internet_gateway" "bench" {
  count  = local.create_vpc ? 1 : 0
  vpc_id = local.vpc_id
  tags   = { Name = "lazyinit-bench" }
}

resource "aws_route_table" "bench" {
  count  = local.create_vpc ? 1 : 0
  vpc_id = local.vpc_id

  route {
    cidr_block = "0.0.0.0/0"
    gateway_id = aws_internet_gateway.bench[0].id
  }
  tags = { Name = "lazyinit-bench" }
}

# The harness reaches instances over SSH from outside the VPC, so the
# subnet hands out public addresses; the security group is the fence.
resource "aws_subnet" "bench" {
  vpc_id                  = local.vpc_id
  cidr_block              = var.subnet_cidr
  availability_zone       = var.availability_zone
  map_public_ip_on_launch = true
  tags                    = { Name = "lazyinit-bench" }
}

resource "aws_route_table_association" "bench" {
  count          = local.create_vpc ? 1 : 0
  subnet_id      = aws_subnet.bench.id
  route_table_id = aws_route_table.bench[0].id
}

# A created VPC's default security group loses its allow-all rules.
resource "aws_default_security_group" "bench" {
  count  = local.create_vpc ? 1 : 0
  vpc_id = aws_vpc.bench[0].id
}

resource "aws_security_group" "ssh" {
  name        = "lazyinit-bench-ssh"
  description = "lazyinit-bench: SSH from the harness only"
  vpc_id      = local.vpc_id
  tags        = { Name = "lazyinit-bench-ssh" }
}

resource "aws_vpc_security_group_ingress_rule" "ssh" {
  security_group_id = aws_security_group.ssh.id
  description       = "SSH from the harness"
  ip_protocol       = "tcp"
  from_port         = 22
  to_port           = 22
  cidr_ipv4         = var.ssh_cidr
}

# Outbound HTTP(S) only, for the distribution's package mirror (kexec-tools
# on the stock AMI); the kernel under test arrives over SSH.
resource "aws_vpc_security_group_egress_rule" "https" {
  security_group_id = aws_security_group.ssh.id
  description       = "package mirrors (HTTPS)"
  ip_protocol       = "tcp"
  from_port         = 443
  to_port           = 443
  cidr_ipv4         = "0.0.0.0/0"
}

resource "aws_vpc_security_group_egress_rule" "http" {
  security_group_id = aws_security_group.ssh.id
  description       = "package mirrors (HTTP, signed by apt)"
  ip_protocol       = "tcp"
  from_port         = 80
  to_port           = 80
  cidr_ipv4         = "0.0.0.0/0"
}

resource "aws_key_pair" "harness" {
  key_name   = "lazyinit-bench"
  public_key = var.public_key
}

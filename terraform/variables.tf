variable "region" {
  description = "AWS region for the network and the benchmark instances."
  type        = string
  default     = "us-east-1"
}

variable "profile" {
  description = "Named AWS profile; null uses the standard credential chain."
  type        = string
  default     = null
}

variable "owner" {
  description = "Owner tag on everything created here."
  type        = string
}

variable "ssh_cidr" {
  description = "The only source admitted to port 22, e.g. your address as a.b.c.d/32."
  type        = string

  # A /16 is already 65536 addresses; anything wider (0.0.0.0/1 as much as
  # 0.0.0.0/0) opens port 22 to the internet at large. The address must be
  # the network's own (10.1.2.0/24, not 10.1.2.3/24), so the CIDR says what
  # it admits.
  validation {
    condition     = can(regex("^[0-9.]+/[0-9]+$", var.ssh_cidr)) && can(cidrhost(var.ssh_cidr, 0)) && try(tonumber(split("/", var.ssh_cidr)[1]) >= 16, false) && try(cidrhost(var.ssh_cidr, 0) == split("/", var.ssh_cidr)[0], false)
    error_message = "ssh_cidr must be an IPv4 network of /16 or narrower written with its network address (your address as a.b.c.d/32)."
  }
}

variable "image_owners" {
  description = "AWS accounts whose images RunInstances may boot (default: Debian's, which publishes the official AMIs)."
  type        = list(string)
  default     = ["136693071363"]

  validation {
    condition     = length(var.image_owners) > 0 && alltrue([for o in var.image_owners : can(regex("^[0-9]{12}$", o))])
    error_message = "image_owners must be 12-digit AWS account ids."
  }
}

variable "instance_types" {
  description = "Instance types RunInstances may start (IAM StringLike patterns: the report's c5 and c6g families)."
  type        = list(string)
  default     = ["c5.*", "c6g.*"]
}

variable "public_key" {
  description = "The harness's client public key (one line, OpenSSH format)."
  type        = string
}

variable "vpc_id" {
  description = "Existing VPC to use; null creates a small one."
  type        = string
  default     = null
}

variable "vpc_cidr" {
  description = "CIDR of the VPC created when vpc_id is null."
  type        = string
  default     = "10.42.0.0/16"
}

variable "subnet_cidr" {
  description = "CIDR of the benchmark subnet (inside the VPC)."
  type        = string
  default     = "10.42.1.0/24"
}

variable "availability_zone" {
  description = "AZ of the subnet; c5 and c6g must both be offered there."
  type        = string
  default     = null
}

variable "attach_policy_to_role" {
  description = "IAM role that runs the harness (e.g. a CI role); null attaches nothing."
  type        = string
  default     = null
}

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

  validation {
    condition     = can(cidrhost(var.ssh_cidr, 0)) && var.ssh_cidr != "0.0.0.0/0"
    error_message = "ssh_cidr must be a CIDR narrower than the whole internet."
  }
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

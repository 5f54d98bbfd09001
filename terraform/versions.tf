# Long-lived AWS pieces of lazyinit-bench: network, SSH-only security group,
# key pair and the harness's IAM policy. Instances and volumes are NOT here:
# the harness creates and removes them per run (crates/lazyinit-ec2).

terraform {
  required_version = ">= 1.5"
  required_providers {
    aws = {
      source  = "hashicorp/aws"
      version = ">= 5.0, < 7.0"
    }
  }
}

provider "aws" {
  region  = var.region
  profile = var.profile

  default_tags {
    tags = {
      Project = "lazyinit-bench"
      Owner   = var.owner
    }
  }
}

data "aws_caller_identity" "current" {}
data "aws_partition" "current" {}

# The harness's permissions: exactly the EC2 actions crates/lazyinit-ec2
# calls (its IAM_ACTIONS list; a test checks both ways), scoped by the
# Project tag wherever EC2 evaluates tags for the action.

locals {
  arn_prefix  = "arn:${data.aws_partition.current.partition}:ec2:${var.region}"
  account_arn = "${local.arn_prefix}:${data.aws_caller_identity.current.account_id}"
}

data "aws_iam_policy_document" "harness" {
  # Describe calls support no resource-level permissions.
  statement {
    sid    = "Read"
    effect = "Allow"
    actions = [
      "ec2:DescribeImages",
      "ec2:DescribeInstanceTypes",
      "ec2:DescribeInstances",
      "ec2:DescribeVolumes",
    ]
    resources = ["*"]
  }

  # RunInstances also touches existing resources: only this stack's.
  statement {
    sid     = "LaunchIntoOurNetwork"
    effect  = "Allow"
    actions = ["ec2:RunInstances"]
    resources = [
      "${local.account_arn}:subnet/${aws_subnet.bench.id}",
      "${local.account_arn}:security-group/${aws_security_group.ssh.id}",
      "${local.account_arn}:key-pair/${aws_key_pair.harness.key_name}",
      "${local.account_arn}:network-interface/*",
    ]
  }

  # Images only of the accounts the project boots (Debian's by default).
  statement {
    sid       = "LaunchProjectImages"
    effect    = "Allow"
    actions   = ["ec2:RunInstances"]
    resources = ["${local.arn_prefix}::image/*"]
    condition {
      test     = "StringEquals"
      variable = "ec2:Owner"
      values   = var.image_owners
    }
  }

  # New instances: the project's tags from creation on, the report's
  # instance types only, and IMDSv2 with one hop (the user data carries the
  # run's host key; see crates/lazyinit-ec2/src/provider.rs).
  statement {
    sid       = "LaunchOnlyTaggedInstances"
    effect    = "Allow"
    actions   = ["ec2:RunInstances"]
    resources = ["${local.account_arn}:instance/*"]
    condition {
      test     = "StringEquals"
      variable = "aws:RequestTag/Project"
      values   = ["lazyinit-bench"]
    }
    condition {
      test     = "StringEquals"
      variable = "aws:RequestTag/Owner"
      values   = [var.owner]
    }
    condition {
      test     = "StringLike"
      variable = "ec2:InstanceType"
      values   = var.instance_types
    }
    condition {
      test     = "StringEquals"
      variable = "ec2:MetadataHttpTokens"
      values   = ["required"]
    }
    condition {
      test     = "NumericLessThanEquals"
      variable = "ec2:MetadataHttpPutResponseHopLimit"
      values   = ["1"]
    }
  }

  # New volumes (a cell's, and an instance's root volume) carry the tags too.
  statement {
    sid     = "CreateOnlyTaggedVolumes"
    effect  = "Allow"
    actions = ["ec2:RunInstances", "ec2:CreateVolume"]
    resources = [
      "${local.account_arn}:volume/*",
    ]
    condition {
      test     = "StringEquals"
      variable = "aws:RequestTag/Project"
      values   = ["lazyinit-bench"]
    }
    condition {
      test     = "StringEquals"
      variable = "aws:RequestTag/Owner"
      values   = [var.owner]
    }
  }

  # Tags only as part of those creates (TagSpecifications), never later.
  statement {
    sid     = "TagOnCreate"
    effect  = "Allow"
    actions = ["ec2:CreateTags"]
    resources = [
      "${local.account_arn}:instance/*",
      "${local.account_arn}:volume/*",
    ]
    condition {
      test     = "StringEquals"
      variable = "ec2:CreateAction"
      values   = ["RunInstances", "CreateVolume"]
    }
  }

  # Everything done to an existing resource: only to the project's.
  statement {
    sid    = "ManageOnlyTagged"
    effect = "Allow"
    actions = [
      "ec2:AttachVolume",
      "ec2:DeleteVolume",
      "ec2:DetachVolume",
      "ec2:GetConsoleOutput",
      "ec2:TerminateInstances",
    ]
    resources = [
      "${local.account_arn}:instance/*",
      "${local.account_arn}:volume/*",
    ]
    condition {
      test     = "StringEquals"
      variable = "aws:ResourceTag/Project"
      values   = ["lazyinit-bench"]
    }
  }

  # The one attribute the harness changes: delete-on-termination of the
  # cell's volume (BlockDeviceMapping), never the instance type, user
  # data, shutdown behaviour or security groups.
  statement {
    sid       = "ModifyOnlyVolumeDeletion"
    effect    = "Allow"
    actions   = ["ec2:ModifyInstanceAttribute"]
    resources = ["${local.account_arn}:instance/*"]
    condition {
      test     = "StringEquals"
      variable = "aws:ResourceTag/Project"
      values   = ["lazyinit-bench"]
    }
    condition {
      test     = "StringEqualsIgnoreCase"
      variable = "ec2:Attribute"
      values   = ["BlockDeviceMapping"]
    }
  }
}

resource "aws_iam_policy" "harness" {
  name        = "lazyinit-bench-harness"
  description = "lazyinit-bench: launch, attach, tear down and sweep tagged instances and volumes"
  policy      = data.aws_iam_policy_document.harness.json
}

resource "aws_iam_role_policy_attachment" "harness" {
  count      = var.attach_policy_to_role == null ? 0 : 1
  role       = var.attach_policy_to_role
  policy_arn = aws_iam_policy.harness.arn
}

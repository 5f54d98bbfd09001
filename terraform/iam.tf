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
      "${local.arn_prefix}::image/*",
      "${local.account_arn}:subnet/${aws_subnet.bench.id}",
      "${local.account_arn}:security-group/${aws_security_group.ssh.id}",
      "${local.account_arn}:key-pair/${aws_key_pair.harness.key_name}",
      "${local.account_arn}:network-interface/*",
    ]
  }

  # New instances and volumes must carry the project tag from creation on.
  statement {
    sid     = "CreateOnlyTagged"
    effect  = "Allow"
    actions = ["ec2:RunInstances", "ec2:CreateVolume"]
    resources = [
      "${local.account_arn}:instance/*",
      "${local.account_arn}:volume/*",
    ]
    condition {
      test     = "StringEquals"
      variable = "aws:RequestTag/Project"
      values   = ["lazyinit-bench"]
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
      "ec2:ModifyInstanceAttribute",
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

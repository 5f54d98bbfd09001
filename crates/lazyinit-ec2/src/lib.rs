//! The EC2 provider: c5 / c6g instances with EBS volumes

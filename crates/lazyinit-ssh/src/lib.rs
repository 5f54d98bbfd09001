//! SSH to guests with a pinned host key (ssh2), one error per stage

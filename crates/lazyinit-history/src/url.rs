//! Which history: `sqlite:PATH` or `postgres://...`, parsed once.

use std::path::PathBuf;

/// The environment variable that names the history when `--db` does not.
pub const ENV: &str = "LAZYINIT_HISTORY";

/// Where the history is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DbUrl {
    Sqlite(PathBuf),
    /// A libpq-style URL, `postgres://user@host:port/db`.
    Postgres(String),
}

impl DbUrl {
    /// The default: `history.sqlite` under the harness's state directory.
    pub fn default_sqlite() -> DbUrl {
        DbUrl::Sqlite(lazyinit_core::paths::state_dir().join("history.sqlite"))
    }

    /// `--db` if given, else `$LAZYINIT_HISTORY`, else the default.
    pub fn resolve(flag: Option<&str>) -> Result<DbUrl, String> {
        match flag {
            Some(s) => s.parse(),
            None => match std::env::var(ENV) {
                Ok(s) if !s.is_empty() => s.parse().map_err(|e| format!("{ENV}: {e}")),
                _ => Ok(DbUrl::default_sqlite()),
            },
        }
    }
}

impl std::str::FromStr for DbUrl {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        if let Some(p) = s.strip_prefix("sqlite:") {
            let p = p.strip_prefix("//").unwrap_or(p);
            if p.is_empty() {
                return Err("`sqlite:` needs a path: sqlite:PATH".into());
            }
            return Ok(DbUrl::Sqlite(PathBuf::from(p)));
        }
        if s.starts_with("postgres://") || s.starts_with("postgresql://") {
            return Ok(DbUrl::Postgres(s.to_string()));
        }
        Err(format!(
            "history database `{s}`: use sqlite:PATH or postgres://USER@HOST:PORT/DB"
        ))
    }
}

impl std::fmt::Display for DbUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DbUrl::Sqlite(p) => write!(f, "sqlite:{}", p.display()),
            DbUrl::Postgres(u) => f.write_str(&redact(u)),
        }
    }
}

/// A URL with its password (if any) replaced, for messages.
pub fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    match rest.split_once('@') {
        Some((userinfo, host)) => match userinfo.split_once(':') {
            Some((user, _)) => format!("{scheme}://{user}:***@{host}"),
            None => url.to_string(),
        },
        None => url.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_both_and_refuses_others() {
        assert_eq!(
            "sqlite:/tmp/h.db".parse::<DbUrl>(),
            Ok(DbUrl::Sqlite("/tmp/h.db".into()))
        );
        assert_eq!(
            "sqlite://rel/h.db".parse::<DbUrl>(),
            Ok(DbUrl::Sqlite("rel/h.db".into()))
        );
        assert!(matches!(
            "postgres://u@127.0.0.1:5433/h".parse::<DbUrl>(),
            Ok(DbUrl::Postgres(_))
        ));
        let e = "mysql://x".parse::<DbUrl>().unwrap_err();
        assert!(e.contains("sqlite:PATH"), "{e}");
        assert!("sqlite:".parse::<DbUrl>().is_err());
    }

    #[test]
    fn passwords_never_reach_a_message() {
        assert_eq!(
            redact("postgres://u:secret@h:5432/d"),
            "postgres://u:***@h:5432/d"
        );
        assert_eq!(redact("postgres://u@h/d"), "postgres://u@h/d");
    }
}

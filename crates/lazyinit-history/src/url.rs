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
            check_postgres(s)?;
            return Ok(DbUrl::Postgres(s.to_string()));
        }
        Err(format!(
            "history database `{s}`: use sqlite:PATH or postgres://USER@HOST:PORT/DB"
        ))
    }
}

/// The most `connect_timeout` may be, in seconds: the whole connect's
/// deadline ([`crate::postgres::CONNECT_DEADLINE`] without one).
pub const MAX_CONNECT_TIMEOUT_S: i64 = 300;

/// What each URL parameter the PostgreSQL client reads may be: its name,
/// then `Ok(())` or what it must be.
fn check_param(key: &str, value: &str) -> Option<Result<(), String>> {
    let int_in = |lo: i64, hi: i64, unit: &str| match value.parse::<i64>() {
        Ok(v) if (lo..=hi).contains(&v) => Ok(()),
        _ => Err(format!("an integer from {lo} to {hi}{unit}")),
    };
    let one_of = |words: &[&str]| match words.contains(&value) {
        true => Ok(()),
        false => Err(format!("one of {}", words.join(", "))),
    };
    Some(match key {
        "user" | "password" | "dbname" | "options" | "application_name" | "host" => Ok(()),
        "hostaddr" => match value
            .split(',')
            .all(|a| a.parse::<std::net::IpAddr>().is_ok())
        {
            true => Ok(()),
            false => Err("IP addresses, separated by commas".into()),
        },
        "port" => match value
            .split(',')
            .all(|p| p.is_empty() || p.parse::<u16>().is_ok_and(|p| p > 0))
        {
            true => Ok(()),
            false => Err("ports from 1 to 65535, separated by commas".into()),
        },
        "connect_timeout" => int_in(1, MAX_CONNECT_TIMEOUT_S, " (seconds)"),
        "tcp_user_timeout" | "keepalives_idle" | "keepalives_interval" => {
            int_in(0, 3600, " (seconds)")
        }
        "keepalives" => int_in(0, 1, ""),
        "keepalives_retries" => int_in(0, 100, ""),
        "sslmode" => one_of(&["disable", "prefer", "require"]),
        "sslnegotiation" => one_of(&["postgres", "direct"]),
        "target_session_attrs" => one_of(&["any", "read-write", "read-only"]),
        "channel_binding" => one_of(&["disable", "prefer", "require"]),
        "load_balance_hosts" => one_of(&["disable", "random"]),
        _ => return None,
    })
}

/// The parameters the client reads, for a message.
const PARAMS: &str = "user, password, dbname, options, application_name, host, hostaddr, port, \
    connect_timeout, tcp_user_timeout, keepalives, keepalives_idle, keepalives_interval, \
    keepalives_retries, sslmode, sslnegotiation, target_session_attrs, channel_binding, load_balance_hosts";

/// A PostgreSQL URL checked before any connection: each parameter after
/// `?` known and in range (a `connect_timeout` of 99999999999 s waited on
/// a silent server for ever), named when it is not, then the client's own
/// parse. Messages give the URL without its password.
fn check_postgres(url: &str) -> Result<(), String> {
    let shown = redact(url);
    if let Some((_, query)) = url.split_once('?') {
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            // A percent-encoded value is left to the client's parse.
            if value.contains('%') {
                continue;
            }
            match check_param(key, value) {
                Some(Ok(())) => {}
                Some(Err(want)) => {
                    let value = if key == "password" { "***" } else { value };
                    return Err(format!(
                        "{shown}: parameter {key}={value}: {key} must be {want}; fix the URL"
                    ));
                }
                None => {
                    return Err(format!(
                    "{shown}: unknown parameter `{key}`: the parameters are {PARAMS}; fix the URL"
                ))
                }
            }
        }
    }
    url.parse::<tokio_postgres::Config>().map(|_| ()).map_err(|e| {
        format!(
            "{shown}: not a connection URL ({}); write postgres://USER@HOST:PORT/DB[?connect_timeout=S]",
            lazyinit_core::exit::one_line_text(&e.to_string())
        )
    })
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

    /// Issue 52: every parameter of a PostgreSQL URL is known and in
    /// range before a connection is tried, and a bad one is named.
    #[test]
    fn postgres_parameters_are_checked_and_named() {
        let base = "postgres://u:secret@127.0.0.1:5432/h";
        for (q, says) in [
            (
                "connect_timeout=99999999999",
                "connect_timeout must be an integer from 1 to 300",
            ),
            (
                "connect_timeout=abc",
                "connect_timeout must be an integer from 1 to 300",
            ),
            (
                "connect_timeout=0",
                "connect_timeout must be an integer from 1 to 300",
            ),
            ("connect_timeout=5&foo=1", "unknown parameter `foo`"),
            (
                "sslmode=maybe",
                "sslmode must be one of disable, prefer, require",
            ),
            ("port=99999", "port must be ports from 1 to 65535"),
            (
                "keepalives_idle=-5",
                "keepalives_idle must be an integer from 0 to 3600",
            ),
        ] {
            let e = format!("{base}?{q}").parse::<DbUrl>().unwrap_err();
            assert!(e.contains(says), "{q}: {e}");
            assert!(!e.contains("secret") && !e.contains('\n'), "{q}: {e}");
        }
        for q in [
            "connect_timeout=2",
            "connect_timeout=300&application_name=x",
            "sslmode=disable",
        ] {
            assert!(format!("{base}?{q}").parse::<DbUrl>().is_ok(), "{q}");
        }
        assert!("postgres://u@h:notaport/d".parse::<DbUrl>().is_err());
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

//! A loopback HTTP proxy in front of the emulator, where the harness's API
//! calls go: it counts them per EC2 action (the emulator's side of the
//! count, beside the SDK's own `ApiCounter`) and answers chosen actions with
//! an EC2 error instead of passing them on, the way a refusal (a limit, a
//! missing permission) reaches a real client.
//!
//! Just enough HTTP/1.1 for the AWS SDK's query-protocol requests: a POST
//! with a `Content-Length` body; each is forwarded on a fresh upstream
//! connection and the answer is passed back with its own `Content-Length`.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// Which calls of an action to refuse.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Calls {
    /// Only the n-th call from now on (1 is the next one).
    Nth(u64),
    /// Every call until `ApiProxy::allow`.
    All,
}

#[derive(Debug, Clone)]
struct Refusal {
    action: String,
    /// Calls of the action seen when the refusal was set.
    base: u64,
    calls: Calls,
    code: String,
    status: u16,
}

#[derive(Debug, Default)]
struct State {
    counts: BTreeMap<String, u64>,
    refused: BTreeMap<String, u64>,
    refusals: Vec<Refusal>,
}

pub struct ApiProxy {
    pub url: String,
    state: Arc<Mutex<State>>,
    task: tokio::task::JoinHandle<()>,
}

impl ApiProxy {
    /// Listens on a free loopback port and forwards to `upstream`
    /// (`http://127.0.0.1:PORT`).
    pub async fn start(upstream: &str) -> anyhow::Result<ApiProxy> {
        let up = upstream
            .strip_prefix("http://")
            .ok_or_else(|| anyhow::anyhow!("upstream {upstream} is not http://"))?
            .trim_end_matches('/')
            .to_string();
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let url = format!("http://{}", listener.local_addr()?);
        let state: Arc<Mutex<State>> = Arc::default();
        let st = state.clone();
        let task = tokio::spawn(async move {
            while let Ok((conn, _)) = listener.accept().await {
                let (st, up) = (st.clone(), up.clone());
                tokio::spawn(async move {
                    if let Err(e) = serve(conn, &up, &st).await {
                        tracing::debug!("API proxy connection: {e}");
                    }
                });
            }
        });
        Ok(ApiProxy { url, state, task })
    }

    /// Answers `action` with the EC2 error `code` (HTTP `status`) for the
    /// given calls.
    pub fn refuse(&self, action: &str, calls: Calls, code: &str, status: u16) {
        let mut s = self.state.lock().unwrap();
        let base = s.counts.get(action).copied().unwrap_or(0);
        s.refusals.push(Refusal {
            action: action.into(),
            base,
            calls,
            code: code.into(),
            status,
        });
    }

    /// Lifts every refusal of `action`.
    pub fn allow(&self, action: &str) {
        self.state
            .lock()
            .unwrap()
            .refusals
            .retain(|r| r.action != action);
    }

    /// Calls seen per action (refused ones included).
    pub fn counts(&self) -> BTreeMap<String, u64> {
        self.state.lock().unwrap().counts.clone()
    }

    /// Calls answered with an error per action.
    pub fn refused(&self) -> BTreeMap<String, u64> {
        self.state.lock().unwrap().refused.clone()
    }
}

impl Drop for ApiProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// `self - earlier` per action, zeros dropped.
pub fn since(now: &BTreeMap<String, u64>, then: &BTreeMap<String, u64>) -> BTreeMap<String, u64> {
    now.iter()
        .map(|(k, v)| (k.clone(), v - then.get(k).copied().unwrap_or(0)))
        .filter(|(_, v)| *v > 0)
        .collect()
}

/// The value of `Action` in a form-encoded body.
pub fn action_of(body: &[u8]) -> Option<String> {
    String::from_utf8_lossy(body)
        .split('&')
        .find_map(|kv| kv.strip_prefix("Action=").map(str::to_string))
}

/// The EC2 query protocol's error document.
pub fn error_response(status: u16, code: &str, action: &str) -> Vec<u8> {
    let body = format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Response><Errors><Error><Code>{code}</Code><Message>{action} refused by the twin's fault injection</Message></Error></Errors><RequestID>lazyinit-twin-fault</RequestID></Response>"
    );
    let reason = if status == 403 {
        "Forbidden"
    } else {
        "Bad Request"
    };
    format!(
        "HTTP/1.1 {status} {reason}\r\nContent-Type: text/xml\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

struct Request {
    head: String,
    body: Vec<u8>,
}

/// Reads one request; `None` when the client closed the connection.
async fn read_request(conn: &mut TcpStream, buf: &mut Vec<u8>) -> std::io::Result<Option<Request>> {
    let head_end = loop {
        if let Some(i) = find(buf, b"\r\n\r\n") {
            break i + 4;
        }
        let mut chunk = [0u8; 8192];
        let n = conn.read(&mut chunk).await?;
        if n == 0 {
            return Ok(None);
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let len = header(&head, "content-length")
        .and_then(|v| v.parse::<usize>().ok())
        .unwrap_or(0);
    while buf.len() < head_end + len {
        let mut chunk = [0u8; 8192];
        let n = conn.read(&mut chunk).await?;
        if n == 0 {
            return Ok(None);
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    let body = buf[head_end..head_end + len].to_vec();
    buf.drain(..head_end + len);
    Ok(Some(Request { head, body }))
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

fn header<'a>(head: &'a str, name: &str) -> Option<&'a str> {
    head.lines().skip(1).find_map(|l| {
        let (k, v) = l.split_once(':')?;
        k.trim().eq_ignore_ascii_case(name).then(|| v.trim())
    })
}

/// The head without the hop-by-hop headers named, plus `extra` lines.
fn rewrite_head(head: &str, drop: &[&str], extra: &[String]) -> String {
    let mut lines: Vec<String> = head
        .trim_end()
        .lines()
        .enumerate()
        .filter(|(i, l)| {
            *i == 0
                || !l
                    .split_once(':')
                    .is_some_and(|(k, _)| drop.iter().any(|d| k.trim().eq_ignore_ascii_case(d)))
        })
        .map(|(_, l)| l.to_string())
        .collect();
    lines.extend(extra.iter().cloned());
    format!("{}\r\n\r\n", lines.join("\r\n"))
}

/// Decodes a chunked body.
fn dechunk(mut b: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(i) = find(b, b"\r\n") {
        let size = usize::from_str_radix(
            String::from_utf8_lossy(&b[..i])
                .split(';')
                .next()
                .unwrap_or("")
                .trim(),
            16,
        )
        .unwrap_or(0);
        if size == 0 || b.len() < i + 2 + size {
            break;
        }
        out.extend_from_slice(&b[i + 2..i + 2 + size]);
        b = &b[(i + 4 + size).min(b.len())..];
    }
    out
}

async fn forward(up: &str, req: &Request) -> std::io::Result<Vec<u8>> {
    let mut s = TcpStream::connect(up).await?;
    let head = rewrite_head(&req.head, &["connection"], &["Connection: close".into()]);
    s.write_all(head.as_bytes()).await?;
    s.write_all(&req.body).await?;
    let mut resp = Vec::new();
    s.read_to_end(&mut resp).await?;
    let Some(end) = find(&resp, b"\r\n\r\n").map(|i| i + 4) else {
        return Err(std::io::Error::other("upstream answered without a header"));
    };
    let head = String::from_utf8_lossy(&resp[..end]).into_owned();
    let body = if header(&head, "transfer-encoding").is_some_and(|v| v.contains("chunked")) {
        dechunk(&resp[end..])
    } else {
        resp[end..].to_vec()
    };
    let mut out = rewrite_head(
        &head,
        &[
            "connection",
            "content-length",
            "transfer-encoding",
            "keep-alive",
        ],
        &[format!("Content-Length: {}", body.len())],
    )
    .into_bytes();
    out.extend_from_slice(&body);
    Ok(out)
}

async fn serve(mut conn: TcpStream, up: &str, st: &Mutex<State>) -> std::io::Result<()> {
    let mut buf = Vec::new();
    while let Some(req) = read_request(&mut conn, &mut buf).await? {
        let action = action_of(&req.body).unwrap_or_else(|| "unknown".into());
        let refusal = {
            let mut s = st.lock().unwrap();
            let n = {
                let c = s.counts.entry(action.clone()).or_default();
                *c += 1;
                *c
            };
            let hit = s
                .refusals
                .iter()
                .find(|r| {
                    r.action == action
                        && match r.calls {
                            Calls::All => true,
                            Calls::Nth(k) => n == r.base + k,
                        }
                })
                .cloned();
            if hit.is_some() {
                *s.refused.entry(action.clone()).or_default() += 1;
            }
            hit
        };
        let answer = match refusal {
            Some(r) => {
                tracing::info!("API proxy: refusing {action} with {}", r.code);
                error_response(r.status, &r.code, &action)
            }
            None => forward(up, &req).await?,
        };
        conn.write_all(&answer).await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn action_and_headers() {
        assert_eq!(
            action_of(b"Action=CreateVolume&Version=2016-11-15&Size=64").as_deref(),
            Some("CreateVolume")
        );
        assert_eq!(action_of(b"Version=1"), None);
        let head =
            "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 12\r\nConnection: keep-alive\r\n\r\n";
        assert_eq!(header(head, "content-length"), Some("12"));
        assert_eq!(
            rewrite_head(head, &["connection"], &["Connection: close".into()]),
            "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 12\r\nConnection: close\r\n\r\n"
        );
        assert_eq!(
            dechunk(b"5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n"),
            b"hello world"
        );
        let e =
            String::from_utf8(error_response(400, "VolumeLimitExceeded", "CreateVolume")).unwrap();
        assert!(e.starts_with("HTTP/1.1 400 Bad Request\r\n"));
        assert!(e.contains("<Code>VolumeLimitExceeded</Code>"));
        let (h, b) = e.split_once("\r\n\r\n").unwrap();
        assert_eq!(
            header(h, "content-length"),
            Some(b.len().to_string().as_str())
        );
    }
}

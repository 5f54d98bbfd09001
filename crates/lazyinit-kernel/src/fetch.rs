//! Upstream release tarballs by version (`--source 5.10.79`).
//!
//! The mirror is laid out like kernel.org's: `v5.x/linux-5.10.79.tar.xz`
//! beside `v5.x/sha256sums.asc`. The checksum file is read first; the tarball
//! is downloaded to a `.partial` file (resumed with a Range request after a
//! dropped connection, retried with backoff), its sha256 compared with the
//! published one, and only then renamed into the cache as
//! `linux-<version>-<sha16>.tar.xz`. A mismatch deletes the download. The
//! checksum file's PGP signature is not verified (no keyring here); the
//! sha256 protects against corruption and a wrong file, not a hostile mirror.

use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::io::AsyncWriteExt;

use crate::error::KernelError;
use crate::{BuildEvent, ProgressFn};

/// kernel.org's canonical location.
pub const DEFAULT_MIRROR: &str = "https://cdn.kernel.org/pub/linux/kernel";

#[derive(Clone)]
pub struct FetchOptions {
    /// Base URL laid out like kernel.org's `pub/linux/kernel`.
    pub mirror: String,
    /// Attempts per file (network errors and 5xx; a 404 is final).
    pub attempts: u32,
    /// Pause before the second attempt, doubled after each failure.
    pub backoff: Duration,
    /// A stalled mirror: an attempt ends when nothing comes for this long
    /// (no connection, no response, no byte), or when less than
    /// `stall_bytes` arrive in any window of this length (a trickle that
    /// would keep a plain read timeout from ever firing).
    pub stall: Duration,
    pub stall_bytes: u64,
    pub progress: Option<ProgressFn>,
}

impl Default for FetchOptions {
    fn default() -> Self {
        FetchOptions {
            mirror: std::env::var("LAZYINIT_KERNEL_MIRROR")
                .unwrap_or_else(|_| DEFAULT_MIRROR.into()),
            attempts: 4,
            backoff: Duration::from_secs(2),
            // kernel.org's tarballs are 100-200 MB: 64 KiB a minute is a
            // mirror that will never finish, not a slow one.
            stall: Duration::from_secs(60),
            stall_bytes: 64 * 1024,
            progress: None,
        }
    }
}

/// Where verified tarballs are kept.
pub fn tarball_dir(cache_dir: &Path) -> PathBuf {
    cache_dir.join("kernel").join("tarballs")
}

/// The verified tarball of `version`, if it was downloaded before.
pub fn cached_tarball(cache_dir: &Path, version: &str) -> Option<PathBuf> {
    let prefix = format!("linux-{version}-");
    std::fs::read_dir(tarball_dir(cache_dir))
        .ok()?
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .find(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with(&prefix) && n.ends_with(".tar.xz"))
        })
}

/// `(directory URL, tarball name)` of a version on a mirror.
pub fn release_location(mirror: &str, version: &str) -> (String, String) {
    let major = version.split('.').next().unwrap_or(version);
    (
        format!("{}/v{major}.x", mirror.trim_end_matches('/')),
        format!("linux-{version}.tar.xz"),
    )
}

/// The published sha256 of `file` in a `sha256sums.asc` (clear-signed
/// `<hex>  <name>` lines).
pub fn published_sha256(sums: &str, file: &str) -> Option<String> {
    sums.lines().find_map(|l| {
        let mut it = l.split_whitespace();
        let (hex, name) = (it.next()?, it.next()?);
        (name == file && hex.len() == 64 && hex.bytes().all(|b| b.is_ascii_hexdigit()))
            .then(|| hex.to_ascii_lowercase())
    })
}

enum Attempt {
    /// Give up now (404 and the like).
    Final(KernelError),
    /// Worth another try.
    Again(String),
}

pub(crate) fn client(opts: &FetchOptions) -> Result<reqwest::Client, KernelError> {
    reqwest::Client::builder()
        .connect_timeout(opts.stall.min(Duration::from_secs(20)))
        // A backstop: the stall checks in `send` and `next_chunk` end an
        // attempt first, saying which stall it was.
        .read_timeout(opts.stall * 2)
        .build()
        .map_err(|e| KernelError::Step(format!("cannot build an HTTP client: {e}")))
}

async fn with_retries<T, F, Fut>(
    url: &str,
    opts: &FetchOptions,
    mut op: F,
) -> Result<T, KernelError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, Attempt>>,
{
    let mut pause = opts.backoff;
    let mut last = String::new();
    for attempt in 1..=opts.attempts.max(1) {
        match op().await {
            Ok(v) => return Ok(v),
            Err(Attempt::Final(e)) => return Err(e),
            Err(Attempt::Again(why)) => {
                tracing::warn!(url, attempt, "download failed: {why}");
                last = why;
                if attempt < opts.attempts {
                    tokio::time::sleep(pause).await;
                    pause *= 2;
                }
            }
        }
    }
    Err(KernelError::Download {
        url: url.to_string(),
        mirror: opts.mirror.clone(),
        detail: format!("{last} (after {} attempts)", opts.attempts.max(1)),
    })
}

fn status_error(url: &str, status: reqwest::StatusCode) -> Attempt {
    if status == reqwest::StatusCode::NOT_FOUND {
        Attempt::Final(KernelError::UnknownVersion { url: url.into() })
    } else if status.is_server_error() || status == reqwest::StatusCode::TOO_MANY_REQUESTS {
        Attempt::Again(format!("HTTP {status}"))
    } else {
        Attempt::Final(KernelError::Download {
            url: url.into(),
            mirror: String::new(),
            detail: format!("HTTP {status}"),
        })
    }
}

async fn get_text(
    client: &reqwest::Client,
    url: &str,
    opts: &FetchOptions,
) -> Result<String, KernelError> {
    with_retries(url, opts, || async {
        let mut r = send(client.get(url), opts).await?;
        if !r.status().is_success() {
            return Err(status_error(url, r.status()));
        }
        let mut body = Vec::new();
        let mut watch = Watch::new(opts);
        while let Some(chunk) = next_chunk(&mut r, &mut watch).await? {
            body.extend_from_slice(chunk.as_ref());
        }
        // Lossy, as reqwest's `text()` was: a line that is not UTF-8
        // only fails to name the tarball.
        Ok(String::from_utf8_lossy(&body).into_owned())
    })
    .await
}

/// The response's head, within `stall` of asking.
async fn send(
    req: reqwest::RequestBuilder,
    opts: &FetchOptions,
) -> Result<reqwest::Response, Attempt> {
    match tokio::time::timeout(opts.stall, req.send()).await {
        Ok(r) => r.map_err(|e| Attempt::Again(lazyinit_core::exit::chain_text(&e))),
        Err(_) => Err(Attempt::Again(format!(
            "no response within {} s",
            opts.stall.as_secs_f64()
        ))),
    }
}

/// Bytes received in the current window of `stall`.
struct Watch {
    stall: Duration,
    least: u64,
    since: tokio::time::Instant,
    got: u64,
}

impl Watch {
    fn new(opts: &FetchOptions) -> Self {
        Watch {
            stall: opts.stall,
            least: opts.stall_bytes,
            since: tokio::time::Instant::now(),
            got: 0,
        }
    }

    /// Count `n` bytes; an error when a whole window brought too few.
    fn add(&mut self, n: u64) -> Result<(), Attempt> {
        self.got += n;
        if self.since.elapsed() >= self.stall {
            if self.got < self.least {
                return Err(Attempt::Again(format!(
                    "the mirror is stalling: {} bytes in {:.0} s (at least {} expected)",
                    self.got,
                    self.since.elapsed().as_secs_f64(),
                    self.least
                )));
            }
            self.since = tokio::time::Instant::now();
            self.got = 0;
        }
        Ok(())
    }
}

/// The next piece of the body: nothing for `stall` is a stall, and so is
/// a trickle under `stall_bytes` a window.
async fn next_chunk(
    r: &mut reqwest::Response,
    watch: &mut Watch,
) -> Result<Option<impl AsRef<[u8]>>, Attempt> {
    loop {
        let left = watch.stall.saturating_sub(watch.since.elapsed());
        match tokio::time::timeout(left.max(Duration::from_millis(1)), r.chunk()).await {
            Ok(chunk) => {
                let chunk =
                    chunk.map_err(|e| Attempt::Again(lazyinit_core::exit::chain_text(&e)))?;
                if let Some(c) = &chunk {
                    watch.add(c.len() as u64)?;
                }
                return Ok(chunk);
            }
            // The window ran out while waiting: judge it on what it brought.
            Err(_) => watch.add(0)?,
        }
    }
}

/// Download `url` into `partial`, resuming from what is already there.
pub(crate) async fn download(
    client: &reqwest::Client,
    url: &str,
    partial: &Path,
    opts: &FetchOptions,
) -> Result<u64, KernelError> {
    with_retries(url, opts, || async {
        let have = tokio::fs::metadata(partial)
            .await
            .map(|m| m.len())
            .unwrap_or(0);
        let mut req = client.get(url);
        if have > 0 {
            req = req.header(reqwest::header::RANGE, format!("bytes={have}-"));
        }
        let mut r = send(req, opts).await?;
        let resumed = r.status() == reqwest::StatusCode::PARTIAL_CONTENT;
        if !r.status().is_success() {
            return Err(status_error(url, r.status()));
        }
        let mut f = tokio::fs::OpenOptions::new()
            .create(true)
            .write(true)
            .append(resumed)
            .truncate(!resumed)
            .open(partial)
            .await
            .map_err(|e| Attempt::Final(KernelError::io(partial, e)))?;
        let mut done = if resumed { have } else { 0 };
        let total = r.content_length().map(|n| n + done);
        let mut watch = Watch::new(opts);
        while let Some(chunk) = next_chunk(&mut r, &mut watch).await? {
            let chunk = chunk.as_ref();
            f.write_all(chunk)
                .await
                .map_err(|e| Attempt::Final(KernelError::io(partial, e)))?;
            done += chunk.len() as u64;
            if let Some(p) = &opts.progress {
                p(BuildEvent::Bytes { done, total });
            }
        }
        f.flush()
            .await
            .map_err(|e| Attempt::Final(KernelError::io(partial, e)))?;
        if let Some(t) = total {
            if done < t {
                return Err(Attempt::Again(format!(
                    "connection closed at {done} of {t} bytes"
                )));
            }
        }
        Ok(done)
    })
    .await
}

/// The file's SHA-256 by core's one hasher (no `sha256sum` spawned whose
/// exit status could go unread), off the async threads.
async fn sha256_file(path: &Path) -> Result<String, KernelError> {
    let p = path.to_path_buf();
    tokio::task::spawn_blocking(move || {
        lazyinit_core::paths::sha256_file(&p).map_err(|e| KernelError::io(&p, e))
    })
    .await
    .map_err(|e| KernelError::Step(format!("hashing {}: {e}", path.display())))?
}

/// Fetch and verify `version` into the cache (a no-op when it is there).
pub async fn fetch_version(
    version: &str,
    cache_dir: &Path,
    opts: &FetchOptions,
) -> Result<PathBuf, KernelError> {
    if let Some(p) = cached_tarball(cache_dir, version) {
        return Ok(p);
    }
    let (dir_url, file) = release_location(&opts.mirror, version);
    let sums_url = format!("{dir_url}/sha256sums.asc");
    let url = format!("{dir_url}/{file}");
    let client = client(opts)?;
    if let Some(p) = &opts.progress {
        p(BuildEvent::Step(format!("fetch {url}")));
    }
    let sums = get_text(&client, &sums_url, opts)
        .await
        .map_err(|e| fix_mirror(e, opts))?;
    let expected = published_sha256(&sums, &file).ok_or_else(|| KernelError::UnknownVersion {
        url: format!("{url} (not listed in {sums_url})"),
    })?;
    let dir = tarball_dir(cache_dir);
    tokio::fs::create_dir_all(&dir)
        .await
        .map_err(|e| KernelError::io(&dir, e))?;
    let partial = dir.join(format!(".partial-{file}"));
    download(&client, &url, &partial, opts)
        .await
        .map_err(|e| fix_mirror(e, opts))?;
    let got = sha256_file(&partial).await?;
    if got != expected {
        let _ = tokio::fs::remove_file(&partial).await;
        return Err(KernelError::Checksum {
            file: url,
            expected,
            got,
        });
    }
    // A verified file may still not be a kernel: check before caching it.
    let p2 = partial.clone();
    let facts = tokio::task::spawn_blocking(move || crate::source::identify_tarball(&p2))
        .await
        .map_err(|e| KernelError::Step(format!("reading the tarball: {e}")))?;
    let facts = match facts {
        Ok(f) => f,
        Err(e) => {
            let _ = tokio::fs::remove_file(&partial).await;
            return Err(e);
        }
    };
    let dest = dir.join(format!("linux-{version}-{}.tar.xz", &got[..16]));
    tokio::fs::rename(&partial, &dest)
        .await
        .map_err(|e| KernelError::io(&dest, e))?;
    crate::source::remember_tarball(cache_dir, &dest, &facts)?;
    Ok(dest)
}

/// Name the mirror setting in download errors raised before it was known.
fn fix_mirror(e: KernelError, opts: &FetchOptions) -> KernelError {
    match e {
        KernelError::Download { url, detail, .. } => KernelError::Download {
            url,
            mirror: opts.mirror.clone(),
            detail,
        },
        e => e,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locations_follow_the_kernel_org_layout() {
        let (d, f) = release_location("https://cdn.kernel.org/pub/linux/kernel/", "5.10.79");
        assert_eq!(d, "https://cdn.kernel.org/pub/linux/kernel/v5.x");
        assert_eq!(f, "linux-5.10.79.tar.xz");
        assert_eq!(
            release_location("http://127.0.0.1:9/m", "6.1").0,
            "http://127.0.0.1:9/m/v6.x"
        );
    }

    #[test]
    fn checksums_are_read_from_a_clear_signed_list() {
        let h = "a".repeat(64);
        let sums = format!(
            "-----BEGIN PGP SIGNED MESSAGE-----\nHash: SHA256\n\n{h}  linux-5.10.79.tar.xz\n{}  linux-5.10.79.tar.gz\n{}  linux-5.10.7.tar.xz\n-----BEGIN PGP SIGNATURE-----\nxyz\n",
            "b".repeat(64),
            "c".repeat(64)
        );
        assert_eq!(published_sha256(&sums, "linux-5.10.79.tar.xz"), Some(h));
        assert_eq!(published_sha256(&sums, "linux-5.10.8.tar.xz"), None);
        assert_eq!(
            published_sha256("zz  linux-5.10.79.tar.xz", "linux-5.10.79.tar.xz"),
            None
        );
    }
}

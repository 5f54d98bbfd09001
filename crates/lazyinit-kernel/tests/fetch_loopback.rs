//! `--source X.Y.Z` downloads against a real HTTP server on loopback (a small
//! hand-written HTTP/1.1 server in this file, with Range support and
//! injectable faults), serving a real kernel tarball: Debian's 6.1 source, in
//! full for the success case and cut down to its Makefile and fs/ext4 with a
//! stamped version for the failure cases.

use lazyinit_core::exit::ExitCode;
use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use lazyinit_kernel::fetch::{cached_tarball, fetch_version, FetchOptions};
use lazyinit_kernel::{BuildEvent, KernelError, KernelSource};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

#[derive(Clone, Copy, PartialEq)]
enum Fault {
    None,
    /// The first response stops halfway and closes the connection.
    DropOnce,
    /// Every response stops halfway.
    DropAlways,
    /// The request is read and nothing is ever sent back.
    Silent,
    /// The head, then one byte every 100 ms: a read timeout never fires.
    Trickle,
}

#[derive(Default)]
struct Server {
    files: HashMap<String, (Vec<u8>, Fault)>,
    /// Requests seen: (path, Range header).
    log: Vec<(String, Option<String>)>,
    dropped: u32,
}

async fn serve(state: Arc<Mutex<Server>>) -> String {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let (mut s, _) = l.accept().await.unwrap();
            let state = state.clone();
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut tmp = [0u8; 4096];
                while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
                    let n = s.read(&mut tmp).await.unwrap_or(0);
                    if n == 0 {
                        return;
                    }
                    buf.extend_from_slice(&tmp[..n]);
                }
                let head = String::from_utf8_lossy(&buf).to_string();
                let path = head.split_whitespace().nth(1).unwrap_or("/").to_string();
                let range = head
                    .lines()
                    .find(|l| l.to_ascii_lowercase().starts_with("range:"))
                    .map(|l| l[6..].trim().to_string());
                let (reply, body, cut, fault) = {
                    let mut st = state.lock().unwrap();
                    st.log.push((path.clone(), range.clone()));
                    let found = st.files.get(&path).cloned();
                    match found {
                        None => (
                            "HTTP/1.1 404 Not Found".to_string(),
                            Vec::new(),
                            false,
                            Fault::None,
                        ),
                        Some((data, fault)) => {
                            let start = range
                                .as_deref()
                                .and_then(|r| r.strip_prefix("bytes="))
                                .and_then(|r| r.trim_end_matches('-').parse::<usize>().ok())
                                .unwrap_or(0);
                            let cut = fault == Fault::DropAlways
                                || (fault == Fault::DropOnce && st.dropped == 0);
                            if cut {
                                st.dropped += 1;
                            }
                            let status = if start > 0 {
                                "HTTP/1.1 206 Partial Content"
                            } else {
                                "HTTP/1.1 200 OK"
                            };
                            (status.to_string(), data[start..].to_vec(), cut, fault)
                        }
                    }
                };
                if fault == Fault::Silent {
                    // Hold the connection open until the client gives up.
                    let _ = s.read(&mut tmp).await;
                    return;
                }
                let hdr = format!(
                    "{reply}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                    body.len()
                );
                let _ = s.write_all(hdr.as_bytes()).await;
                if fault == Fault::Trickle {
                    for b in &body {
                        if s.write_all(&[*b]).await.is_err() {
                            return;
                        }
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                    return;
                }
                let send = if cut {
                    &body[..body.len() / 2]
                } else {
                    &body[..]
                };
                let _ = s.write_all(send).await;
                let _ = s.shutdown().await;
            });
        }
    });
    format!("http://{addr}/pub/linux/kernel")
}

fn sha256(bytes: &[u8]) -> String {
    lazyinit_core::paths::sha256_hex(bytes)
}

/// A big file's SHA-256 by core's hasher, in 1 MiB reads.
fn sha256_of_file(path: &str) -> String {
    std::fs::File::open(path)
        .and_then(lazyinit_core::paths::sha256_hex_of)
        .unwrap()
}

fn sums(entries: &[(&str, &str)]) -> Vec<u8> {
    let mut s = String::from("-----BEGIN PGP SIGNED MESSAGE-----\nHash: SHA256\n\n");
    for (hex, name) in entries {
        s.push_str(&format!("{hex}  {name}\n"));
    }
    s.push_str("-----BEGIN PGP SIGNATURE-----\n\nnot checked\n-----END PGP SIGNATURE-----\n");
    s.into_bytes()
}

/// Debian's 6.1 tree cut down to its Makefile and fs/ext4, restamped as
/// `version` (SUBLEVEL only), repacked as `linux-<version>/`.
fn small_kernel_tarball(work: &Path, version: &str) -> Vec<u8> {
    let v: Vec<&str> = version.split('.').collect();
    let script = format!(
        "set -e; cd '{w}'; tar -xf /usr/src/linux-source-6.1.tar.xz --wildcards --no-wildcards-match-slash '*/Makefile' '*/fs/ext4/*'; \
         mv linux-source-6.1 linux-{version}; sed -i -e 's/^VERSION = .*/VERSION = {a}/' -e 's/^PATCHLEVEL = .*/PATCHLEVEL = {b}/' -e 's/^SUBLEVEL = .*/SUBLEVEL = {c}/' linux-{version}/Makefile; \
         tar -cJf t.tar.xz linux-{version}",
        w = work.display(),
        a = v[0],
        b = v[1],
        c = v[2]
    );
    let st = std::process::Command::new("sh")
        .arg("-c")
        .arg(script)
        .status()
        .unwrap();
    assert!(st.success());
    std::fs::read(work.join("t.tar.xz")).unwrap()
}

fn opts(mirror: &str) -> FetchOptions {
    FetchOptions {
        mirror: mirror.into(),
        attempts: 3,
        backoff: Duration::from_millis(50),
        stall: Duration::from_secs(60),
        stall_bytes: 64 * 1024,
        progress: None,
    }
}

/// A mirror that accepts and never answers, and one that trickles a byte
/// every 100 ms, each end every attempt within the stall window: the
/// download fails with the URL, the mirror and why, and leaves nothing in
/// the cache. (The 120 s bound only catches a hang; the stall here is 1 s.)
#[tokio::test(flavor = "multi_thread")]
async fn a_silent_or_trickling_mirror_fails_instead_of_hanging() {
    let work = tempfile::tempdir().unwrap();
    let tarball = small_kernel_tarball(work.path(), "5.10.79");
    let state = Arc::new(Mutex::new(Server::default()));
    {
        let mut st = state.lock().unwrap();
        let listed = sums(&[
            (&sha256(&tarball), "linux-5.10.79.tar.xz"),
            (&sha256(&tarball), "linux-5.10.78.tar.xz"),
        ]);
        st.files.insert(
            "/pub/linux/kernel/v5.x/sha256sums.asc".into(),
            (listed, Fault::None),
        );
        st.files.insert(
            "/pub/linux/kernel/v5.x/linux-5.10.79.tar.xz".into(),
            (tarball.clone(), Fault::Silent),
        );
        st.files.insert(
            "/pub/linux/kernel/v5.x/linux-5.10.78.tar.xz".into(),
            (tarball.clone(), Fault::Trickle),
        );
        st.files.insert(
            "/pub/linux/kernel/v6.x/sha256sums.asc".into(),
            (b"x".to_vec(), Fault::Silent),
        );
    }
    let mirror = serve(state.clone()).await;
    let cache = tempfile::tempdir().unwrap();
    let c = cache.path();
    let fast = FetchOptions {
        attempts: 2,
        stall: Duration::from_secs(1),
        stall_bytes: 100,
        ..opts(&mirror)
    };
    let bounded = |f| tokio::time::timeout(Duration::from_secs(120), f);

    let e = bounded(fetch_version("5.10.79", c, &fast))
        .await
        .expect("hung on a silent mirror")
        .unwrap_err();
    let msg = e.to_string();
    assert!(matches!(e, KernelError::Download { .. }), "{msg}");
    assert!(
        msg.contains("linux-5.10.79.tar.xz") && msg.contains(&mirror),
        "{msg}"
    );
    assert!(
        msg.contains("no response within 1 s") && msg.contains("2 attempts"),
        "{msg}"
    );

    let e = bounded(fetch_version("5.10.78", c, &fast))
        .await
        .expect("hung on a trickle")
        .unwrap_err();
    let msg = e.to_string();
    assert!(matches!(e, KernelError::Download { .. }), "{msg}");
    assert!(msg.contains("the mirror is stalling"), "{msg}");
    assert_eq!(e.exit_code(), lazyinit_core::exit::INFRASTRUCTURE);

    // The checksum file too.
    let e = bounded(fetch_version("6.1.1", c, &fast))
        .await
        .expect("hung on a silent checksum file")
        .unwrap_err();
    assert!(e.to_string().contains("no response within 1 s"), "{e}");

    for v in ["5.10.79", "5.10.78", "6.1.1"] {
        assert!(cached_tarball(c, v).is_none(), "{v} cached");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn full_debian_tarball_downloads_verifies_and_is_cached() {
    let src = "/usr/src/linux-source-6.1.tar.xz";
    let data = std::fs::read(src).expect("linux-source-6.1 is installed");
    let hex = sha256_of_file(src);
    let state = Arc::new(Mutex::new(Server::default()));
    {
        let mut st = state.lock().unwrap();
        st.files.insert(
            "/pub/linux/kernel/v6.x/sha256sums.asc".into(),
            (sums(&[(&hex, "linux-6.1.192.tar.xz")]), Fault::None),
        );
        st.files.insert(
            "/pub/linux/kernel/v6.x/linux-6.1.192.tar.xz".into(),
            (data.clone(), Fault::None),
        );
    }
    let mirror = serve(state.clone()).await;
    let cache = tempfile::tempdir().unwrap();
    let t = Instant::now();
    let downloaded: Arc<Mutex<Option<Duration>>> = Default::default();
    let mut o = opts(&mirror);
    let d = downloaded.clone();
    o.progress = Some(Arc::new(move |ev| {
        if let BuildEvent::Bytes {
            done,
            total: Some(total),
        } = ev
        {
            if done == total {
                *d.lock().unwrap() = Some(t.elapsed());
            }
        }
    }));
    let p = fetch_version("6.1.192", cache.path(), &o).await.unwrap();
    let secs = t.elapsed().as_secs_f64();
    let dl = downloaded
        .lock()
        .unwrap()
        .expect("progress reported the last byte")
        .as_secs_f64();
    let mib = data.len() as f64 / 1048576.0;
    eprintln!(
        "fetched {mib:.0} MiB: download {dl:.1} s ({:.0} MiB/s), with sha256 and kernel-tree check {secs:.1} s",
        mib / dl
    );
    assert_eq!(std::fs::read(&p).unwrap().len(), data.len());
    let t = Instant::now();
    assert_eq!(
        fetch_version("6.1.192", cache.path(), &opts(&mirror))
            .await
            .unwrap(),
        p
    );
    eprintln!(
        "second request (cached): {:.3} s",
        t.elapsed().as_secs_f64()
    );
    assert_eq!(
        state.lock().unwrap().log.len(),
        2,
        "the second request went to the network"
    );
    // The fetched tarball is a source like any other, and what the fetch
    // learned about it is remembered (no second hash or decompression).
    let t = Instant::now();
    let r =
        lazyinit_kernel::source::resolve(&KernelSource::Version("6.1.192".into()), cache.path())
            .unwrap();
    eprintln!(
        "resolving the fetched source: {:.3} s",
        t.elapsed().as_secs_f64()
    );
    let memo = std::fs::read_to_string(cache.path().join("kernel/sources.json")).unwrap();
    assert!(memo.contains(&hex), "{memo}");
    assert_eq!(r.facts.version, "6.1.192");
    assert_eq!(r.facts.released, lazyinit_kernel::Detected::Fix);
    assert_eq!(r.facts.identity, format!("sha256:{hex}"));
}

#[tokio::test(flavor = "multi_thread")]
async fn failures_are_specific_and_never_cached() {
    let work = tempfile::tempdir().unwrap();
    let tarball = small_kernel_tarball(work.path(), "5.10.79");
    let junk = {
        let st = std::process::Command::new("sh")
            .arg("-c")
            .arg(format!("cd '{}' && mkdir -p junk-1 && echo hi > junk-1/README && tar -cJf junk.tar.xz junk-1", work.path().display()))
            .status()
            .unwrap();
        assert!(st.success());
        std::fs::read(work.path().join("junk.tar.xz")).unwrap()
    };
    let state = Arc::new(Mutex::new(Server::default()));
    {
        let mut st = state.lock().unwrap();
        st.files.insert(
            "/pub/linux/kernel/v5.x/sha256sums.asc".into(),
            (
                sums(&[
                    (&sha256(&tarball), "linux-5.10.79.tar.xz"),
                    (&"0".repeat(64), "linux-5.10.78.tar.xz"),
                    (&sha256(&tarball), "linux-5.10.77.tar.xz"),
                    (&sha256(&tarball), "linux-5.10.76.tar.xz"),
                    (&sha256(&junk), "linux-5.10.75.tar.xz"),
                ]),
                Fault::None,
            ),
        );
        st.files.insert(
            "/pub/linux/kernel/v5.x/linux-5.10.79.tar.xz".into(),
            (tarball.clone(), Fault::DropOnce),
        );
        st.files.insert(
            "/pub/linux/kernel/v5.x/linux-5.10.78.tar.xz".into(),
            (tarball.clone(), Fault::None),
        );
        st.files.insert(
            "/pub/linux/kernel/v5.x/linux-5.10.77.tar.xz".into(),
            (tarball.clone(), Fault::DropAlways),
        );
        st.files.insert(
            "/pub/linux/kernel/v5.x/linux-5.10.75.tar.xz".into(),
            (junk, Fault::None),
        );
    }
    let mirror = serve(state.clone()).await;
    let cache = tempfile::tempdir().unwrap();
    let c = cache.path();

    // A connection dropped mid-download is resumed with a Range request.
    let p = fetch_version("5.10.79", c, &opts(&mirror)).await.unwrap();
    assert_eq!(std::fs::read(&p).unwrap(), tarball);
    let ranged = state
        .lock()
        .unwrap()
        .log
        .iter()
        .any(|(path, r)| path.ends_with("5.10.79.tar.xz") && r.is_some());
    assert!(ranged, "no Range request after the drop");
    let r = lazyinit_kernel::source::resolve(&KernelSource::Version("5.10.79".into()), c).unwrap();
    assert_eq!(
        r.facts.version, "5.10.79",
        "the version comes from the tree's Makefile"
    );

    // Checksum mismatch: deleted, not cached.
    let e = fetch_version("5.10.78", c, &opts(&mirror))
        .await
        .unwrap_err();
    assert!(matches!(e, KernelError::Checksum { .. }), "{e}");
    nothing_cached_but(c, "5.10.78", &p);

    // Listed but missing on the mirror, and a series the mirror does not have.
    let e = fetch_version("5.10.76", c, &opts(&mirror))
        .await
        .unwrap_err();
    assert!(matches!(e, KernelError::UnknownVersion { .. }), "{e}");
    assert_eq!(e.exit_code(), lazyinit_core::exit::BAD_INPUT);
    let e = fetch_version("9.1.2", c, &opts(&mirror)).await.unwrap_err();
    assert!(matches!(e, KernelError::UnknownVersion { .. }), "{e}");

    // A connection that always drops: retried, then a message naming the URL and mirror.
    let e = fetch_version("5.10.77", c, &opts(&mirror))
        .await
        .unwrap_err();
    let msg = e.to_string();
    assert!(matches!(e, KernelError::Download { .. }), "{msg}");
    assert!(
        msg.contains("linux-5.10.77.tar.xz") && msg.contains(&mirror) && msg.contains("3 attempts"),
        "{msg}"
    );

    // Verified, but not a kernel tree.
    let e = fetch_version("5.10.75", c, &opts(&mirror))
        .await
        .unwrap_err();
    assert!(e.to_string().contains("not a kernel source tarball"), "{e}");
    nothing_cached_but(c, "5.10.75", &p);
}

/// Nothing for `version`, and no stray partial files besides `keep`.
fn nothing_cached_but(cache: &Path, version: &str, keep: &Path) {
    assert!(cached_tarball(cache, version).is_none());
    let dir = lazyinit_kernel::fetch::tarball_dir(cache);
    for e in std::fs::read_dir(&dir).unwrap() {
        let p = e.unwrap().path();
        let n = p.file_name().unwrap().to_string_lossy().to_string();
        assert!(
            p == keep || n.starts_with(".partial-linux-5.10.77"),
            "left behind: {n}"
        );
    }
}

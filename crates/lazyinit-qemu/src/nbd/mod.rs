//! A latency storage profile: the volume file is served to QEMU over NBD
//! on a unix socket in the cell's folder, by a small server in this
//! process that holds every zero (WRITE_ZEROES) request for a fixed time.
//!
//! Why: with the fix, the sleep between groups is set from the first
//! group's zeroing time z1 (docs/design.md §3). On a raw file under TCG, z1 is about
//! a millisecond of emulated CPU, so a busy neighbour moves it and the fix
//! multiplies that by W=10. A zero request that takes a fixed few
//! milliseconds of I/O, as on EBS, makes z1 mostly a controlled quantity.
//! Only zeroing is delayed: mkfs writes, the bitmap prefetch and mount reads
//! run at host speed, and flushes are answered at once (never reach the
//! host disk), so nothing but the delay adds to the guest's own time.
//!
//! Why not nbdkit's delay filter: it takes whole milliseconds, and under TCG
//! the guest's own part of z1 is about 1 ms, so the delay must be set to a
//! fraction of a millisecond to put z1 in the middle of a tick interval
//! (`L = floor(W * z1 * HZ)`) rather than on its edge.
//!
//! The server speaks the fixed-newstyle handshake (NBD_OPT_GO,
//! NBD_OPT_INFO, NBD_OPT_EXPORT_NAME) and simple replies, which is all QEMU's
//! client needs; everything else is refused with NBD_REP_ERR_UNSUP.
//! Replies may leave out of order (a delayed zero does not hold a read back).

use std::fs::File;
use std::io::{self, BufReader, Read, Write};
use std::os::unix::fs::FileExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use lazyinit_core::provider::ProviderError;

use delay::{DelayQueue, Held};
use extents::{zero_range, Extents};
use wire::{
    be_u16, be_u32, be_u64, handshake, reply, CMD_DISC, CMD_FLUSH, CMD_READ, CMD_TRIM, CMD_WRITE,
    CMD_WRITE_ZEROES, EINVAL, EIO, MAX_REQUEST, REQUEST_MAGIC,
};

mod delay;
mod extents;
mod hold;
mod profile;
mod wire;

pub use hold::{Hold, ThreadLevel};
pub use profile::{guest_part_prior, parse_delay, LatencyProfile};

struct Export {
    file: File,
    size: u64,
    hold: Hold,
    zero_requests: AtomicU64,
    /// What was written, when the file was all holes at start (else None:
    /// every zero request punches).
    written: Option<Mutex<Extents>>,
    /// `kind,offset,len,arrived_us,replied_us` per request, when the
    /// environment sets LAZYINIT_NBD_TRACE (a debugging aid).
    trace: Option<Mutex<std::io::BufWriter<File>>>,
    epoch: Instant,
}

impl Export {
    fn log(&self, kind: u16, offset: u64, len: u32, arrived: Instant) {
        if let Some(t) = &self.trace {
            let us = |i: Instant| i.duration_since(self.epoch).as_micros();
            let _ = writeln!(
                t.lock().unwrap(),
                "{kind},{offset},{len},{},{}",
                us(arrived),
                us(Instant::now())
            );
        }
    }
}

/// The server for one volume: a listening socket and one thread per
/// connection (QEMU opens one). Stops, and removes its socket, on drop.
pub struct NbdServer {
    socket: PathBuf,
    stop: Arc<AtomicBool>,
    accept: Option<JoinHandle<()>>,
    export: Arc<Export>,
}

impl NbdServer {
    /// Serves `volume` on `socket` (which must not exist: the caller
    /// removes a stale one). `trace`, when given, takes a line per request
    /// (`LAZYINIT_NBD_TRACE=1`; the caller makes it beside the socket).
    pub fn start(
        volume: &Path,
        socket: &Path,
        hold: Hold,
        trace: Option<File>,
    ) -> Result<Self, ProviderError> {
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(volume)
            .map_err(|e| ProviderError::infra(format!("cannot open {}: {e}", volume.display())))?;
        let size = file
            .metadata()
            .map_err(|e| ProviderError::infra(e.to_string()))?
            .len();
        let listener = UnixListener::bind(socket).map_err(|e| {
            ProviderError::infra(format!("cannot listen on {}: {e}", socket.display()))
        })?;
        let export = Arc::new(Export {
            file,
            size,
            hold,
            zero_requests: AtomicU64::new(0),
            written: {
                use std::os::unix::fs::MetadataExt;
                let blocks = std::fs::metadata(volume).map(|m| m.blocks()).unwrap_or(1);
                (blocks == 0).then(|| Mutex::new(Extents::default()))
            },
            trace: trace.map(|f| Mutex::new(std::io::BufWriter::new(f))),
            epoch: Instant::now(),
        });
        let stop = Arc::new(AtomicBool::new(false));
        let accept = {
            let (export, stop) = (export.clone(), stop.clone());
            std::thread::Builder::new()
                .name("nbd-accept".into())
                .spawn(move || {
                    for conn in listener.incoming() {
                        if stop.load(Ordering::SeqCst) {
                            break;
                        }
                        let Ok(conn) = conn else { continue };
                        let export = export.clone();
                        let _ =
                            std::thread::Builder::new()
                                .name("nbd-conn".into())
                                .spawn(move || {
                                    if let Err(e) = serve(conn, &export) {
                                        tracing::debug!(error = %e, "NBD connection ended");
                                    }
                                });
                    }
                })
                .map_err(|e| ProviderError::infra(format!("cannot start the NBD server: {e}")))?
        };
        Ok(Self {
            socket: socket.to_path_buf(),
            stop,
            accept: Some(accept),
            export,
        })
    }

    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// Zero requests served so far.
    pub fn zero_requests(&self) -> u64 {
        self.export.zero_requests.load(Ordering::SeqCst)
    }
}

impl Drop for NbdServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wake the accept loop so it sees the flag; connection threads end
        // when QEMU, stopped before this, closes its end.
        let _ = UnixStream::connect(&self.socket);
        if let Some(t) = self.accept.take() {
            let _ = t.join();
        }
        let _ = std::fs::remove_file(&self.socket);
    }
}

/// Puts the calling thread at its cell's level (see [`ThreadLevel`]), with
/// a timer slack of 1 us: a delayed reply must leave on time.
fn cell_thread(export: &Export) {
    let _ = nix::sys::prctl::set_timerslack(1000);
    export.hold.join();
}

fn serve(conn: UnixStream, export: &Arc<Export>) -> io::Result<()> {
    let mut r = BufReader::with_capacity(1 << 20, conn.try_clone()?);
    let mut hw = conn.try_clone()?;
    if !handshake(&mut r, &mut hw, export.size)? {
        return Ok(());
    }
    let w = Arc::new(Mutex::new(conn));
    cell_thread(export);
    let queue = Arc::new(DelayQueue::new());
    let answerer = {
        let (queue, w, export) = (queue.clone(), w.clone(), export.clone());
        std::thread::Builder::new()
            .name("nbd-delay".into())
            .spawn(move || {
                cell_thread(&export);
                queue.run(&w, &export);
            })?
    };
    let result = requests(&mut r, &w, export, &queue);
    queue.close();
    let _ = answerer.join();
    result
}

fn requests(
    r: &mut impl Read,
    w: &Mutex<UnixStream>,
    export: &Arc<Export>,
    queue: &DelayQueue,
) -> io::Result<()> {
    loop {
        let mut h = [0u8; 28];
        match r.read_exact(&mut h) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(()),
            Err(e) => return Err(e),
        }
        let arrived = Instant::now();
        if be_u32(&h) != REQUEST_MAGIC {
            return Err(io::Error::other("bad request magic"));
        }
        let (kind, cookie, offset, len) = (
            be_u16(&h[6..]),
            be_u64(&h[8..]),
            be_u64(&h[16..]),
            be_u32(&h[24..]),
        );
        // The block size limit bounds payloads (reads and writes); a trim or
        // zero request may cover up to 4 GiB of the export.
        let in_range = offset
            .checked_add(len as u64)
            .is_some_and(|end| end <= export.size)
            && (len <= MAX_REQUEST || matches!(kind, CMD_TRIM | CMD_WRITE_ZEROES));
        match kind {
            CMD_WRITE => {
                let mut buf = vec![0u8; len as usize];
                r.read_exact(&mut buf)?;
                let err = if !in_range {
                    EINVAL
                } else if export.file.write_all_at(&buf, offset).is_err() {
                    EIO
                } else {
                    if let Some(w) = &export.written {
                        w.lock().unwrap().add(offset, offset + len as u64);
                    }
                    0
                };
                reply(w, cookie, err, &[])?;
                export.log(kind, offset, len, arrived);
            }
            CMD_READ => {
                if !in_range {
                    reply(w, cookie, EINVAL, &[])?;
                    continue;
                }
                let mut buf = vec![0u8; len as usize];
                match export.file.read_exact_at(&mut buf, offset) {
                    Ok(()) => reply(w, cookie, 0, &buf)?,
                    Err(_) => reply(w, cookie, EIO, &[])?,
                }
                export.log(kind, offset, len, arrived);
            }
            CMD_FLUSH => {
                reply(w, cookie, 0, &[])?;
                export.log(kind, offset, len, arrived);
            }
            CMD_TRIM | CMD_WRITE_ZEROES if !in_range => reply(w, cookie, EINVAL, &[])?,
            CMD_TRIM | CMD_WRITE_ZEROES => {
                zero(w, export, queue, (kind, cookie, offset, len), arrived)?
            }
            CMD_DISC => return Ok(()),
            _ => reply(w, cookie, EINVAL, &[])?,
        }
    }
}

/// A trim or zero request: the range is zeroed at once; a zero request's
/// reply is held (the cell's hold, from its arrival), a trim's is not.
fn zero(
    w: &Mutex<UnixStream>,
    export: &Export,
    queue: &DelayQueue,
    (kind, cookie, offset, len): (u16, u64, u64, u32),
    arrived: Instant,
) -> io::Result<()> {
    let delay = if kind == CMD_WRITE_ZEROES {
        export.zero_requests.fetch_add(1, Ordering::SeqCst);
        export.hold.get()
    } else {
        Duration::ZERO
    };
    let end = offset + len as u64;
    let pieces = match &export.written {
        Some(w) => w.lock().unwrap().take(offset, end),
        None => vec![(offset, end)],
    };
    let err = match pieces
        .into_iter()
        .try_for_each(|(a, b)| zero_range(&export.file, a, b - a))
    {
        Ok(()) => 0,
        Err(_) => EIO,
    };
    if delay.is_zero() {
        reply(w, cookie, err, &[])?;
        export.log(kind, offset, len, arrived);
    } else {
        queue.push(Held {
            due: arrived + delay,
            cookie,
            err,
            log: (kind, offset, len, arrived),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests;

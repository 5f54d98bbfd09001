//! A latency storage profile: the volume file is served to QEMU over NBD
//! on a unix socket in the cell's folder, by a small server in this
//! process that holds every zero (WRITE_ZEROES) request for a fixed time.
//!
//! Why: with the fix, the sleep between groups is set from the first
//! group's zeroing time z1 (DESIGN §3). On a raw file under TCG, z1 is about
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

/// The hold of every zero (WRITE_ZEROES) request, from its arrival. Shared
/// by the volume's and the warm-up disk's servers, and set while the guest
/// runs: the `ebs` profile calibrates it on each guest (the guest protocol's
/// calibration step) before the measured mount.
///
/// It also carries the scheduling level of the cell's NBD threads (see
/// [`ThreadLevel`]): the servers of one cell share both.
#[derive(Debug, Clone)]
pub struct Hold(Arc<AtomicU64>, Arc<Mutex<Threads>>);

impl Hold {
    pub fn new(d: Duration) -> Self {
        Hold(
            Arc::new(AtomicU64::new(d.as_nanos() as u64)),
            Arc::new(Mutex::new(Threads {
                tids: Vec::new(),
                level: ThreadLevel::Normal { nice: 0 },
            })),
        )
    }
    pub fn get(&self) -> Duration {
        Duration::from_nanos(self.0.load(Ordering::SeqCst))
    }
    pub fn set(&self, d: Duration) {
        self.0.store(d.as_nanos() as u64, Ordering::SeqCst);
    }

    /// Moves every NBD thread of the cell (and those started later) to
    /// `level`. Errors (not root) are the caller's to report.
    pub fn set_level(&self, level: ThreadLevel) -> Result<(), String> {
        let mut t = self.1.lock().unwrap();
        t.level = level;
        t.tids
            .retain(|tid| std::path::Path::new(&format!("/proc/self/task/{tid}")).exists());
        t.tids.iter().try_for_each(|&tid| level.apply(tid))
    }

    /// Registers the calling thread and puts it at the cell's level.
    fn join(&self) {
        let tid = nix::unistd::gettid().as_raw() as u32;
        let mut t = self.1.lock().unwrap();
        t.tids.push(tid);
        if let Err(why) = t.level.apply(tid) {
            tracing::debug!(%why, "NBD thread stays at normal priority");
        }
    }
}

/// The NBD threads of one cell, and the level they run at.
#[derive(Debug)]
struct Threads {
    tids: Vec<u32>,
    level: ThreadLevel,
}

/// How a cell's NBD threads are scheduled. They follow their guest: while
/// it makes its filesystem they are normal work at its nice value (at a
/// real-time level, two dozen servers busy with other guests' mkfs took the
/// CPU from a guest timing its calibration mounts: samples of 4-22 ms for a
/// 3.4 ms zeroing, on 48 cells at once); while it is measured they sit
/// above its real-time level, so a held reply leaves on time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ThreadLevel {
    Normal { nice: u8 },
    Realtime(u8),
}

impl ThreadLevel {
    fn apply(self, tid: u32) -> Result<(), String> {
        match self {
            ThreadLevel::Realtime(p) => crate::process::set_realtime(tid, false, Some(p)),
            ThreadLevel::Normal { nice } => {
                crate::process::set_realtime(tid, false, None)?;
                crate::process::set_thread_nice(tid, nice)
            }
        }
    }
}

impl lazyinit_core::provider::ZeroHold for Hold {
    fn get(&self) -> Duration {
        Hold::get(self)
    }
    fn set(&self, hold: Duration) {
        Hold::set(self, hold)
    }
}

/// A latency profile as asked for: a fixed hold, or a target for the whole
/// first zeroing (z1), from which the guest's own part is taken off.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LatencyProfile {
    /// `latency:D`: every zero request takes D more.
    Fixed(Duration),
    /// `ebs`: z1 should come to this much. The hold starts at the target
    /// minus a prior for the guest's own part (below) and is calibrated on
    /// the guest before the measured mount.
    Z1Target(Duration),
}

/// A prior for the guest's own part of a first zeroing on this NBD path
/// (the guest's block and ext4 code, virtio, QEMU's NBD client), from the
/// `calibrate-z1` preset on one builder under TCG. Only the starting hold
/// of a calibration: each guest measures its own (hosts differ by 0.2 ms
/// and more, which at HZ=250 is half a tick of L).
pub fn guest_part_prior(arch: lazyinit_core::Arch, accel: crate::Accel) -> Duration {
    use crate::Accel;
    use lazyinit_core::Arch;
    match (arch, accel) {
        (Arch::X86_64, Accel::Tcg) => Duration::from_micros(GUEST_PART_TCG_X86_US),
        (Arch::Arm64, Accel::Tcg) => Duration::from_micros(GUEST_PART_TCG_ARM64_US),
        (_, Accel::Kvm) => Duration::from_micros(50),
    }
}

const GUEST_PART_TCG_X86_US: u64 = 1100;
const GUEST_PART_TCG_ARM64_US: u64 = 1000;

impl LatencyProfile {
    /// The starting hold for a guest of this arch under this accelerator.
    pub fn initial_hold(self, arch: lazyinit_core::Arch, accel: crate::Accel) -> Duration {
        match self {
            LatencyProfile::Fixed(d) => d,
            LatencyProfile::Z1Target(t) => {
                lazyinit_core::storage::hold_for(t, guest_part_prior(arch, accel))
            }
        }
    }
}

pub use lazyinit_core::storage::parse_delay;

// Protocol constants (NBD spec, doc/proto.md).
const NBDMAGIC: u64 = 0x4e42_444d_4147_4943;
const IHAVEOPT: u64 = 0x4948_4156_454f_5054;
const OPT_REPLY_MAGIC: u64 = 0x0003_e889_0455_65a9;
const FLAG_FIXED_NEWSTYLE: u16 = 1;
const FLAG_NO_ZEROES: u16 = 2;
const CLIENT_NO_ZEROES: u32 = 2;
const OPT_EXPORT_NAME: u32 = 1;
const OPT_ABORT: u32 = 2;
const OPT_INFO: u32 = 6;
const OPT_GO: u32 = 7;
const REP_ACK: u32 = 1;
const REP_INFO: u32 = 3;
const REP_ERR_UNSUP: u32 = 0x8000_0001;
const REP_ERR_INVALID: u32 = 0x8000_0003;
const INFO_EXPORT: u16 = 0;
const INFO_BLOCK_SIZE: u16 = 3;
/// HAS_FLAGS | SEND_FLUSH | SEND_TRIM | SEND_WRITE_ZEROES.
const TRANSMISSION_FLAGS: u16 = 1 | (1 << 2) | (1 << 5) | (1 << 6);
const REQUEST_MAGIC: u32 = 0x2560_9513;
const SIMPLE_REPLY_MAGIC: u32 = 0x6744_6698;
const CMD_READ: u16 = 0;
const CMD_WRITE: u16 = 1;
const CMD_DISC: u16 = 2;
const CMD_FLUSH: u16 = 3;
const CMD_TRIM: u16 = 4;
const CMD_WRITE_ZEROES: u16 = 6;
const EIO: u32 = 5;
const EINVAL: u32 = 22;
const MAX_REQUEST: u32 = 32 << 20;

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
    pub fn start(volume: &Path, socket: &Path, hold: Hold) -> Result<Self, ProviderError> {
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(volume)
            .map_err(|e| ProviderError::infra(format!("cannot open {}: {e}", volume.display())))?;
        let size = file
            .metadata()
            .map_err(|e| ProviderError::infra(e.to_string()))?
            .len();
        // A stale socket of an interrupted earlier attempt.
        let _ = std::fs::remove_file(socket);
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
            trace: std::env::var_os("LAZYINIT_NBD_TRACE").and_then(|_| {
                let f = File::create(lazyinit_core::CellFolder::nbd_trace_csv(socket)).ok()?;
                Some(Mutex::new(std::io::BufWriter::new(f)))
            }),
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

fn be_u16(b: &[u8]) -> u16 {
    u16::from_be_bytes([b[0], b[1]])
}
fn be_u32(b: &[u8]) -> u32 {
    u32::from_be_bytes(b[..4].try_into().unwrap())
}
fn be_u64(b: &[u8]) -> u64 {
    u64::from_be_bytes(b[..8].try_into().unwrap())
}

fn option_reply(w: &mut impl Write, opt: u32, kind: u32, data: &[u8]) -> io::Result<()> {
    let mut m = Vec::with_capacity(20 + data.len());
    m.extend_from_slice(&OPT_REPLY_MAGIC.to_be_bytes());
    m.extend_from_slice(&opt.to_be_bytes());
    m.extend_from_slice(&kind.to_be_bytes());
    m.extend_from_slice(&(data.len() as u32).to_be_bytes());
    m.extend_from_slice(data);
    w.write_all(&m)
}

/// Option haggling; true when the client moves on to transmission.
fn handshake(r: &mut impl Read, w: &mut impl Write, size: u64) -> io::Result<bool> {
    let mut hello = Vec::new();
    hello.extend_from_slice(&NBDMAGIC.to_be_bytes());
    hello.extend_from_slice(&IHAVEOPT.to_be_bytes());
    hello.extend_from_slice(&(FLAG_FIXED_NEWSTYLE | FLAG_NO_ZEROES).to_be_bytes());
    w.write_all(&hello)?;
    let mut cf = [0u8; 4];
    r.read_exact(&mut cf)?;
    let no_zeroes = be_u32(&cf) & CLIENT_NO_ZEROES != 0;
    loop {
        let mut h = [0u8; 16];
        r.read_exact(&mut h)?;
        if be_u64(&h) != IHAVEOPT {
            return Err(io::Error::other("bad option magic"));
        }
        let (opt, len) = (be_u32(&h[8..]), be_u32(&h[12..]));
        if len > 64 << 10 {
            return Err(io::Error::other("option too long"));
        }
        let mut data = vec![0u8; len as usize];
        r.read_exact(&mut data)?;
        match opt {
            OPT_EXPORT_NAME => {
                let mut m = Vec::new();
                m.extend_from_slice(&size.to_be_bytes());
                m.extend_from_slice(&TRANSMISSION_FLAGS.to_be_bytes());
                if !no_zeroes {
                    m.extend_from_slice(&[0u8; 124]);
                }
                w.write_all(&m)?;
                return Ok(true);
            }
            OPT_INFO | OPT_GO => {
                // u32 name length, name, u16 count, count x u16 info types.
                let requests = (|| {
                    let n = be_u32(data.get(..4)?) as usize;
                    let rest = data.get(4 + n..)?;
                    let count = be_u16(rest.get(..2)?) as usize;
                    let list = rest.get(2..2 + 2 * count)?;
                    Some(list.chunks(2).map(be_u16).collect::<Vec<_>>())
                })();
                let Some(requests) = requests else {
                    option_reply(w, opt, REP_ERR_INVALID, &[])?;
                    continue;
                };
                let mut info = Vec::new();
                info.extend_from_slice(&INFO_EXPORT.to_be_bytes());
                info.extend_from_slice(&size.to_be_bytes());
                info.extend_from_slice(&TRANSMISSION_FLAGS.to_be_bytes());
                option_reply(w, opt, REP_INFO, &info)?;
                if requests.contains(&INFO_BLOCK_SIZE) {
                    let mut b = Vec::new();
                    b.extend_from_slice(&INFO_BLOCK_SIZE.to_be_bytes());
                    for v in [1u32, 4096, MAX_REQUEST] {
                        b.extend_from_slice(&v.to_be_bytes());
                    }
                    option_reply(w, opt, REP_INFO, &b)?;
                }
                option_reply(w, opt, REP_ACK, &[])?;
                if opt == OPT_GO {
                    return Ok(true);
                }
            }
            OPT_ABORT => {
                let _ = option_reply(w, opt, REP_ACK, &[]);
                return Ok(false);
            }
            _ => option_reply(w, opt, REP_ERR_UNSUP, &[])?,
        }
    }
}

fn reply(w: &Mutex<UnixStream>, cookie: u64, error: u32, data: &[u8]) -> io::Result<()> {
    let mut m = Vec::with_capacity(16 + data.len());
    m.extend_from_slice(&SIMPLE_REPLY_MAGIC.to_be_bytes());
    m.extend_from_slice(&error.to_be_bytes());
    m.extend_from_slice(&cookie.to_be_bytes());
    m.extend_from_slice(data);
    // One write per reply keeps replies whole when threads answer at once.
    w.lock().unwrap().write_all(&m)
}

/// The byte ranges written since the server started, for a volume that was
/// all holes then: a zero or trim request over ranges never written needs
/// no call into the host filesystem at all. (A punch next to mkfs's
/// metadata took 0.4 ms more than the hold on a 3 TiB volume, straight into
/// the measured z1.)
#[derive(Debug, Default)]
struct Extents(std::collections::BTreeMap<u64, u64>);

impl Extents {
    /// Marks [start, end) written, merging with touching ranges.
    fn add(&mut self, mut start: u64, mut end: u64) {
        if start >= end {
            return;
        }
        // A range starting at or before `start` that reaches it.
        if let Some((&s, &e)) = self.0.range(..=start).next_back() {
            if e >= start {
                start = s;
                end = end.max(e);
                self.0.remove(&s);
            }
        }
        // Ranges starting inside [start, end].
        let inside: Vec<(u64, u64)> = self.0.range(start..=end).map(|(&s, &e)| (s, e)).collect();
        for (s, e) in inside {
            end = end.max(e);
            self.0.remove(&s);
        }
        self.0.insert(start, end);
    }

    /// The written parts of [start, end), which are forgotten (the caller
    /// zeroes them).
    fn take(&mut self, start: u64, end: u64) -> Vec<(u64, u64)> {
        let mut hit = Vec::new();
        let first = self
            .0
            .range(..start)
            .next_back()
            .filter(|(_, &e)| e > start)
            .map(|(&s, _)| s);
        let keys: Vec<u64> = first
            .into_iter()
            .chain(self.0.range(start..end).map(|(&s, _)| s))
            .collect();
        for s in keys {
            let e = self.0.remove(&s).expect("listed");
            let (a, b) = (s.max(start), e.min(end));
            if a < b {
                hit.push((a, b));
            }
            if s < start {
                self.0.insert(s, start);
            }
            if e > end {
                self.0.insert(end, e);
            }
        }
        hit
    }
}

/// Zeroes a range, leaving a hole (a 2 TiB volume must stay sparse).
fn zero_range(file: &File, offset: u64, len: u64) -> io::Result<()> {
    use nix::fcntl::{fallocate, FallocateFlags};
    use std::os::fd::AsRawFd;
    fallocate(
        file.as_raw_fd(),
        FallocateFlags::FALLOC_FL_PUNCH_HOLE | FallocateFlags::FALLOC_FL_KEEP_SIZE,
        offset as i64,
        len as i64,
    )
    .map_err(io::Error::from)
}

/// Replies held back until their due time, answered by one thread per
/// connection (earliest due first).
struct DelayQueue {
    due: Mutex<(std::collections::BinaryHeap<Held>, bool)>,
    wake: std::sync::Condvar,
}

struct Held {
    due: Instant,
    cookie: u64,
    err: u32,
    log: (u16, u64, u32, Instant),
}

impl PartialEq for Held {
    fn eq(&self, o: &Self) -> bool {
        self.due == o.due
    }
}
impl Eq for Held {}
impl PartialOrd for Held {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Held {
    /// Reversed: the max-heap yields the earliest due first.
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        o.due.cmp(&self.due)
    }
}

impl DelayQueue {
    fn push(&self, h: Held) {
        self.due.lock().unwrap().0.push(h);
        self.wake.notify_one();
    }

    fn close(&self) {
        self.due.lock().unwrap().1 = true;
        self.wake.notify_one();
    }

    /// Answers each held reply at its due time, until closed and empty.
    fn run(&self, w: &Mutex<UnixStream>, export: &Export) {
        let mut g = self.due.lock().unwrap();
        loop {
            let now = Instant::now();
            match g.0.peek() {
                None if g.1 => return,
                None => g = self.wake.wait(g).unwrap(),
                Some(h) if h.due <= now => {
                    let h = g.0.pop().expect("peeked");
                    drop(g);
                    let _ = reply(w, h.cookie, h.err, &[]);
                    let (kind, offset, len, arrived) = h.log;
                    export.log(kind, offset, len, arrived);
                    g = self.due.lock().unwrap();
                }
                Some(h) => {
                    let wait = h.due - now;
                    g = self.wake.wait_timeout(g, wait).unwrap().0;
                }
            }
        }
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
    let queue = Arc::new(DelayQueue {
        due: Mutex::new((Default::default(), false)),
        wake: std::sync::Condvar::new(),
    });
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
            CMD_TRIM | CMD_WRITE_ZEROES => {
                if !in_range {
                    reply(w, cookie, EINVAL, &[])?;
                    continue;
                }
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
            }
            CMD_DISC => return Ok(()),
            _ => reply(w, cookie, EINVAL, &[])?,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ebs_starts_from_the_prior_and_the_hold_can_be_set() {
        use crate::Accel;
        use lazyinit_core::Arch;
        let ebs = LatencyProfile::Z1Target(Duration::from_micros(3400));
        assert_eq!(
            ebs.initial_hold(Arch::X86_64, Accel::Tcg),
            Duration::from_micros(3400 - GUEST_PART_TCG_X86_US)
        );
        assert_eq!(
            ebs.initial_hold(Arch::Arm64, Accel::Tcg),
            Duration::from_micros(3400 - GUEST_PART_TCG_ARM64_US)
        );
        let fixed = LatencyProfile::Fixed(Duration::from_micros(700));
        assert_eq!(
            fixed.initial_hold(Arch::Arm64, Accel::Kvm),
            Duration::from_micros(700)
        );
        // Never zero or negative, whatever the target.
        let tiny = LatencyProfile::Z1Target(Duration::from_micros(10));
        assert_eq!(
            tiny.initial_hold(Arch::X86_64, Accel::Tcg),
            Duration::from_micros(1)
        );
        let h = Hold::new(Duration::from_micros(2300));
        let shared = h.clone();
        shared.set(Duration::from_micros(2412));
        assert_eq!(h.get(), Duration::from_micros(2412));
    }

    #[test]
    fn extents_merge_and_split() {
        let mut x = Extents::default();
        x.add(10, 20);
        x.add(20, 30); // touching: merged
        x.add(40, 50);
        x.add(45, 60); // overlapping: merged
        assert_eq!(
            x.0.iter().map(|(&a, &b)| (a, b)).collect::<Vec<_>>(),
            vec![(10, 30), (40, 60)]
        );
        assert!(x.take(0, 10).is_empty() && x.take(30, 40).is_empty());
        // Takes the written parts and leaves the rest.
        assert_eq!(x.take(15, 45), vec![(15, 30), (40, 45)]);
        assert_eq!(
            x.0.iter().map(|(&a, &b)| (a, b)).collect::<Vec<_>>(),
            vec![(10, 15), (45, 60)]
        );
        assert_eq!(x.take(0, 100), vec![(10, 15), (45, 60)]);
        assert!(x.0.is_empty());
        x.add(5, 8);
        x.add(1, 100); // swallows
        assert_eq!(
            x.0.iter().map(|(&a, &b)| (a, b)).collect::<Vec<_>>(),
            vec![(1, 100)]
        );
        assert_eq!(x.take(50, 60), vec![(50, 60)]);
        assert_eq!(
            x.0.iter().map(|(&a, &b)| (a, b)).collect::<Vec<_>>(),
            vec![(1, 50), (60, 100)]
        );
    }

    #[test]
    fn delays_parse_in_ms_and_us() {
        assert_eq!(parse_delay("2.4ms"), Some(Duration::from_micros(2400)));
        assert_eq!(parse_delay("2400us"), Some(Duration::from_micros(2400)));
        assert_eq!(parse_delay("3ms"), Some(Duration::from_millis(3)));
        for bad in ["3", "0ms", "2s", "-1ms", "1001ms", "x ms", "NaNms"] {
            assert_eq!(parse_delay(bad), None, "{bad}");
        }
    }

    fn qemu_io(uri: &str, cmds: &[&str]) -> (Duration, String) {
        let mut c = std::process::Command::new("qemu-io");
        c.args(["-f", "raw"]);
        for x in cmds {
            c.args(["-c", x]);
        }
        c.arg(uri);
        let t = Instant::now();
        let out = c.output().expect("qemu-io (qemu-utils) runs");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        (
            t.elapsed(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
        )
    }

    /// (policy, rt_priority, nice) of one thread of this process.
    fn sched_of(tid: u32) -> (u32, u32, i32) {
        let stat = std::fs::read_to_string(format!("/proc/self/task/{tid}/stat")).unwrap();
        let f: Vec<&str> = stat[stat.rfind(')').unwrap() + 2..].split(' ').collect();
        // Fields 19 (nice), 40 (rt_priority), 41 (policy), from field 3 on.
        (
            f[38].parse().unwrap(),
            f[37].parse().unwrap(),
            f[16].parse().unwrap(),
        )
    }

    /// The server threads of a cell go where its guest goes: normal work at
    /// its nice while it prepares, SCHED_FIFO above it while measured.
    #[test]
    fn a_cells_threads_follow_its_level() {
        assert!(
            crate::process::is_root(),
            "needs root (real-time priorities); CI runs the tests as root"
        );
        let dir = tempfile::tempdir().unwrap();
        let vol = dir.path().join("v.raw");
        File::create(&vol).unwrap().set_len(16 << 20).unwrap();
        let sock = dir.path().join("v.sock");
        let hold = Hold::new(Duration::from_micros(100));
        let _srv = NbdServer::start(&vol, &sock, hold.clone()).unwrap();
        // A client that stays connected for a while.
        let mut client = std::process::Command::new("qemu-io")
            .args(["-f", "raw", "-c", "sleep 5000"])
            .arg(format!("nbd+unix:///?socket={}", sock.display()))
            .stdout(std::process::Stdio::null())
            .spawn()
            .expect("qemu-io (qemu-utils) runs");
        let deadline = Instant::now() + Duration::from_secs(4);
        let tids = loop {
            let tids = hold.1.lock().unwrap().tids.clone();
            if tids.len() == 2 || Instant::now() > deadline {
                break tids;
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        assert_eq!(
            tids.len(),
            2,
            "the request and reply threads joined the cell"
        );
        for &tid in &tids {
            assert_eq!(
                sched_of(tid).0,
                0,
                "normal work until the cell says otherwise"
            );
        }
        hold.set_level(ThreadLevel::Realtime(3)).unwrap();
        for &tid in &tids {
            assert_eq!(sched_of(tid).0, 1, "SCHED_FIFO");
            assert_eq!(sched_of(tid).1, 3);
        }
        hold.set_level(ThreadLevel::Normal { nice: 7 }).unwrap();
        for &tid in &tids {
            assert_eq!(sched_of(tid), (0, 0, 7));
        }
        client.kill().unwrap();
        client.wait().unwrap();
    }

    /// QEMU's own NBD client against the server: data written comes back,
    /// zeroed ranges read as zeros and become holes in the file, each zero
    /// request waits the delay and plain writes do not.
    #[test]
    fn qemu_client_reads_writes_and_waits_on_zeroes() {
        let dir = tempfile::tempdir().unwrap();
        let vol = dir.path().join("v.raw");
        File::create(&vol).unwrap().set_len(64 << 20).unwrap();
        let sock = dir.path().join("v.sock");
        let srv = NbdServer::start(&vol, &sock, Hold::new(Duration::from_millis(200))).unwrap();
        let uri = format!("nbd+unix:///?socket={}", sock.display());

        let (writes, _) = qemu_io(
            &uri,
            &["write -P 0xab 0 4M", "write -P 0xcd 8M 4M", "flush"],
        );
        let (_, out) = qemu_io(&uri, &["read -P 0xab 0 4M", "read -P 0xcd 8M 4M"]);
        assert!(!out.contains("Pattern verification failed"), "{out}");
        let allocated = |p: &Path| {
            use std::os::unix::fs::MetadataExt;
            std::fs::metadata(p).unwrap().blocks() * 512
        };
        assert!(allocated(&vol) >= 8 << 20);

        let (zeroes, _) = qemu_io(&uri, &["write -z 0 2M", "write -z 2M 2M", "write -z 8M 4M"]);
        assert_eq!(srv.zero_requests(), 3);
        // A discard of the whole device in one request (mkfs does this) is
        // not bound by the 32 MiB payload limit.
        qemu_io(&uri, &["discard 0 64M"]);
        let (_, out) = qemu_io(&uri, &["read -P 0 0 4M", "read -P 0 8M 4M"]);
        assert!(!out.contains("Pattern verification failed"), "{out}");
        assert!(allocated(&vol) < 1 << 20, "zeroed ranges are holes");
        // Three zero requests in sequence: at least 3 x 200 ms (a lower
        // bound: a loaded host only adds). Only zero requests are held: the
        // counter saw exactly the three.
        assert!(zeroes >= Duration::from_millis(600), "{zeroes:?}");
        let _ = writes;

        drop(srv);
        assert!(!sock.exists());
    }
}

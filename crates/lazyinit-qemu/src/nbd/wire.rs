//! The NBD wire protocol (doc/proto.md of the NBD project): the
//! fixed-newstyle handshake, request headers and simple replies.

use std::io::{self, Read, Write};
use std::os::unix::net::UnixStream;
use std::sync::Mutex;

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
pub(super) const REQUEST_MAGIC: u32 = 0x2560_9513;
const SIMPLE_REPLY_MAGIC: u32 = 0x6744_6698;
pub(super) const CMD_READ: u16 = 0;
pub(super) const CMD_WRITE: u16 = 1;
pub(super) const CMD_DISC: u16 = 2;
pub(super) const CMD_FLUSH: u16 = 3;
pub(super) const CMD_TRIM: u16 = 4;
pub(super) const CMD_WRITE_ZEROES: u16 = 6;
pub(super) const EIO: u32 = 5;
pub(super) const EINVAL: u32 = 22;
pub(super) const MAX_REQUEST: u32 = 32 << 20;

pub(super) fn be_u16(b: &[u8]) -> u16 {
    u16::from_be_bytes([b[0], b[1]])
}
pub(super) fn be_u32(b: &[u8]) -> u32 {
    u32::from_be_bytes(b[..4].try_into().unwrap())
}
pub(super) fn be_u64(b: &[u8]) -> u64 {
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
pub(super) fn handshake(r: &mut impl Read, w: &mut impl Write, size: u64) -> io::Result<bool> {
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

pub(super) fn reply(w: &Mutex<UnixStream>, cookie: u64, error: u32, data: &[u8]) -> io::Result<()> {
    let mut m = Vec::with_capacity(16 + data.len());
    m.extend_from_slice(&SIMPLE_REPLY_MAGIC.to_be_bytes());
    m.extend_from_slice(&error.to_be_bytes());
    m.extend_from_slice(&cookie.to_be_bytes());
    m.extend_from_slice(data);
    // One write per reply keeps replies whole when threads answer at once.
    w.lock().unwrap().write_all(&m)
}

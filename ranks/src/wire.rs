//! Everything ranks send each other as bytes, encoded in one place: little-endian fixed-size
//! records ([`Record`]) read and written through [`Writer`] and [`Reader`], each with a round-trip
//! test. The TCP hello and endpoints, the verbs endpoints and connect records, window keys,
//! clear-to-sends, and the numbers gathered over MPI all go through here; nothing else in the
//! crate packs bytes by hand.

use std::net::{IpAddr, Ipv6Addr, SocketAddr};

use crate::devices::GidSummary;
use crate::verbs::QpEndpoint;

/// Appends little-endian fields to a buffer.
#[derive(Debug, Default)]
pub struct Writer(Vec<u8>);

impl Writer {
    pub fn with_capacity(n: usize) -> Writer {
        Writer(Vec::with_capacity(n))
    }
    pub fn u8(&mut self, v: u8) -> &mut Self {
        self.0.push(v);
        self
    }
    pub fn u16(&mut self, v: u16) -> &mut Self {
        self.bytes(&v.to_le_bytes())
    }
    pub fn u32(&mut self, v: u32) -> &mut Self {
        self.bytes(&v.to_le_bytes())
    }
    pub fn u64(&mut self, v: u64) -> &mut Self {
        self.bytes(&v.to_le_bytes())
    }
    pub fn bytes(&mut self, b: &[u8]) -> &mut Self {
        self.0.extend_from_slice(b);
        self
    }
    /// Zeros up to a total length of `len` (a record's fixed size).
    pub fn pad_to(&mut self, len: usize) -> &mut Self {
        if self.0.len() < len {
            self.0.resize(len, 0);
        }
        self
    }
    pub fn len(&self) -> usize {
        self.0.len()
    }
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
    pub fn into_bytes(self) -> Vec<u8> {
        self.0
    }
}

/// Reads little-endian fields; every read is None past the end.
#[derive(Debug)]
pub struct Reader<'a> {
    b: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    pub fn new(b: &'a [u8]) -> Reader<'a> {
        Reader { b, at: 0 }
    }
    pub fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let s = self.b.get(self.at..self.at.checked_add(n)?)?;
        self.at += n;
        Some(s)
    }
    pub fn array<const N: usize>(&mut self) -> Option<[u8; N]> {
        self.take(N)?.try_into().ok()
    }
    pub fn u8(&mut self) -> Option<u8> {
        Some(self.array::<1>()?[0])
    }
    pub fn u16(&mut self) -> Option<u16> {
        self.array().map(u16::from_le_bytes)
    }
    pub fn u32(&mut self) -> Option<u32> {
        self.array().map(u32::from_le_bytes)
    }
    pub fn u64(&mut self) -> Option<u64> {
        self.array().map(u64::from_le_bytes)
    }
    pub fn skip(&mut self, n: usize) -> Option<()> {
        self.take(n).map(|_| ())
    }
}

/// A fixed-size record on the wire.
pub trait Record: Sized {
    /// Encoded size in bytes.
    const LEN: usize;
    fn put(&self, w: &mut Writer);
    fn get(r: &mut Reader<'_>) -> Option<Self>;

    fn to_bytes(&self) -> Vec<u8> {
        let mut w = Writer::with_capacity(Self::LEN);
        self.put(&mut w);
        w.pad_to(Self::LEN);
        w.into_bytes()
    }
    /// Decode from the start of `b` (None when too short or malformed).
    fn from_bytes(b: &[u8]) -> Option<Self> {
        let b = b.get(..Self::LEN)?;
        Self::get(&mut Reader::new(b))
    }
}

/// Decode a gathered buffer of `Self::LEN`-byte records, one per rank; a short or malformed
/// record is an error naming the rank it came from.
pub fn decode_all<T: Record>(bytes: &[u8], what: &str) -> Result<Vec<T>, WireError> {
    if !bytes.chunks_exact(T::LEN).remainder().is_empty() {
        return Err(WireError {
            rank: bytes.len() / T::LEN,
            what: what.to_string(),
        });
    }
    bytes
        .chunks(T::LEN)
        .enumerate()
        .map(|(rank, c)| {
            T::from_bytes(c).ok_or_else(|| WireError {
                rank,
                what: what.to_string(),
            })
        })
        .collect()
}

/// A record from a rank could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{what}: what rank {rank} sent could not be decoded (are all ranks running the same meshrun?)")]
pub struct WireError {
    pub rank: usize,
    pub what: String,
}

impl Record for u64 {
    const LEN: usize = 8;
    fn put(&self, w: &mut Writer) {
        w.u64(*self);
    }
    fn get(r: &mut Reader<'_>) -> Option<Self> {
        r.u64()
    }
}

impl Record for f64 {
    const LEN: usize = 8;
    fn put(&self, w: &mut Writer) {
        w.u64(self.to_bits());
    }
    fn get(r: &mut Reader<'_>) -> Option<Self> {
        r.u64().map(f64::from_bits)
    }
}

/// A TCP listening address: family (4 or 6), 16 address bytes, port, padding.
impl Record for SocketAddr {
    const LEN: usize = 20;
    fn put(&self, w: &mut Writer) {
        match self.ip() {
            IpAddr::V4(v4) => w.u8(4).bytes(&v4.octets()).pad_to(17),
            IpAddr::V6(v6) => w.u8(6).bytes(&v6.octets()),
        };
        w.u16(self.port());
    }
    fn get(r: &mut Reader<'_>) -> Option<Self> {
        let family = r.u8()?;
        let addr: [u8; 16] = r.array()?;
        let port = r.u16()?;
        let ip = match family {
            4 => IpAddr::from([addr[0], addr[1], addr[2], addr[3]]),
            6 => IpAddr::V6(Ipv6Addr::from(addr)),
            _ => return None,
        };
        Some(SocketAddr::new(ip, port))
    }
}

/// A random token shared by all ranks of one job.
pub type JobToken = [u8; 16];

/// The first bytes each way on a TCP connection: magic, version, job token, rank, job size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hello {
    pub token: JobToken,
    pub rank: u32,
    pub size: u32,
}

impl Hello {
    const MAGIC: &'static [u8; 4] = b"MSHR";
    const VERSION: u32 = 2;

    /// The sender's rank when `b` is a valid hello of the job with `token` and `size` ranks.
    pub fn check(b: &[u8], token: &JobToken, size: usize) -> Option<usize> {
        let h = Hello::from_bytes(b)?;
        (&h.token == token && h.size as usize == size && (h.rank as usize) < size).then_some(h.rank as usize)
    }
}

impl Record for Hello {
    const LEN: usize = 32;
    fn put(&self, w: &mut Writer) {
        w.bytes(Self::MAGIC)
            .u32(Self::VERSION)
            .bytes(&self.token)
            .u32(self.rank)
            .u32(self.size);
    }
    fn get(r: &mut Reader<'_>) -> Option<Self> {
        if &r.array::<4>()? != Self::MAGIC || r.u32()? != Self::VERSION {
            return None;
        }
        Some(Hello {
            token: r.array()?,
            rank: r.u32()?,
            size: r.u32()?,
        })
    }
}

/// A verbs queue pair's endpoint: QPN, PSN, LID, GID, MTU, and the inbox (address, rkey).
impl Record for QpEndpoint {
    const LEN: usize = 48;
    fn put(&self, w: &mut Writer) {
        w.u32(self.qpn)
            .u32(self.psn)
            .u16(self.lid)
            .bytes(&self.gid)
            .u32(self.mtu)
            .u64(self.addr)
            .u32(self.rkey);
    }
    fn get(r: &mut Reader<'_>) -> Option<Self> {
        Some(QpEndpoint {
            qpn: r.u32()?,
            psn: r.u32()?,
            lid: r.u16()?,
            gid: r.array()?,
            mtu: r.u32()?,
            addr: r.u64()?,
            rkey: r.u32()?,
        })
    }
}

/// A one-sided window a peer may write into or read from: address and rkey.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WindowKey {
    pub addr: u64,
    pub rkey: u32,
}

impl WindowKey {
    pub fn to_array(&self) -> [u8; 12] {
        let mut b = [0u8; 12];
        b.copy_from_slice(&self.to_bytes());
        b
    }
    pub fn from_array(b: &[u8; 12]) -> WindowKey {
        let mut r = Reader::new(b);
        let (addr, rkey) = (r.u64().unwrap_or(0), r.u32().unwrap_or(0));
        WindowKey { addr, rkey }
    }
}

impl Record for WindowKey {
    const LEN: usize = 12;
    fn put(&self, w: &mut Writer) {
        w.u64(self.addr).u32(self.rkey);
    }
    fn get(r: &mut Reader<'_>) -> Option<Self> {
        Some(WindowKey {
            addr: r.u64()?,
            rkey: r.u32()?,
        })
    }
}

/// A zero-copy receive's clear-to-send: where the sender may write, and how many bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClearToSend {
    pub addr: u64,
    pub rkey: u32,
    pub len: u32,
}

impl ClearToSend {
    pub fn to_array(&self) -> [u8; 16] {
        let mut b = [0u8; 16];
        b.copy_from_slice(&self.to_bytes());
        b
    }
    pub fn from_array(b: &[u8; 16]) -> ClearToSend {
        let mut r = Reader::new(b);
        let (addr, rkey, len) = (r.u64().unwrap_or(0), r.u32().unwrap_or(0), r.u32().unwrap_or(0));
        ClearToSend { addr, rkey, len }
    }
}

impl Record for ClearToSend {
    const LEN: usize = 16;
    fn put(&self, w: &mut Writer) {
        w.u64(self.addr).u32(self.rkey).u32(self.len);
    }
    fn get(r: &mut Reader<'_>) -> Option<Self> {
        Some(ClearToSend {
            addr: r.u64()?,
            rkey: r.u32()?,
            len: r.u32()?,
        })
    }
}

/// What each rank contributes to the verbs connect allgather: its GID summary (None when its
/// local setup failed). The endpoints go peer by peer in an all-to-all, as [`QpEndpoint`] records,
/// so no rank holds the N x N table.
#[derive(Debug, Clone, PartialEq)]
pub struct ConnectRecord {
    pub summary: Option<GidSummary>,
}

impl ConnectRecord {
    /// Room for the GID description.
    const DESC_LEN: usize = 120;
    /// Encoded size (the same for every rank).
    pub const LEN: usize = 4 + Self::DESC_LEN;

    /// Encode (a failed rank sends zeros).
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut w = Writer::with_capacity(Self::LEN);
        if let Some(s) = &self.summary {
            let d = s.describe.as_bytes();
            w.u8(1)
                .u8(u8::from(s.ethernet))
                .u8(s.kind)
                .u8(u8::from(s.ipv4))
                .bytes(&d[..d.len().min(Self::DESC_LEN)]);
        }
        w.pad_to(Self::LEN);
        w.into_bytes()
    }

    /// Decode one rank's record; None when malformed.
    pub fn from_bytes(b: &[u8]) -> Option<ConnectRecord> {
        let b = b.get(..Self::LEN)?;
        let mut r = Reader::new(b);
        if r.u8()? != 1 {
            return Some(ConnectRecord { summary: None });
        }
        let (ethernet, kind, ipv4) = (r.u8()? == 1, r.u8()?, r.u8()? == 1);
        let d = r.take(Self::DESC_LEN)?;
        let end = d.iter().position(|&x| x == 0).unwrap_or(Self::DESC_LEN);
        Some(ConnectRecord {
            summary: Some(GidSummary {
                ethernet,
                kind,
                ipv4,
                describe: String::from_utf8_lossy(&d[..end]).into_owned(),
            }),
        })
    }
}

/// What a rank was doing when a post-mortem looked at it (see `postmortem`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WaitState {
    /// Working, or between steps: not blocked on any one peer.
    Busy = 0,
    /// Its deadline expired waiting on `peer` (a send or receive of the mesh).
    WaitingOnPeer = 1,
    /// Its deadline expired inside an MPI step (no one peer to name).
    WaitingInMpi = 2,
    /// `peer` closed its connection.
    PeerClosed = 3,
}

impl WaitState {
    fn from_u8(v: u8) -> Option<WaitState> {
        Some(match v {
            0 => WaitState::Busy,
            1 => WaitState::WaitingOnPeer,
            2 => WaitState::WaitingInMpi,
            3 => WaitState::PeerClosed,
            _ => return None,
        })
    }
}

/// One rank's state for a post-mortem: what it waited on, in which phase, for how long.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StallReport {
    pub rank: u32,
    pub pid: u32,
    pub state: WaitState,
    /// The peer waited on (or that closed), when there is one.
    pub peer: Option<u32>,
    pub waited_ms: u64,
    /// The phase, e.g. `all_reduce 1048576 B` or `pairwise round 3` (at most [`PHASE_MAX`] bytes).
    pub phase: String,
    /// The rank's own message about the wait (at most [`DETAIL_MAX`] bytes).
    pub detail: String,
}

/// Longest phase text a [`StallReport`] carries (longer text is cut at a character boundary).
pub const PHASE_MAX: usize = 96;
/// Longest detail text a [`StallReport`] carries.
pub const DETAIL_MAX: usize = 384;

/// `s` cut to at most `max` bytes at a character boundary.
fn cut(s: &str, max: usize) -> &str {
    let mut end = s.len().min(max);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

fn put_text(w: &mut Writer, s: &str, max: usize) {
    let s = cut(s, max);
    let start = w.len();
    w.u16(s.len() as u16).bytes(s.as_bytes()).pad_to(start + 2 + max);
}

fn get_text(r: &mut Reader<'_>, max: usize) -> Option<String> {
    let len = usize::from(r.u16()?);
    let field = r.take(max)?;
    let text = field.get(..len)?;
    std::str::from_utf8(text).ok().map(str::to_string)
}

impl Record for StallReport {
    const LEN: usize = 4 + 4 + 1 + 4 + 8 + 2 + PHASE_MAX + 2 + DETAIL_MAX;
    fn put(&self, w: &mut Writer) {
        w.u32(self.rank)
            .u32(self.pid)
            .u8(self.state as u8)
            .u32(self.peer.unwrap_or(u32::MAX))
            .u64(self.waited_ms);
        put_text(w, &self.phase, PHASE_MAX);
        put_text(w, &self.detail, DETAIL_MAX);
    }
    fn get(r: &mut Reader<'_>) -> Option<Self> {
        let rank = r.u32()?;
        let pid = r.u32()?;
        let state = WaitState::from_u8(r.u8()?)?;
        let peer = Some(r.u32()?).filter(|&p| p != u32::MAX);
        let waited_ms = r.u64()?;
        let phase = get_text(r, PHASE_MAX)?;
        let detail = get_text(r, DETAIL_MAX)?;
        Some(StallReport {
            rank,
            pid,
            state,
            peer,
            waited_ms,
            phase,
            detail,
        })
    }
}

/// What a frame on a rank's control port asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ControlKind {
    /// A rank's deadline expired: here is its report (sent to the collectors).
    Alarm = 1,
    /// A collector asks for the receiver's state now.
    Query = 2,
    /// The answer to a query.
    Answer = 3,
}

/// One message on a control port: magic, version, job token, kind, and a report (the sender's).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ControlFrame {
    pub token: JobToken,
    pub kind: ControlKind,
    pub report: StallReport,
}

impl ControlFrame {
    const MAGIC: &'static [u8; 4] = b"MSHC";
    const VERSION: u32 = 1;

    /// The frame in `b` when it is well formed and carries `token`.
    pub fn check(b: &[u8], token: &JobToken) -> Option<ControlFrame> {
        ControlFrame::from_bytes(b).filter(|f| &f.token == token)
    }
}

impl Record for ControlFrame {
    const LEN: usize = 4 + 4 + 16 + 1 + StallReport::LEN;
    fn put(&self, w: &mut Writer) {
        w.bytes(Self::MAGIC)
            .u32(Self::VERSION)
            .bytes(&self.token)
            .u8(self.kind as u8);
        self.report.put(w);
    }
    fn get(r: &mut Reader<'_>) -> Option<Self> {
        if r.take(4)? != Self::MAGIC || r.u32()? != Self::VERSION {
            return None;
        }
        let token = r.array()?;
        let kind = match r.u8()? {
            1 => ControlKind::Alarm,
            2 => ControlKind::Query,
            3 => ControlKind::Answer,
            _ => return None,
        };
        let report = StallReport::get(r)?;
        Some(ControlFrame { token, kind, report })
    }
}

/// Where a rank's control port listens and which process it is, gathered once at start-up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ControlEndpoint {
    /// None when that rank could not open its control port.
    pub addr: Option<SocketAddr>,
    pub pid: u32,
}

impl Record for ControlEndpoint {
    const LEN: usize = 1 + <SocketAddr as Record>::LEN + 4;
    fn put(&self, w: &mut Writer) {
        match self.addr {
            Some(a) => {
                w.u8(1).bytes(&a.to_bytes());
            }
            None => {
                w.u8(0).pad_to(1 + <SocketAddr as Record>::LEN);
            }
        }
        w.u32(self.pid);
    }
    fn get(r: &mut Reader<'_>) -> Option<Self> {
        let flag = r.u8()?;
        let addr = r.take(<SocketAddr as Record>::LEN)?;
        let addr = match flag {
            1 => Some(SocketAddr::from_bytes(addr)?),
            0 => None,
            _ => return None,
        };
        let pid = r.u32()?;
        Some(ControlEndpoint { addr, pid })
    }
}

#[cfg(test)]
mod tests;

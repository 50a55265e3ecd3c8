//! Connection setup through the RDMA connection manager (librdmacm), perftest's `-R`: instead of
//! exchanging GIDs and queue pair numbers out of band, one side listens on an IP address and port,
//! the other resolves that address to a device and a route and connects, and the manager moves
//! both queue pairs to RTS. This is how iWARP connects (it has no GIDs to exchange) and what some
//! RoCE fabrics require. Every wait is bounded: events are read from a non-blocking channel with
//! `poll(2)` and a deadline.
//!
//! Ownership: an [`EventChannel`] outlives every id made on it (each id holds it); a queue pair
//! made on an id ([`CmId::create_qp`]) holds the id, so the id is destroyed after the queue pair;
//! a [`Context`] taken from an id ([`CmId::context`]) holds the id, since librdmacm owns the device
//! context it hands out and keeps it open only while an id uses it.

use std::net::{Ipv4Addr, SocketAddrV4};
use std::ptr::NonNull;
use std::sync::Arc;
use std::time::Instant;

use rdma_sys::*;

use super::*;

struct Chan {
    raw: NonNull<rdma_event_channel>,
}

// SAFETY: librdmacm's event channel is a file descriptor with library state behind a mutex; the
// pointer is never exposed.
unsafe impl Send for Chan {}
// SAFETY: as for Send.
unsafe impl Sync for Chan {}

impl Drop for Chan {
    fn drop(&mut self) {
        // SAFETY: every id on this channel holds an Arc to it, so none is alive; destroyed once.
        unsafe { rdma_destroy_event_channel(self.raw.as_ptr()) };
    }
}

/// Where connection-manager events arrive, read with a deadline.
#[derive(Clone)]
pub struct EventChannel(Arc<Chan>);

pub(super) struct Id {
    raw: NonNull<rdma_cm_id>,
    _chan: Arc<Chan>,
}

// SAFETY: rdma_cm ids may be used from any thread (librdmacm locks its state); never exposed.
unsafe impl Send for Id {}
// SAFETY: as for Send.
unsafe impl Sync for Id {}

impl Drop for Id {
    fn drop(&mut self) {
        // SAFETY: the queue pair made on this id (if any) holds an Arc to it and is destroyed
        // first; events are acknowledged as they are read, so rdma_destroy_id does not wait on one.
        unsafe { rdma_destroy_id(self.raw.as_ptr()) };
    }
}

/// A connection-manager id: a listener, or one end of one connection.
#[derive(Clone)]
pub struct CmId(pub(super) Arc<Id>);

/// What happened to an id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CmEventKind {
    AddrResolved,
    RouteResolved,
    /// A peer asks to connect to a listener; the event's `new_id` is the connection's id.
    ConnectRequest,
    Established,
    /// The peer refused, or is not listening on that port (`status` says which).
    Rejected,
    Unreachable,
    ConnectError,
    AddrError,
    RouteError,
    Disconnected,
    /// Any other event, by librdmacm's name for it.
    Other(String),
}

/// One event, acknowledged as it was read: its kind, the token of the id it is about (for a
/// connection request, the listener's), its status and the peer's private data.
pub struct CmEvent {
    pub kind: CmEventKind,
    pub token: u64,
    pub status: i32,
    pub private_data: Vec<u8>,
    /// For [`CmEventKind::ConnectRequest`]: the new connection's id (token 0 until set).
    pub new_id: Option<CmId>,
}

/// The connection parameters meshrun uses, perftest's -R ones: `rd_atomic` outstanding RDMA reads
/// each way (the device's limit), retries as for the queue pairs connected by hand.
#[derive(Debug, Clone, Copy)]
pub struct ConnParams {
    pub rd_atomic: u8,
}

fn sockaddr_in(a: SocketAddrV4) -> libc::sockaddr_in {
    // SAFETY: plain data.
    let mut s: libc::sockaddr_in = unsafe { std::mem::zeroed() };
    s.sin_family = libc::AF_INET as libc::sa_family_t;
    s.sin_port = a.port().to_be();
    s.sin_addr.s_addr = u32::from(*a.ip()).to_be();
    s
}

const CM: &str = "rdma_cm";
/// rdma_cma.h's option levels and names (anonymous enums there, so not in the bindings).
const RDMA_OPTION_ID: i32 = 0;
const RDMA_OPTION_ID_TOS: i32 = 0;
const RDMA_OPTION_ID_ACK_TIMEOUT: i32 = 3;
const NO_UCM: &str =
    " (is the rdma_ucm module loaded, and /dev/infiniband/rdma_cm accessible to this user? modprobe rdma_ucm)";

fn cm_err(verb: &'static str, hint: &'static str) -> VerbsError {
    VerbsError::verb(verb, CM, errno(), hint)
}

impl EventChannel {
    /// A channel whose reads never block (each read waits in `poll(2)` up to its deadline).
    pub fn new() -> Result<EventChannel, VerbsError> {
        // SAFETY: no arguments; NULL with errno on failure.
        let raw = unsafe { rdma_create_event_channel() };
        let raw = NonNull::new(raw).ok_or_else(|| cm_err("rdma_create_event_channel", NO_UCM))?;
        let chan = Chan { raw };
        // SAFETY: the channel is valid; its fd is an open descriptor owned by librdmacm.
        let fd = unsafe { chan.raw.as_ref().fd };
        // SAFETY: fcntl on a valid descriptor with plain integer arguments.
        let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
        // SAFETY: as above.
        if flags < 0 || unsafe { libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK) } < 0 {
            return Err(cm_err("fcntl(O_NONBLOCK) on the rdma_cm channel", ""));
        }
        Ok(EventChannel(Arc::new(chan)))
    }

    /// A new id for reliable connections (RDMA_PS_TCP), carrying `token` in its user context.
    pub fn create_id(&self, token: u64) -> Result<CmId, VerbsError> {
        let mut raw = std::ptr::null_mut();
        // SAFETY: valid channel; `raw` receives the id; the context is an opaque integer.
        let rc = unsafe {
            rdma_create_id(
                self.0.raw.as_ptr(),
                &mut raw,
                token as usize as *mut libc::c_void,
                rdma_port_space::RDMA_PS_TCP,
            )
        };
        let raw = match NonNull::new(raw) {
            Some(r) if rc == 0 => r,
            _ => return Err(cm_err("rdma_create_id", NO_UCM)),
        };
        Ok(CmId(Arc::new(Id {
            raw,
            _chan: self.0.clone(),
        })))
    }

    /// The next event, waiting until `deadline` at most (then a timeout naming `what`).
    pub fn next(&self, deadline: Instant, what: &str) -> Result<CmEvent, VerbsError> {
        let t0 = Instant::now();
        loop {
            let mut ev: *mut rdma_cm_event = std::ptr::null_mut();
            // SAFETY: valid channel (non-blocking); `ev` receives an event to acknowledge.
            let rc = unsafe { rdma_get_cm_event(self.0.raw.as_ptr(), &mut ev) };
            if rc == 0 && !ev.is_null() {
                return Ok(self.take(ev));
            }
            let e = errno();
            if e.raw_os_error() != Some(libc::EAGAIN) && e.raw_os_error() != Some(libc::EINTR) {
                return Err(VerbsError::verb("rdma_get_cm_event", CM, e, ""));
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(VerbsError::Timeout {
                    device: CM.into(),
                    waited: now - t0,
                    what: what.into(),
                });
            }
            let ms = (deadline - now).as_millis().clamp(1, 1000) as i32;
            let mut p = libc::pollfd {
                // SAFETY: the channel is valid for self's life.
                fd: unsafe { self.0.raw.as_ref().fd },
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: one valid pollfd.
            unsafe { libc::poll(&mut p, 1, ms) };
        }
    }

    /// Copy what is needed out of `ev` and acknowledge it.
    fn take(&self, ev: *mut rdma_cm_event) -> CmEvent {
        // SAFETY: `ev` is a valid event until acknowledged below; its ids are valid ids.
        let e = unsafe { &*ev };
        use rdma_cm_event_type as t;
        let kind = match e.event {
            t::RDMA_CM_EVENT_ADDR_RESOLVED => CmEventKind::AddrResolved,
            t::RDMA_CM_EVENT_ROUTE_RESOLVED => CmEventKind::RouteResolved,
            t::RDMA_CM_EVENT_CONNECT_REQUEST => CmEventKind::ConnectRequest,
            t::RDMA_CM_EVENT_ESTABLISHED => CmEventKind::Established,
            t::RDMA_CM_EVENT_REJECTED => CmEventKind::Rejected,
            t::RDMA_CM_EVENT_UNREACHABLE => CmEventKind::Unreachable,
            t::RDMA_CM_EVENT_CONNECT_ERROR => CmEventKind::ConnectError,
            t::RDMA_CM_EVENT_ADDR_ERROR => CmEventKind::AddrError,
            t::RDMA_CM_EVENT_ROUTE_ERROR => CmEventKind::RouteError,
            t::RDMA_CM_EVENT_DISCONNECTED => CmEventKind::Disconnected,
            other => {
                // SAFETY: rdma_event_str returns a static string for any value.
                let s = unsafe { std::ffi::CStr::from_ptr(rdma_event_str(other)) };
                CmEventKind::Other(s.to_string_lossy().into_owned())
            }
        };
        let request = kind == CmEventKind::ConnectRequest;
        // For a request the event's id is the new connection's; the listener is listen_id.
        let about = if request { e.listen_id } else { e.id };
        // SAFETY: a valid id of this channel; its context is the token we stored.
        let token = unsafe { (*about).context } as usize as u64;
        let private_data = match kind {
            CmEventKind::ConnectRequest | CmEventKind::Established | CmEventKind::Rejected => {
                // SAFETY: for connection events the param is the connection's; the data pointer is
                // valid for its length until the event is acknowledged.
                let (p, n) = unsafe { (e.param.conn.private_data, e.param.conn.private_data_len) };
                if p.is_null() {
                    Vec::new()
                } else {
                    // SAFETY: as above.
                    unsafe { std::slice::from_raw_parts(p.cast::<u8>(), n as usize) }.to_vec()
                }
            }
            _ => Vec::new(),
        };
        let new_id = if request {
            NonNull::new(e.id).map(|raw| {
                // SAFETY: the new id belongs to us from this event on; its context starts at 0.
                unsafe { (*raw.as_ptr()).context = std::ptr::null_mut() };
                CmId(Arc::new(Id {
                    raw,
                    _chan: self.0.clone(),
                }))
            })
        } else {
            None
        };
        let status = e.status;
        // SAFETY: acknowledged once; nothing of it is used after this.
        unsafe { rdma_ack_cm_event(ev) };
        CmEvent {
            kind,
            token,
            status,
            private_data,
            new_id,
        }
    }
}

impl CmId {
    fn raw(&self) -> *mut rdma_cm_id {
        self.0.raw.as_ptr()
    }

    /// For the queue pair's destruction through its id.
    pub(super) fn raw_id(&self) -> *mut rdma_cm_id {
        self.raw()
    }

    /// This id's token (its user context).
    pub fn token(&self) -> u64 {
        // SAFETY: valid id; the context is an integer we stored.
        unsafe { (*self.raw()).context as usize as u64 }
    }

    /// Give a connection id taken from a request its own token.
    pub fn set_token(&self, token: u64) {
        // SAFETY: the context field belongs to the user; no event of this id is being read
        // concurrently (one thread reads the channel).
        unsafe { (*self.raw()).context = token as usize as *mut libc::c_void };
    }

    fn check(&self, rc: i32, verb: &'static str, hint: &'static str) -> Result<(), VerbsError> {
        if rc == 0 {
            Ok(())
        } else {
            Err(cm_err(verb, hint))
        }
    }

    /// Bind to `addr` (port 0: any free port), which also picks the RDMA device owning that IP.
    pub fn bind(&self, addr: SocketAddrV4) -> Result<(), VerbsError> {
        let mut s = sockaddr_in(addr);
        // SAFETY: valid id and a sockaddr_in the call reads.
        let rc = unsafe { rdma_bind_addr(self.raw(), (&mut s as *mut libc::sockaddr_in).cast()) };
        self.check(
            rc,
            "rdma_bind_addr",
            " (is that IP address on a network device with an RDMA device? see meshrun devices)",
        )
    }

    pub fn listen(&self, backlog: i32) -> Result<(), VerbsError> {
        // SAFETY: valid, bound id.
        let rc = unsafe { rdma_listen(self.raw(), backlog) };
        self.check(rc, "rdma_listen", "")
    }

    /// The local port (after bind or resolve).
    pub fn local_port(&self) -> u16 {
        // SAFETY: valid id.
        u16::from_be(unsafe { rdma_get_src_port(self.raw()) })
    }

    /// Start resolving `dst` from `src` (an ADDR_RESOLVED or ADDR_ERROR event follows).
    pub fn resolve_addr(&self, src: Ipv4Addr, dst: SocketAddrV4, timeout_ms: i32) -> Result<(), VerbsError> {
        let mut s = sockaddr_in(SocketAddrV4::new(src, 0));
        let mut d = sockaddr_in(dst);
        // SAFETY: valid id and two sockaddr_in the call reads.
        let rc = unsafe {
            rdma_resolve_addr(
                self.raw(),
                (&mut s as *mut libc::sockaddr_in).cast(),
                (&mut d as *mut libc::sockaddr_in).cast(),
                timeout_ms,
            )
        };
        self.check(rc, "rdma_resolve_addr", "")
    }

    /// Start resolving the route (a ROUTE_RESOLVED or ROUTE_ERROR event follows).
    pub fn resolve_route(&self, timeout_ms: i32) -> Result<(), VerbsError> {
        // SAFETY: valid id whose address is resolved.
        let rc = unsafe { rdma_resolve_route(self.raw(), timeout_ms) };
        self.check(rc, "rdma_resolve_route", "")
    }

    /// The type of service (RoCE: the traffic class, the IP DSCP/ECN byte) of this id's
    /// connection; set before resolving the route.
    pub fn set_tos(&self, tos: u8) -> Result<(), VerbsError> {
        let mut v = tos;
        // SAFETY: valid id; the option is one byte the call reads.
        let rc = unsafe {
            rdma_set_option(
                self.raw(),
                RDMA_OPTION_ID,
                RDMA_OPTION_ID_TOS,
                (&mut v as *mut u8).cast(),
                1,
            )
        };
        self.check(rc, "rdma_set_option(RDMA_OPTION_ID_TOS)", "")
    }

    /// The local ACK timeout (4.096 us x 2^`t`) of the queue pair this id will connect, as the
    /// queue pairs connected by hand use (14: about half a second to a dead peer's error). An
    /// older kernel without the option keeps the path's default; that is not an error.
    pub fn set_ack_timeout(&self, t: u8) {
        let mut v = t;
        // SAFETY: valid id; the option is one byte the call reads.
        unsafe {
            rdma_set_option(
                self.raw(),
                RDMA_OPTION_ID,
                RDMA_OPTION_ID_ACK_TIMEOUT,
                (&mut v as *mut u8).cast(),
                1,
            )
        };
    }

    /// The device this id is bound or resolved to, as a [`Context`] that keeps the id (and so
    /// librdmacm's device context) alive.
    pub fn context(&self) -> Result<Context, VerbsError> {
        // SAFETY: valid id; verbs is set once it is bound to or resolved on a device.
        let raw = NonNull::new(unsafe { (*self.raw()).verbs }).ok_or_else(|| {
            VerbsError::verb(
                "rdma_cm (no device for this address)",
                CM,
                std::io::Error::from_raw_os_error(libc::ENODEV),
                " (is the IP address on a network device with an RDMA device?)",
            )
        })?;
        Ok(Context::borrowed(raw, self.clone()))
    }

    /// A reliable-connected queue pair on this id (in INIT, receives may be posted), on `pd` (of
    /// this id's device) with both completion queues `cq`; the connection manager moves it to RTS
    /// when the connection is established.
    pub fn create_qp(
        &self,
        pd: &ProtectionDomain,
        cq: &CompletionQueue,
        depth: u32,
        max_inline: u32,
        signal_all: bool,
    ) -> Result<QueuePair<Init>, VerbsError> {
        let make = |inline: u32| {
            let mut init = super::qp::rc_init_attr(cq, cq, depth, inline, signal_all);
            // SAFETY: valid id, PD and CQ (the QP keeps Arcs to the PD and the id).
            let rc = unsafe { rdma_create_qp(self.raw(), pd.0.raw.as_ptr(), &mut init) };
            (rc, init.cap.max_inline_data)
        };
        let (mut rc, mut granted) = make(max_inline);
        if rc != 0 && max_inline > 0 {
            (rc, granted) = make(0);
        }
        self.check(rc, "rdma_create_qp", "")?;
        // SAFETY: rdma_create_qp succeeded, so the id's qp is set.
        let raw =
            NonNull::new(unsafe { (*self.raw()).qp }).ok_or_else(|| cm_err("rdma_create_qp (no queue pair)", ""))?;
        super::usage::qp_created();
        Ok(QueuePair::from_cm(raw, pd.0.clone(), granted, self.clone()))
    }

    fn conn_param(private: &[u8], p: ConnParams) -> rdma_conn_param {
        // SAFETY: plain data.
        let mut c: rdma_conn_param = unsafe { std::mem::zeroed() };
        c.private_data = private.as_ptr().cast();
        c.private_data_len = private.len().min(u8::MAX as usize) as u8;
        c.responder_resources = p.rd_atomic;
        c.initiator_depth = p.rd_atomic;
        // As the queue pairs connected by hand: 6 transport retries (7 is "forever" to some
        // providers), 7 RNR retries.
        c.retry_count = 6;
        c.rnr_retry_count = 7;
        c
    }

    /// Connect (after ROUTE_RESOLVED, with a queue pair made on this id), carrying `private` to
    /// the listener; ESTABLISHED, REJECTED or UNREACHABLE follows.
    pub fn connect(&self, private: &[u8], p: ConnParams) -> Result<(), VerbsError> {
        let mut c = Self::conn_param(private, p);
        // SAFETY: valid id with a queue pair; the private data outlives the call (copied by it).
        let rc = unsafe { rdma_connect(self.raw(), &mut c) };
        self.check(rc, "rdma_connect", "")
    }

    /// Accept a connection request on this (new) id, carrying `private` back.
    pub fn accept(&self, private: &[u8], p: ConnParams) -> Result<(), VerbsError> {
        let mut c = Self::conn_param(private, p);
        // SAFETY: valid id from a request, with a queue pair; the data is copied by the call.
        let rc = unsafe { rdma_accept(self.raw(), &mut c) };
        self.check(rc, "rdma_accept", "")
    }

    /// Refuse a connection request (a stranger's, or one this job did not expect).
    pub fn reject(&self) -> Result<(), VerbsError> {
        // SAFETY: valid id from a request; no private data.
        let rc = unsafe { rdma_reject(self.raw(), std::ptr::null(), 0) };
        self.check(rc, "rdma_reject", "")
    }
}

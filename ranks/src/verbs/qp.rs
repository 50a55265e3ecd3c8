//! Reliable-connected queue pairs, their states as types, and the endpoint a peer connects to.

use std::marker::PhantomData;
use std::ptr::NonNull;
use std::sync::Arc;

use rdma_sys::*;

use super::*;

impl ProtectionDomain {
    /// A reliable-connected queue pair, in the RESET state, with room for `max_inline` bytes of
    /// inline data per work request (perftest's latency tests use 220); a device that cannot give
    /// that much gets a queue pair without inline data.
    pub fn create_rc_qp(
        &self,
        send_cq: &CompletionQueue,
        recv_cq: &CompletionQueue,
        depth: u32,
        max_inline: u32,
    ) -> Result<QueuePair<Reset>, VerbsError> {
        self.create_rc_qp_signalling(send_cq, recv_cq, depth, max_inline, true)
    }

    /// As [`Self::create_rc_qp`], but only work requests posted with `signaled` (see
    /// [`QueuePair::post_flagged`]) produce a completion when `signal_all` is false: CQ moderation,
    /// as perftest's bandwidth tests signal one request in 100.
    pub fn create_rc_qp_signalling(
        &self,
        send_cq: &CompletionQueue,
        recv_cq: &CompletionQueue,
        depth: u32,
        max_inline: u32,
        signal_all: bool,
    ) -> Result<QueuePair<Reset>, VerbsError> {
        // One try with the inline data asked for, and one without where the device refuses it.
        let create = |max_inline: u32| -> Result<QueuePair<Reset>, VerbsError> {
            let mut init = rc_init_attr(send_cq, recv_cq, depth, max_inline, signal_all);
            // SAFETY: valid PD and CQs (borrowed for the call; the QP keeps Arcs to them below).
            let raw = unsafe { ibv_create_qp(self.0.raw.as_ptr(), &mut init) };
            let raw = NonNull::new(raw).ok_or_else(|| VerbsError::verb("ibv_create_qp", self.device(), errno(), ""))?;
            super::usage::qp_created();
            Ok(QueuePair {
                raw,
                pd: self.0.clone(),
                // The device may grant more than asked (written back into `init.cap`).
                max_inline: init.cap.max_inline_data,
                cm: None,
                _state: PhantomData,
            })
        };
        match create(max_inline) {
            Err(_) if max_inline > 0 => create(0),
            r => r,
        }
    }
}

/// The creation attributes of an RC queue pair, as both ibv_create_qp and rdma_create_qp take
/// them: one send and one receive scatter entry, `depth` work requests each way, `max_inline`
/// bytes inline, every send signalled when `signal_all`.
pub(super) fn rc_init_attr(
    send_cq: &CompletionQueue,
    recv_cq: &CompletionQueue,
    depth: u32,
    max_inline: u32,
    signal_all: bool,
) -> ibv_qp_init_attr {
    // SAFETY: plain data.
    let mut init: ibv_qp_init_attr = unsafe { std::mem::zeroed() };
    init.send_cq = send_cq.raw.as_ptr();
    init.recv_cq = recv_cq.raw.as_ptr();
    init.qp_type = ibv_qp_type::IBV_QPT_RC;
    init.cap.max_send_wr = depth;
    init.cap.max_recv_wr = depth;
    init.cap.max_send_sge = 1;
    init.cap.max_recv_sge = 1;
    init.cap.max_inline_data = max_inline;
    init.sq_sig_all = i32::from(signal_all);
    init
}

impl QueuePair<Init> {
    /// A queue pair rdma_create_qp made on `id` (which moved it to INIT).
    pub(super) fn from_cm(raw: NonNull<ibv_qp>, pd: Arc<Pd>, max_inline: u32, id: CmId) -> QueuePair<Init> {
        QueuePair {
            raw,
            pd,
            max_inline,
            cm: Some(id),
            _state: PhantomData,
        }
    }

    /// The connection manager's id this queue pair was made on (None: connected by hand).
    pub fn cm_id(&self) -> Option<&CmId> {
        self.cm.as_ref()
    }

    /// RTS, as the connection manager left it once the connection was established (an
    /// ESTABLISHED event for this queue pair's id); refused for a queue pair connected by hand.
    pub fn established(self) -> Result<QueuePair<Rts>, VerbsError> {
        if self.cm.is_none() {
            return Err(VerbsError::verb(
                "established",
                self.device(),
                std::io::Error::from_raw_os_error(libc::EINVAL),
                " (this queue pair was not made by the connection manager)",
            ));
        }
        Ok(self.retype())
    }
}

/// Queue pair states, as types.
pub struct Reset;
pub struct Init;
pub struct Rtr;
pub struct Rts;

/// States in which receives may be posted (INIT and later).
pub trait CanRecv {}
impl CanRecv for Init {}
impl CanRecv for Rtr {}
impl CanRecv for Rts {}

/// What the other side of a connection sends us to connect to it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QpEndpoint {
    pub qpn: u32,
    pub psn: u32,
    pub lid: u16,
    pub gid: [u8; 16],
    /// Active MTU enum (IBV_MTU_*).
    pub mtu: u32,
    pub addr: u64,
    pub rkey: u32,
}

/// A reliable-connected queue pair in state `S`.
pub struct QueuePair<S> {
    raw: NonNull<ibv_qp>,
    pd: Arc<Pd>,
    /// Sends and writes up to this many bytes are posted inline (copied into the work request).
    max_inline: u32,
    /// For a queue pair made on a connection-manager id: that id, destroyed after the queue pair.
    cm: Option<CmId>,
    _state: PhantomData<S>,
}

// SAFETY: posting to a QP is thread-safe in libibverbs; the pointer is never exposed.
unsafe impl<S> Send for QueuePair<S> {}

impl<S> Drop for QueuePair<S> {
    fn drop(&mut self) {
        super::usage::qp_destroyed();
        match &self.cm {
            // SAFETY: made by rdma_create_qp on this id and destroyed once, through the id (which
            // forgets it); the id itself is destroyed after this, when the field drops.
            Some(id) => unsafe { rdma_destroy_qp(id.raw_id()) },
            // SAFETY: created by us and destroyed once (a state change moves ownership without dropping).
            None => unsafe {
                ibv_destroy_qp(self.raw.as_ptr());
            },
        }
    }
}

impl<S> QueuePair<S> {
    pub fn qpn(&self) -> u32 {
        // SAFETY: valid QP for its life.
        unsafe { self.raw.as_ref().qp_num }
    }

    /// Bytes a send or write may carry inline.
    pub fn max_inline(&self) -> u32 {
        self.max_inline
    }

    fn device(&self) -> String {
        self.pd.ctx.name.clone()
    }

    /// A verb that returns an errno (as a positive or negative number) instead of setting it.
    fn check_rc(&self, rc: i32, verb: &'static str, hint: &'static str) -> Result<(), VerbsError> {
        if rc == 0 {
            return Ok(());
        }
        Err(VerbsError::verb(
            verb,
            self.device(),
            std::io::Error::from_raw_os_error(rc.abs()),
            hint,
        ))
    }

    fn modify<T>(
        self,
        attr: &mut ibv_qp_attr,
        mask: ibv_qp_attr_mask,
        verb: &'static str,
        hint: &'static str,
    ) -> Result<QueuePair<T>, VerbsError> {
        // SAFETY: valid QP and attribute struct; the mask names only fields we set.
        let rc = unsafe { ibv_modify_qp(self.raw.as_ptr(), attr, mask.0 as i32) };
        self.check_rc(rc, verb, hint)?;
        Ok(self.retype())
    }

    /// The same queue pair as another state's type.
    fn retype<T>(self) -> QueuePair<T> {
        let me = std::mem::ManuallyDrop::new(self);
        // SAFETY: `me` is not dropped; its fields move into the new state's value exactly once.
        let (pd, cm) = unsafe { (std::ptr::read(&me.pd), std::ptr::read(&me.cm)) };
        QueuePair {
            raw: me.raw,
            pd,
            max_inline: me.max_inline,
            cm,
            _state: PhantomData,
        }
    }

    /// Post a receive of `len` bytes at `offset` of `mr`.
    pub fn post_recv(&self, mr: &dyn Registered, offset: usize, len: usize, wr_id: u64) -> Result<(), VerbsError>
    where
        S: CanRecv,
    {
        let mut sge = sge(mr, offset, len);
        // SAFETY: plain data.
        let mut wr: ibv_recv_wr = unsafe { std::mem::zeroed() };
        wr.wr_id = wr_id;
        wr.sg_list = &mut sge;
        wr.num_sge = 1;
        let mut bad = std::ptr::null_mut();
        // SAFETY: valid QP; the SGE points into a registered region that the caller keeps alive
        // until the completion is polled (regions are owned by the transport alongside the QP).
        let rc = unsafe { ibv_post_recv(self.raw.as_ptr(), &mut wr, &mut bad) };
        super::calls::received();
        self.check_rc(rc, "ibv_post_recv", " (receive queue full?)")
    }
}

impl QueuePair<Reset> {
    /// RESET -> INIT, granting remote peers `access` to this QP's memory.
    pub fn into_init(self, port: u8, access: Access) -> Result<QueuePair<Init>, VerbsError> {
        // SAFETY: plain data.
        let mut a: ibv_qp_attr = unsafe { std::mem::zeroed() };
        a.qp_state = ibv_qp_state::IBV_QPS_INIT;
        a.pkey_index = 0;
        a.port_num = port;
        a.qp_access_flags = access.flags() as u32;
        let mask = ibv_qp_attr_mask::IBV_QP_STATE
            | ibv_qp_attr_mask::IBV_QP_PKEY_INDEX
            | ibv_qp_attr_mask::IBV_QP_PORT
            | ibv_qp_attr_mask::IBV_QP_ACCESS_FLAGS;
        self.modify(
            &mut a,
            mask,
            "ibv_modify_qp(INIT)",
            " (does the port exist? see meshrun devices)",
        )
    }
}

/// The service level and traffic class a queue pair's packets carry: on InfiniBand the SL picks
/// the virtual lane; on RoCE v2 the traffic class is the IP header's DSCP/ECN byte (DSCP 26 is
/// traffic class 104), which is how a switch puts the traffic in its lossless (PFC) class. What
/// `--sl`/`--tclass` (or NCCL_IB_SL/NCCL_IB_TC) ask for; 0 and 0 by default, as perftest.
/// The flow label (RoCE and IB with a GRH) is 0 unless a test sets it: a RoCE v2 NIC (mlx5, rxe)
/// derives the UDP source port, and so the path ECMP hashes it onto, from a nonzero label
/// (0xC000 | (label & 0x3FFF) ^ (label >> 14)), and from the two queue pair numbers otherwise.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Qos {
    pub sl: u8,
    pub traffic_class: u8,
    pub flow_label: u32,
}

impl QueuePair<Init> {
    /// INIT -> RTR: connect to `remote`. `gid_index` Some for RoCE (a GRH is needed, and carries
    /// the traffic class), None for IB.
    pub fn into_rtr(
        self,
        remote: &QpEndpoint,
        port: u8,
        path_mtu: u32,
        gid_index: Option<u8>,
        qos: Qos,
    ) -> Result<QueuePair<Rtr>, VerbsError> {
        // SAFETY: plain data.
        let mut a: ibv_qp_attr = unsafe { std::mem::zeroed() };
        a.qp_state = ibv_qp_state::IBV_QPS_RTR;
        a.path_mtu = path_mtu;
        a.dest_qp_num = remote.qpn;
        a.rq_psn = remote.psn;
        a.max_dest_rd_atomic = 16;
        a.min_rnr_timer = 12;
        a.ah_attr.dlid = remote.lid;
        a.ah_attr.sl = qos.sl;
        a.ah_attr.port_num = port;
        if let Some(gi) = gid_index {
            a.ah_attr.is_global = 1;
            a.ah_attr.grh.dgid.raw = remote.gid;
            a.ah_attr.grh.sgid_index = gi;
            a.ah_attr.grh.hop_limit = 64;
            a.ah_attr.grh.traffic_class = qos.traffic_class;
            a.ah_attr.grh.flow_label = qos.flow_label & 0x000f_ffff;
        }
        let mask = ibv_qp_attr_mask::IBV_QP_STATE
            | ibv_qp_attr_mask::IBV_QP_AV
            | ibv_qp_attr_mask::IBV_QP_PATH_MTU
            | ibv_qp_attr_mask::IBV_QP_DEST_QPN
            | ibv_qp_attr_mask::IBV_QP_RQ_PSN
            | ibv_qp_attr_mask::IBV_QP_MAX_DEST_RD_ATOMIC
            | ibv_qp_attr_mask::IBV_QP_MIN_RNR_TIMER;
        self.modify(&mut a, mask, "ibv_modify_qp(RTR)", " (is the remote GID reachable from this GID index? for RoCE pass -x N with a routable GID; see meshrun devices)")
    }
}

impl QueuePair<Rtr> {
    /// RTR -> RTS. A dead peer surfaces as a retry-exceeded completion after about
    /// 7 x 4.096 us x 2^14 = 0.5 s, never as a hang. (A retry count of 7 means "forever" to some
    /// providers, rxe among them, so it is 6; the RNR retry count stays 7, as a live peer that is
    /// late to post a receive is not an error.)
    pub fn into_rts(self, psn: u32) -> Result<QueuePair<Rts>, VerbsError> {
        // SAFETY: plain data.
        let mut a: ibv_qp_attr = unsafe { std::mem::zeroed() };
        a.qp_state = ibv_qp_state::IBV_QPS_RTS;
        a.timeout = 14;
        a.retry_cnt = 6;
        a.rnr_retry = 7;
        a.sq_psn = psn;
        a.max_rd_atomic = 16;
        let mask = ibv_qp_attr_mask::IBV_QP_STATE
            | ibv_qp_attr_mask::IBV_QP_TIMEOUT
            | ibv_qp_attr_mask::IBV_QP_RETRY_CNT
            | ibv_qp_attr_mask::IBV_QP_RNR_RETRY
            | ibv_qp_attr_mask::IBV_QP_SQ_PSN
            | ibv_qp_attr_mask::IBV_QP_MAX_QP_RD_ATOMIC;
        self.modify(&mut a, mask, "ibv_modify_qp(RTS)", "")
    }
}

/// What a send-side work request does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SendOp {
    Send,
    SendImm(u32),
    Write { remote_addr: u64, rkey: u32 },
    WriteImm { remote_addr: u64, rkey: u32, imm: u32 },
    Read { remote_addr: u64, rkey: u32 },
}

impl QueuePair<Rts> {
    /// Post one work request on `len` bytes at `offset` of `mr`, signalled.
    pub fn post(
        &self,
        op: SendOp,
        mr: &dyn Registered,
        offset: usize,
        len: usize,
        wr_id: u64,
    ) -> Result<(), VerbsError> {
        self.post_flagged(op, mr, offset, len, wr_id, true)
    }

    /// Post one work request; on a queue pair created without `signal_all`, only a `signaled` one
    /// produces a completion, and that completion also retires the unsignalled ones before it.
    pub fn post_flagged(
        &self,
        op: SendOp,
        mr: &dyn Registered,
        offset: usize,
        len: usize,
        wr_id: u64,
        signaled: bool,
    ) -> Result<(), VerbsError> {
        let mut sge = sge(mr, offset, len);
        // SAFETY: plain data.
        let mut wr: ibv_send_wr = unsafe { std::mem::zeroed() };
        wr.wr_id = wr_id;
        // A zero-byte request has no scatter/gather entry: some NICs read an entry of length 0
        // as 2 GiB.
        if len > 0 {
            wr.sg_list = &mut sge;
            wr.num_sge = 1;
        }
        wr.send_flags = if signaled {
            ibv_send_flags::IBV_SEND_SIGNALED.0
        } else {
            0
        };
        // Small sends and writes go inline: the NIC takes the bytes from the work request and
        // skips a DMA read of the buffer (reads cannot be inline).
        // GPU memory is never inline: the CPU cannot read it.
        if len > 0
            && len as u64 <= u64::from(self.max_inline)
            && mr.host_visible()
            && !matches!(op, SendOp::Read { .. })
        {
            wr.send_flags |= ibv_send_flags::IBV_SEND_INLINE.0;
        }
        let (opcode, rdma, imm) = match op {
            SendOp::Send => (ibv_wr_opcode::IBV_WR_SEND, None, None),
            SendOp::SendImm(i) => (ibv_wr_opcode::IBV_WR_SEND_WITH_IMM, None, Some(i)),
            SendOp::Write { remote_addr, rkey } => (ibv_wr_opcode::IBV_WR_RDMA_WRITE, Some((remote_addr, rkey)), None),
            SendOp::WriteImm { remote_addr, rkey, imm } => (
                ibv_wr_opcode::IBV_WR_RDMA_WRITE_WITH_IMM,
                Some((remote_addr, rkey)),
                Some(imm),
            ),
            SendOp::Read { remote_addr, rkey } => (ibv_wr_opcode::IBV_WR_RDMA_READ, Some((remote_addr, rkey)), None),
        };
        wr.opcode = opcode;
        if let Some(i) = imm {
            wr.imm_data_invalidated_rkey_union.imm_data = i.to_be();
        }
        if let Some((remote_addr, rkey)) = rdma {
            wr.wr.rdma.remote_addr = remote_addr;
            wr.wr.rdma.rkey = rkey;
        }
        let mut bad = std::ptr::null_mut();
        // SAFETY: valid QP in RTS; the SGE points into a registered region kept alive by the
        // caller until the completion is polled.
        let rc = unsafe { ibv_post_send(self.raw.as_ptr(), &mut wr, &mut bad) };
        super::calls::sent(signaled, wr.send_flags & ibv_send_flags::IBV_SEND_INLINE.0 != 0);
        self.check_rc(rc, "ibv_post_send", " (send queue full?)")
    }
}

/// The scatter/gather entry of `len` bytes at `offset` of `mr` (a programming error, not a user's,
/// when outside it).
fn sge(mr: &dyn Registered, offset: usize, len: usize) -> ibv_sge {
    assert!(
        offset + len <= mr.region_len(),
        "work request outside the memory region"
    );
    ibv_sge {
        addr: mr.addr() + offset as u64,
        length: len as u32,
        lkey: mr.lkey(),
    }
}

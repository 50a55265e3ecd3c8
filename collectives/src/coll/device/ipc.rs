//! A device run's hops between ranks of one node, by CUDA IPC ([`crate::gpu::peer`]), as NCCL's
//! peer-to-peer transport moves them: the sender copies straight into the receiver's device
//! buffer, with no host memory and no network in between. The ranks keep the ring's order with
//! two small messages over the mesh per hop: the receiver's [`Ready`] (its buffer's handle and
//! where the bytes go: it is done with that memory) and the sender's [`Done`] (the copy finished,
//! the bytes are there). A hop therefore ends, on both ranks, within the transfer call that
//! holds it, as a staged one does, and the algorithms over [`super::DeviceRun::transfer`] run
//! unchanged.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use ranks::{Op, Transport, TransportError};

use super::Xfer;
use crate::coll::CollError;
use crate::gpu::peer::{Control, Done, PeerHandle, Ready};
use crate::gpu::{At, BufId, Gpu, GpuError};

/// Which peers a rank reaches by IPC (`--p2p ipc`: the other ranks of its node), by rank.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct IpcPeers {
    ipc: Vec<bool>,
    /// Whether the job took IPC within nodes (every rank the same, even one alone on its node).
    in_job: bool,
}

impl IpcPeers {
    /// No peer: every hop goes over the network.
    pub fn none() -> IpcPeers {
        IpcPeers::default()
    }

    /// The ranks other than `rank` on its node; `node_of` holds every rank's node.
    pub fn same_node(node_of: &[usize], rank: usize) -> IpcPeers {
        let mine = node_of.get(rank).copied();
        IpcPeers {
            ipc: node_of
                .iter()
                .enumerate()
                .map(|(r, n)| r != rank && Some(*n) == mine)
                .collect(),
            in_job: true,
        }
    }

    /// Whether hops with `peer` go by IPC.
    pub fn reaches(&self, peer: usize) -> bool {
        self.ipc.get(peer).copied().unwrap_or(false)
    }

    /// Whether any hop does.
    pub fn any(&self) -> bool {
        self.ipc.iter().any(|&b| b)
    }

    /// Whether the job took IPC within nodes: the same on every rank, so steps every rank takes
    /// together (a barrier) follow it, not [`IpcPeers::any`].
    pub fn in_job(&self) -> bool {
        self.in_job
    }
}

/// One run's IPC state: the buffers it exported, each with its serial, and the peers' buffers it
/// opened, by (peer, serial); the opened ones are closed by [`IpcHops::release`].
#[derive(Default)]
pub(super) struct IpcHops {
    pub(super) peers: IpcPeers,
    exported: Vec<(BufId, u64, PeerHandle)>,
    opened: HashMap<(usize, u64), BufId>,
    /// Control messages read ahead of the hop that needs them, by peer, in arrival order.
    inbox: HashMap<usize, VecDeque<Control>>,
}

/// Export serials, unique in this process across runs, so no peer's cache of opened buffers can
/// take a new export for an old one.
static NEXT_SERIAL: AtomicU64 = AtomicU64::new(1);

/// A schedule or wire fault between two ranks: named by both, one line.
fn disagree(t: &dyn Transport, peer: usize, what: String) -> CollError {
    let (r, p) = (t.rank(), peer);
    CollError::Transport(TransportError::Setup(format!(
        "rank {r} ({}): GPU peer-to-peer hop with rank {p} ({}): {what}; are both ranks running the same command?",
        t.host_of(r),
        t.host_of(p)
    )))
}

impl IpcHops {
    pub(super) fn new(peers: IpcPeers) -> IpcHops {
        IpcHops {
            peers,
            ..IpcHops::default()
        }
    }

    /// This run's export of `buf` (made once per buffer).
    fn export(&mut self, gpu: &mut dyn Gpu, buf: BufId) -> Result<(u64, PeerHandle), GpuError> {
        if let Some((_, serial, h)) = self.exported.iter().find(|(b, ..)| *b == buf) {
            return Ok((*serial, *h));
        }
        let h = gpu.export_peer(buf)?;
        let serial = NEXT_SERIAL.fetch_add(1, Ordering::Relaxed);
        self.exported.push((buf, serial, h));
        Ok((serial, h))
    }

    /// `peer`'s buffer that `r` names, opened once per run.
    fn open(&mut self, gpu: &mut dyn Gpu, t: &dyn Transport, peer: usize, r: &Ready) -> Result<BufId, GpuError> {
        if let Some(&b) = self.opened.get(&(peer, r.serial)) {
            return Ok(b);
        }
        let b = gpu.open_peer(&r.peer).map_err(|mut e| {
            if let GpuError::Call { error, .. } = &mut e {
                error.push_str(&format!(" (a device buffer of rank {peer} on {})", t.host_of(peer)));
            }
            e
        })?;
        self.opened.insert((peer, r.serial), b);
        Ok(b)
    }

    /// `buf` is about to be freed: a later buffer is exported afresh, under a new serial.
    pub(super) fn forget(&mut self, buf: BufId) {
        self.exported.retain(|(b, ..)| *b != buf);
    }

    /// Close every peer's buffer this run opened.
    pub(super) fn release(&mut self, gpu: &mut dyn Gpu) {
        for (_, b) in self.opened.drain() {
            gpu.free(b);
        }
        self.exported.clear();
        self.inbox.clear();
    }

    /// Move `xs` (all with peers this rank reaches by IPC). Every receive first says where its
    /// bytes go (sent at once, not waited on by anyone); then each send, in order, waits for
    /// its receiver's ready, copies and says done; then each receive waits for its done. A
    /// sender's copy needs only the receiver to have reached the transfer of that hop, as a
    /// network send of that size would, so the algorithms' order holds; and since both ends see
    /// their hops in one order per pair, a peer that batches hops differently still matches.
    pub(super) fn transfer(
        &mut self,
        gpu: &mut dyn Gpu,
        t: &mut dyn Transport,
        xs: &[Xfer],
        deadline: Instant,
    ) -> Result<(), CollError> {
        let mut readies = Vec::new();
        for x in xs {
            if let Xfer::Recv { peer, into, len } = *x {
                let (serial, handle) = self.export(gpu, into.buf)?;
                let (at, len) = (into.off as u64, len as u64);
                let r = Ready {
                    peer: handle,
                    serial,
                    at,
                    len,
                };
                readies.push((peer, Control::Ready(r).encode()));
            }
        }
        let mut ops: Vec<Op<'_>> = readies.iter().map(|(p, b)| Op::send(*p, b)).collect();
        t.exchange(&mut ops, deadline)?;
        for x in xs {
            if let Xfer::Send { peer, from, len } = *x {
                let Control::Ready(r) = self.next(t, peer, Kind::Ready, deadline)? else {
                    unreachable!("next returns the kind asked for")
                };
                if r.len != len as u64 {
                    let what = format!("it is ready for {} bytes where this rank sends {len}", r.len);
                    return Err(disagree(t, peer, what));
                }
                let theirs = self.open(gpu, t, peer, &r)?;
                gpu.copy(At::new(theirs, r.at as usize), from, len)?;
                let done = Control::Done(Done { bytes: len as u64 }).encode();
                t.exchange(&mut [Op::send(peer, &done)], deadline)?;
            }
        }
        for x in xs {
            if let Xfer::Recv { peer, len, .. } = *x {
                let Control::Done(d) = self.next(t, peer, Kind::Done, deadline)? else {
                    unreachable!("next returns the kind asked for")
                };
                if d.bytes != len as u64 {
                    return Err(disagree(
                        t,
                        peer,
                        format!("it copied {} bytes where {len} were due", d.bytes),
                    ));
                }
            }
        }
        Ok(())
    }

    /// The next control message of `kind` from `peer`: one kept from an earlier read, else read
    /// from the mesh, keeping those of the other kind for the hops that need them.
    fn next(
        &mut self,
        t: &mut dyn Transport,
        peer: usize,
        kind: Kind,
        deadline: Instant,
    ) -> Result<Control, CollError> {
        let kept = self.inbox.entry(peer).or_default();
        if let Some(i) = kept.iter().position(|c| Kind::of(c) == kind) {
            return Ok(kept.remove(i).expect("a position found above"));
        }
        loop {
            let mut b = [0u8; Control::BYTES];
            t.exchange(&mut [Op::recv(peer, &mut b)], deadline)?;
            let c = Control::decode(&b).map_err(|e| disagree(t, peer, e.to_string()))?;
            if Kind::of(&c) == kind {
                return Ok(c);
            }
            self.inbox.entry(peer).or_default().push_back(c);
        }
    }
}

/// The two control messages of a hop: the receiver's ready, then the sender's done.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Ready,
    Done,
}

impl Kind {
    fn of(c: &Control) -> Kind {
        match c {
            Control::Ready(_) => Kind::Ready,
            Control::Done(_) => Kind::Done,
        }
    }
}

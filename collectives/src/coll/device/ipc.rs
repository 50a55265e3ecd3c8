//! A device run's hops between ranks of one node, by CUDA IPC ([`crate::gpu::peer`]), as NCCL's
//! peer-to-peer transport moves them: the sender copies straight into the receiver's device
//! buffer, with no host memory and no network in between. The ranks keep the ring's order with
//! two small messages over the mesh per hop: the receiver's [`Ready`] (its buffer's handle and
//! where the bytes go: it is done with that memory) and the sender's [`Done`] (the copy finished,
//! the bytes are there). A hop therefore ends, on both ranks, within the same transfer call as
//! a staged one, and the algorithms over [`super::DeviceRun::transfer`] run unchanged.

use std::collections::HashMap;
use std::time::Instant;

use ranks::{Op, Transport, TransportError};

use super::Xfer;
use crate::coll::CollError;
use crate::gpu::peer::{Done, PeerHandle, Ready};
use crate::gpu::{At, BufId, Gpu, GpuError};

/// Which peers a rank reaches by IPC (`--p2p ipc`: the other ranks of its node), by rank.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct IpcPeers {
    ipc: Vec<bool>,
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
}

/// One run's IPC state: the buffers it exported, each with its serial, and the peers' buffers it
/// opened, by (peer, serial); the opened ones are closed by [`IpcHops::release`].
#[derive(Default)]
pub(super) struct IpcHops {
    pub(super) peers: IpcPeers,
    exported: Vec<(BufId, u64, PeerHandle)>,
    next_serial: u64,
    opened: HashMap<(usize, u64), BufId>,
}

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
        self.next_serial += 1;
        self.exported.push((buf, self.next_serial, h));
        Ok((self.next_serial, h))
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
    }

    /// Move `xs` (all with peers this rank reaches by IPC): readies out, copies, dones back.
    pub(super) fn transfer(
        &mut self,
        gpu: &mut dyn Gpu,
        t: &mut dyn Transport,
        xs: &[Xfer],
        deadline: Instant,
    ) -> Result<(), CollError> {
        // Each receive says where its bytes go; each send hears where its bytes go.
        let mut ready_out = Vec::new();
        for x in xs {
            if let Xfer::Recv { into, len, .. } = *x {
                let (serial, peer) = self.export(gpu, into.buf)?;
                let (at, len) = (into.off as u64, len as u64);
                ready_out.push(Ready { peer, serial, at, len }.encode());
            }
        }
        let sends = xs.iter().filter(|x| matches!(x, Xfer::Send { .. })).count();
        let mut ready_in = vec![[0u8; Ready::BYTES]; sends];
        exchange(t, xs, Phase::Ready, &ready_out, &mut ready_in, deadline)?;
        // The copies, each complete when `copy` returns.
        let mut done_out = Vec::with_capacity(sends);
        let send_list = xs.iter().filter_map(|x| match *x {
            Xfer::Send { peer, from, len } => Some((peer, from, len)),
            Xfer::Recv { .. } => None,
        });
        for ((peer, from, len), bytes) in send_list.zip(&ready_in) {
            let r = Ready::decode(bytes).map_err(|e| disagree(t, peer, e.to_string()))?;
            if r.len != len as u64 {
                let what = format!("it is ready for {} bytes where this rank sends {len}", r.len);
                return Err(disagree(t, peer, what));
            }
            let theirs = self.open(gpu, t, peer, &r)?;
            gpu.copy(At::new(theirs, r.at as usize), from, len)?;
            done_out.push(Done { bytes: len as u64 }.encode());
        }
        // The receives wait for their senders' word.
        let recvs = xs.len() - sends;
        let mut done_in = vec![[0u8; Done::BYTES]; recvs];
        exchange(t, xs, Phase::Done, &done_out, &mut done_in, deadline)?;
        let recv_list = xs.iter().filter_map(|x| match *x {
            Xfer::Recv { peer, len, .. } => Some((peer, len)),
            Xfer::Send { .. } => None,
        });
        for ((peer, len), bytes) in recv_list.zip(&done_in) {
            let d = Done::decode(bytes).map_err(|e| disagree(t, peer, e.to_string()))?;
            if d.bytes != len as u64 {
                return Err(disagree(
                    t,
                    peer,
                    format!("it copied {} bytes where {len} were due", d.bytes),
                ));
            }
        }
        Ok(())
    }
}

/// The two control messages of a hop: the receiver's ready, then the sender's done.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Phase {
    Ready,
    Done,
}

/// One exchange of control records in `xs`' order, matched as the peers' are: in the ready
/// phase each receive sends a record of `out` and each send receives one into `inn`; in the
/// done phase the other way round.
fn exchange<O: AsRef<[u8]>, I: AsMut<[u8]>>(
    t: &mut dyn Transport,
    xs: &[Xfer],
    phase: Phase,
    out: &[O],
    inn: &mut [I],
    deadline: Instant,
) -> Result<(), CollError> {
    let mut out = out.iter();
    let mut inn = inn.iter_mut();
    let mut ops = Vec::with_capacity(xs.len());
    for x in xs {
        let (peer, receives) = match *x {
            Xfer::Send { peer, .. } => (peer, false),
            Xfer::Recv { peer, .. } => (peer, true),
        };
        if receives == (phase == Phase::Ready) {
            if let Some(o) = out.next() {
                ops.push(Op::send(peer, o.as_ref()));
            }
        } else if let Some(i) = inn.next() {
            ops.push(Op::recv(peer, i.as_mut()));
        }
    }
    t.exchange(&mut ops, deadline)?;
    Ok(())
}

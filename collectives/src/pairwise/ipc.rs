//! `pairwise --use-cuda` within a node: GPU-to-GPU copy bandwidth through the peer's mapped
//! buffer, as nvbandwidth measures a node's GPU links. Every rank exports one device buffer (its
//! inbox) and keeps one to copy from; for a direction `src -> dst` the receiver sends its
//! inbox's handle ([`Ready`]) over the mesh, the sender opens it once ([`Gpu::open_peer`]: CUDA
//! IPC, the stand-in's memfd mapping) and times its copies into it ([`Gpu::copy`], each
//! complete when it returns), a window at a time, saying after each window how many bytes it
//! copied ([`Done`]), so the receiver's every wait has the mesh's deadline, as a network test's
//! receives do (both directions at once, `-b`, say only the end: neither rank receives while it
//! copies). The last word carries [`END`]; the receiver then checks that its inbox holds the
//! sender's pattern. Pairs across nodes keep their network path.

use std::collections::HashMap;
use std::time::Instant;

use analysis::pairwise::formulas::{gbps, mpps, BwResult};
use analysis::pairwise::{Amount, HopPath};
use ranks::{Op, Transport, TransportError};

use super::measure::MeasureSpec;
use super::timed::{count_for, probe_len};
use crate::coll::device::IpcPeers;
use crate::gpu::peer::{Control, Done, PeerHandle, Ready};
use crate::gpu::{At, BufId, Gpu, GpuError};

/// A sender's last [`Done`] of a direction: its copies are over.
const END: u64 = u64::MAX;

/// Bytes of the inbox the receiver checks after a direction: its first bytes hold the pattern.
const CHECKED: usize = 64;

/// What failed in a pair over IPC.
#[derive(Debug, thiserror::Error)]
pub enum IpcPairError {
    #[error(transparent)]
    Transport(#[from] TransportError),
    #[error(transparent)]
    Gpu(#[from] GpuError),
    #[error("rank {rank} ({host}): GPU peer-to-peer test with rank {peer} ({peer_host}): {what}")]
    Disagree {
        rank: usize,
        host: String,
        peer: usize,
        peer_host: String,
        what: String,
    },
}

/// A GPU run's pairs (`--use-cuda`): which peers this rank reaches by IPC, and its device
/// buffers for them (none where it reaches none).
pub struct GpuPairs {
    peers: IpcPeers,
    ipc: Option<Buffers>,
}

/// This rank's exported inbox, the buffer it copies from, and the peers' inboxes it opened.
struct Buffers {
    gpu: Box<dyn Gpu>,
    inbox: BufId,
    outbox: BufId,
    handle: PeerHandle,
    opened: HashMap<usize, BufId>,
}

/// The byte at `i` of what rank `r` copies: its rank in every byte's high bits.
fn pattern(r: usize, len: usize) -> Vec<u8> {
    (0..len).map(|i| (i as u8 & 0x0f) | ((r as u8) << 4)).collect()
}

impl GpuPairs {
    /// Pairs that all go over the network (`--p2p net`, or no two ranks on one node).
    pub fn net() -> GpuPairs {
        GpuPairs {
            peers: IpcPeers::none(),
            ipc: None,
        }
    }

    /// Pairs with `peers` by IPC on `gpu`, up to `max_bytes` a message; `rank` fills the
    /// buffer it copies from with its pattern.
    pub fn ipc(mut gpu: Box<dyn Gpu>, peers: IpcPeers, rank: usize, max_bytes: usize) -> Result<GpuPairs, GpuError> {
        if !peers.any() {
            return Ok(GpuPairs { peers, ipc: None });
        }
        let len = max_bytes.max(CHECKED);
        let inbox = gpu.alloc(len)?;
        let outbox = gpu.alloc(len)?;
        gpu.upload(At::new(outbox, 0), &pattern(rank, len))?;
        let handle = gpu.export_peer(inbox)?;
        let ipc = Buffers {
            gpu,
            inbox,
            outbox,
            handle,
            opened: HashMap::new(),
        };
        Ok(GpuPairs { peers, ipc: Some(ipc) })
    }

    /// The path of this rank's pair with `peer`.
    pub fn path(&self, peer: usize) -> HopPath {
        match self.ipc.is_some() && self.peers.reaches(peer) {
            true => HopPath::Ipc,
            false => HopPath::Net,
        }
    }

    /// Copy bandwidth with `peer` over IPC, one direction after the other (lower rank first) or,
    /// `bidirectional`, both at once: each direction's result on its sender, or for both at
    /// once the pair's sum on the lower rank.
    pub fn measure(
        &mut self,
        t: &mut dyn Transport,
        peer: usize,
        spec: &MeasureSpec,
        bidirectional: bool,
    ) -> Result<Vec<(usize, usize, BwResult)>, IpcPairError> {
        let Some(b) = self.ipc.as_mut() else {
            return Ok(Vec::new());
        };
        let me = t.rank();
        let (lo, hi) = (me.min(peer), me.max(peer));
        if bidirectional {
            b.ready(t, peer, spec)?;
            let mine = b.send(t, peer, spec, false)?;
            b.received(t, peer, spec)?;
            // The higher rank's figures to the lower, which records the pair.
            let mut theirs = [0u8; 16];
            let mut words = [0u8; 16];
            words[..8].copy_from_slice(&mine.avg_gbps.to_le_bytes());
            words[8..].copy_from_slice(&mine.peak_gbps.to_le_bytes());
            let deadline = Instant::now() + spec.op_timeout;
            if me == hi {
                t.exchange(&mut [Op::send(lo, &words)], deadline)?;
                return Ok(Vec::new());
            }
            t.exchange(&mut [Op::recv(hi, &mut theirs)], deadline)?;
            let f = |o: usize| f64::from_le_bytes(theirs[o..o + 8].try_into().unwrap_or([0; 8]));
            let both = BwResult {
                avg_gbps: mine.avg_gbps + f(0),
                peak_gbps: mine.peak_gbps + f(8),
                msg_rate_mpps: 2.0 * mine.msg_rate_mpps,
                low_gbps: None,
                ..mine
            };
            return Ok(vec![(lo, hi, both)]);
        }
        let mut out = Vec::new();
        for (src, dst) in [(lo, hi), (hi, lo)] {
            if me == src {
                out.push((src, dst, b.send(t, dst, spec, true)?));
            } else {
                b.ready(t, src, spec)?;
                b.received(t, src, spec)?;
            }
        }
        Ok(out)
    }
}

impl Buffers {
    /// Say to `sender` where its copies go: this rank's inbox, the message's length of it.
    fn ready(&mut self, t: &mut dyn Transport, sender: usize, spec: &MeasureSpec) -> Result<(), IpcPairError> {
        let r = Ready {
            peer: self.handle,
            serial: 0,
            at: 0,
            len: spec.bytes as u64,
        };
        let word = Control::Ready(r).encode();
        t.exchange(&mut [Op::send(sender, &word)], Instant::now() + spec.op_timeout)?;
        Ok(())
    }

    /// The next control word from `peer`, within the per-wait deadline.
    fn word(&self, t: &mut dyn Transport, peer: usize, spec: &MeasureSpec) -> Result<Control, IpcPairError> {
        let mut w = [0u8; Control::BYTES];
        t.exchange(&mut [Op::recv(peer, &mut w)], Instant::now() + spec.op_timeout)?;
        Control::decode(&w).map_err(|e| disagree(t, peer, e.to_string()))
    }

    /// The sender's side of a direction into `receiver`: warm-up, the timed copies, each window
    /// said done where `said`, then [`END`].
    fn send(
        &mut self,
        t: &mut dyn Transport,
        receiver: usize,
        spec: &MeasureSpec,
        said: bool,
    ) -> Result<BwResult, IpcPairError> {
        let Control::Ready(r) = self.word(t, receiver, spec)? else {
            return Err(disagree(t, receiver, "a done word where its ready was due".into()));
        };
        if r.len != spec.bytes as u64 {
            let what = format!("it is ready for {} bytes where this rank sends {}", r.len, spec.bytes);
            return Err(disagree(t, receiver, what));
        }
        let theirs = match self.opened.get(&receiver) {
            Some(&b) => b,
            None => {
                let b = self.gpu.open_peer(&r.peer)?;
                self.opened.insert(receiver, b);
                b
            }
        };
        self.copies(t, (receiver, said), theirs, spec, spec.warmup)?;
        let iters = match spec.amount {
            Amount::Iterations(n) => n,
            Amount::Duration(secs) => {
                let probe = probe_len(spec);
                let took = self.copies(t, (receiver, said), theirs, spec, probe)?.0;
                count_for(secs, took / probe as f64, spec.window)
            }
        };
        let (secs, peak) = self.copies(t, (receiver, said), theirs, spec, iters)?;
        let end = Control::Done(Done { bytes: END }).encode();
        t.exchange(&mut [Op::send(receiver, &end)], Instant::now() + spec.op_timeout)?;
        let bytes = spec.bytes as f64 * iters as f64;
        let avg = gbps(bytes, secs);
        Ok(BwResult {
            bytes: spec.bytes as u64,
            iterations: iters,
            peak_gbps: peak.max(avg),
            avg_gbps: avg,
            msg_rate_mpps: mpps(iters as f64, secs),
            low_gbps: None,
        })
    }

    /// `n` copies into `theirs`, a window at a time, each window said done to `receiver` where
    /// `said`: the seconds spent copying (the words between windows not counted) and the best
    /// window's Gb/s.
    fn copies(
        &mut self,
        t: &mut dyn Transport,
        (receiver, said): (usize, bool),
        theirs: BufId,
        spec: &MeasureSpec,
        n: u64,
    ) -> Result<(f64, f64), IpcPairError> {
        let (mut secs, mut peak, mut left) = (0.0f64, 0.0f64, n);
        while left > 0 {
            let k = left.min(spec.window.max(1) as u64);
            let t0 = Instant::now();
            for _ in 0..k {
                self.gpu.copy(At::new(theirs, 0), At::new(self.outbox, 0), spec.bytes)?;
            }
            let took = t0.elapsed().as_secs_f64();
            secs += took;
            peak = peak.max(gbps(spec.bytes as f64 * k as f64, took));
            left -= k;
            if !said {
                continue;
            }
            let done = Control::Done(Done {
                bytes: k * spec.bytes as u64,
            })
            .encode();
            t.exchange(&mut [Op::send(receiver, &done)], Instant::now() + spec.op_timeout)?;
        }
        Ok((secs, peak))
    }

    /// The receiver's side: every window's word until [`END`], then the inbox checked.
    fn received(&mut self, t: &mut dyn Transport, sender: usize, spec: &MeasureSpec) -> Result<(), IpcPairError> {
        loop {
            match self.word(t, sender, spec)? {
                Control::Done(Done { bytes: END }) => break,
                Control::Done(_) => {}
                Control::Ready(_) => return Err(disagree(t, sender, "a ready word where its copies were due".into())),
            }
        }
        let n = spec.bytes.min(CHECKED);
        let mut got = vec![0u8; n];
        self.gpu.download(At::new(self.inbox, 0), &mut got)?;
        if got != pattern(sender, n) {
            let what = format!("its copy did not land: the first {n} bytes of this rank's buffer are not its data");
            return Err(disagree(t, sender, what));
        }
        Ok(())
    }
}

impl Drop for Buffers {
    fn drop(&mut self) {
        for (_, b) in self.opened.drain() {
            self.gpu.free(b);
        }
        self.gpu.free(self.inbox);
        self.gpu.free(self.outbox);
    }
}

/// The two ranks of a pair disagree on the test: named by both, one line.
fn disagree(t: &dyn Transport, peer: usize, what: String) -> IpcPairError {
    let rank = t.rank();
    IpcPairError::Disagree {
        rank,
        host: t.host_of(rank).to_string(),
        peer,
        peer_host: t.host_of(peer).to_string(),
        what,
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::gpu::standin::HostStandIn;

    /// Two ranks of one node as threads over a loopback mesh, each with a stand-in GPU: one
    /// direction after the other, then both at once; each copy lands (the receiver checks) and
    /// every figure is above 0.
    #[test]
    fn a_pair_over_ipc_copies_into_its_peer_one_way_then_both() {
        let meshes = ranks::tcp::loopback_mesh(2, Duration::from_secs(10)).unwrap();
        let threads: Vec<_> = meshes
            .into_iter()
            .enumerate()
            .map(|(rank, mut t)| {
                std::thread::spawn(move || {
                    let gpu = Box::new(HostStandIn::new(0));
                    let peers = IpcPeers::same_node(&[0, 0], rank);
                    let mut pairs = GpuPairs::ipc(gpu, peers, rank, 4096).unwrap();
                    assert_eq!(pairs.path(1 - rank), HopPath::Ipc);
                    let spec = MeasureSpec {
                        bytes: 4096,
                        amount: Amount::Iterations(20),
                        window: 8,
                        warmup: 2,
                        op_timeout: Duration::from_secs(10),
                        qps: 1,
                    };
                    let one_way = pairs.measure(&mut t, 1 - rank, &spec, false).unwrap();
                    let both = pairs.measure(&mut t, 1 - rank, &spec, true).unwrap();
                    (rank, one_way, both)
                })
            })
            .collect();
        for h in threads {
            let (rank, one_way, both) = h.join().unwrap();
            // Each rank records the direction it sent; the lower rank the pair at once.
            assert_eq!(one_way.len(), 1);
            assert_eq!((one_way[0].0, one_way[0].1), (rank, 1 - rank));
            assert!(one_way[0].2.avg_gbps > 0.0 && one_way[0].2.iterations == 20);
            assert_eq!(both.len(), usize::from(rank == 0));
            assert!(both.iter().all(|(a, b, r)| (*a, *b) == (0, 1) && r.avg_gbps > 0.0));
        }
        assert_eq!(GpuPairs::net().path(1), HopPath::Net);
    }
}

//! A GPU run's path between the ranks of one node (`--p2p`, `NCCL_P2P_DISABLE`): found once,
//! before the sweep, by every rank exporting a device buffer and opening those of its node's
//! other ranks (CUDA IPC, or the stand-in's shared memory), as NCCL checks that its
//! peer-to-peer transport can connect. Every rank takes the same answer, so both ends of each
//! hop take the same path; rank 0 gets the header's line.

use analysis::coll::p2p::{IpcNode, P2p};
use collectives::coll::device::IpcPeers;
use collectives::gpu::peer::Ready;
use collectives::gpu::Gpu;
use ranks::World;

use crate::settings::p2p::{P2p as Asked, P2pChoice};

/// Bytes of the probe buffer each rank exports.
const PROBE: usize = 4096;

/// The peers this rank reaches by IPC and the header's account of every hop's path; an error
/// (this rank's, already said, or another's) where `--p2p ipc` was asked and a rank cannot.
pub fn choose(world: &World, gpu: &mut dyn Gpu, asked: &Asked) -> Result<(IpcPeers, P2p), ()> {
    let node_of = world.node_of();
    let mut ipc_nodes: Vec<IpcNode> = Vec::new();
    for (rank, &node) in node_of.iter().enumerate() {
        match ipc_nodes.iter_mut().find(|n| node_of[n.ranks[0]] == node) {
            Some(n) => n.ranks.push(rank),
            None => ipc_nodes.push(IpcNode {
                host: world.hosts()[rank].clone(),
                ranks: vec![rank],
            }),
        }
    }
    ipc_nodes.retain(|n| n.ranks.len() > 1);
    let net = |why: Option<String>| P2p::net(world.node_count(), why);
    if asked.choice == P2pChoice::Net {
        return Ok((IpcPeers::none(), net(asked.source.clone())));
    }
    if ipc_nodes.is_empty() {
        return Ok((IpcPeers::none(), net(Some("no two ranks share a node".into()))));
    }
    let mine = probe(world, gpu);
    if world.all_ok(mine.is_ok(), "opening the device buffers of this node's other ranks") {
        let p2p = P2p {
            within_nodes: "ipc".into(),
            between_nodes: "net".into(),
            ipc_nodes,
            nodes: world.node_count(),
            why: asked.source.clone(),
        };
        return Ok((IpcPeers::same_node(node_of, world.rank()), p2p));
    }
    let why = mine.err().unwrap_or_default();
    if asked.choice == P2pChoice::Ipc {
        if !why.is_empty() {
            crate::rank::say(&format!("{why}; run with --p2p net"));
        }
        return Err(());
    }
    // The default: the network, with the first rank's reason, said once in the header.
    let all = world.gather_bytes(why.as_bytes(), "gathering why GPU peer-to-peer failed");
    let first = all
        .unwrap_or_default()
        .into_iter()
        .map(|b| String::from_utf8_lossy(&b).into_owned())
        .find(|w| !w.is_empty())
        .unwrap_or_default();
    Ok((IpcPeers::none(), net(Some(format!("IPC refused: {first}")))))
}

/// Export a buffer, share the handles over MPI, open (and close) every other rank's of this
/// node: this rank's one-line failure, naming it, its host and the peer.
fn probe(world: &World, gpu: &mut dyn Gpu) -> Result<(), String> {
    let (rank, host) = (world.rank(), world.host());
    let buf = gpu.alloc(PROBE).map_err(|e| format!("rank {rank} ({host}): {e}"));
    let exported = buf.as_ref().map_err(Clone::clone).and_then(|&b| {
        gpu.export_peer(b)
            .map_err(|e| format!("rank {rank} ({host}) cannot share its GPU memory: {e}"))
    });
    let mut record = vec![0u8; Ready::BYTES + 1];
    if let Ok(h) = &exported {
        let r = Ready {
            peer: *h,
            serial: 0,
            at: 0,
            len: 0,
        };
        record[..Ready::BYTES].copy_from_slice(&r.encode());
        record[Ready::BYTES] = 1;
    }
    let all = world.all_gather_bytes(&record, "sharing GPU buffer handles within nodes");
    let mut result = exported.map(|_| ());
    for (peer, rec) in all.chunks(Ready::BYTES + 1).enumerate() {
        if peer == rank || world.node_of()[peer] != world.node_of()[rank] || result.is_err() {
            continue;
        }
        let peer_host = &world.hosts()[peer];
        let opened = match (rec[Ready::BYTES], Ready::decode(&rec[..Ready::BYTES])) {
            (1, Ok(r)) => gpu.open_peer(&r.peer).map_err(|e| e.to_string()),
            // It exported nothing: it says why itself, the reason the header should give.
            _ => continue,
        };
        match opened {
            Ok(b) => gpu.free(b),
            Err(e) => {
                result = Err(format!(
                    "rank {rank} ({host}) cannot open the device buffer of rank {peer} ({peer_host}): {e}"
                ))
            }
        }
    }
    // Each rank keeps its exported buffer until every rank has tried to open it.
    world.barrier("GPU peer-to-peer probe done");
    if let Ok(b) = buf {
        gpu.free(b);
    }
    result
}

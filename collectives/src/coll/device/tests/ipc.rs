//! The device ring with every hop by IPC (all ranks one node), each rank a thread with a stand-in
//! GPU of its own over a real TCP mesh on loopback: an all-reduce (ring reduce-scatter, then
//! ring all-gather) gives the bytes the staged ring gives, for several types, ops, sizes and both
//! placements, at 2 and 3 ranks; and its data never passes through host staging.

use std::time::Duration;

use super::staged::{local_mesh, noise, OnDevice};
use super::*;
use crate::dtype::{DataType, RedOp};

const SLICE: usize = 512;

/// An all-reduce of `count` elements on this rank's stand-in, its hops by IPC or staged: the
/// result and the calls the ring made.
fn all_reduce(
    t: &mut ranks::tcp::TcpMesh,
    ctx: &Ctx,
    count: usize,
    in_place: bool,
    nodes: Option<&[usize]>,
) -> (Vec<u8>, Vec<Call>) {
    let (n, elt) = (ctx.nranks, ctx.elt());
    let bounds = |c: usize| super::super::super::ring::chunk(count, n, c, elt);
    let bytes = count * elt;
    let data = noise(ctx, bytes);
    let OnDevice {
        mut g,
        journal,
        mut staging,
        src,
        buf,
        bufs,
    } = OnDevice::new(&data, in_place);
    let mut dr = DeviceRun::with_slice(&mut g, t, DataPath::Staged, bytes, bufs, Some(&mut staging), SLICE).unwrap();
    if let Some(node_of) = nodes {
        dr.use_ipc(IpcPeers::same_node(node_of, ctx.rank));
    }
    let from = journal.lock().unwrap().len();
    ring_reduce_scatter(t, ctx, &mut dr, src, buf, &bounds).unwrap();
    ring_all_gather(t, ctx, &mut dr, buf, &bounds).unwrap();
    dr.release(t);
    let calls = journal.lock().unwrap()[from..].to_vec();
    let mut out = vec![0u8; bytes];
    g.download(At::new(buf, 0), &mut out).unwrap();
    (out, calls)
}

#[test]
fn ipc_hops_give_the_staged_rings_bytes_without_staging() {
    let cases: Vec<(DataType, RedOp, usize, bool)> = [DataType::Float, DataType::Int32, DataType::Half]
        .into_iter()
        .flat_map(|dt| [RedOp::Sum, RedOp::Max].map(move |op| (dt, op)))
        .flat_map(|(dt, op)| [7, 1001].map(move |c| (dt, op, c)))
        .flat_map(|(dt, op, c)| [false, true].map(move |p| (dt, op, c, p)))
        .collect();
    for n in [2, 3] {
        let threads: Vec<_> = local_mesh(n)
            .into_iter()
            .enumerate()
            .map(|(rank, mut t)| {
                let cases = cases.clone();
                std::thread::spawn(move || {
                    for &(dt, op, count, in_place) in &cases {
                        let ctx = Ctx {
                            dtype: dt,
                            op,
                            ..Ctx::for_test(rank, n, Duration::from_secs(20))
                        };
                        let case = format!(
                            "{n} ranks, rank {rank}, {} {} x{count} in_place={in_place}",
                            dt.name(),
                            op.name()
                        );
                        let (staged, _) = all_reduce(&mut t, &ctx, count, in_place, None);
                        let (ipc, calls) = all_reduce(&mut t, &ctx, count, in_place, Some(&vec![0; n]));
                        assert!(
                            ipc == staged,
                            "{case}: the IPC hops give other bytes than the staged ones"
                        );
                        let peer_copies = calls.iter().filter(|c| matches!(c, Call::PeerCopy(_))).count();
                        assert!(
                            peer_copies >= 2 * (n - 1),
                            "{case}: {peer_copies} copies into peers: {calls:?}"
                        );
                        let staged_calls = calls
                            .iter()
                            .filter(|c| matches!(c, Call::Upload(..) | Call::Download(..)));
                        assert_eq!(staged_calls.count(), 0, "{case}: data went through host staging");
                        let opens = calls.iter().filter(|c| **c == Call::IpcOpen).count();
                        let closes = calls.iter().filter(|c| **c == Call::IpcClose).count();
                        assert!(
                            (1..=2).contains(&opens) && closes == opens,
                            "{case}: {opens} opened, {closes} closed"
                        );
                    }
                })
            })
            .collect();
        for h in threads {
            h.join().unwrap();
        }
    }
}

/// Four ranks on two "nodes" (0 and 1 on one, 2 and 3 on the other): in each ring step one hop
/// goes by IPC and the other over the network, in the same transfer; the bytes are the staged
/// ring's, and each rank both copied into a peer and staged through the host.
#[test]
fn ipc_and_network_hops_mix_in_one_ring() {
    let node_of = [0, 0, 1, 1];
    let threads: Vec<_> = local_mesh(4)
        .into_iter()
        .enumerate()
        .map(|(rank, mut t)| {
            std::thread::spawn(move || {
                for (count, in_place) in [(1001, false), (1001, true), (7, false)] {
                    let ctx = Ctx::for_test(rank, 4, Duration::from_secs(20));
                    let (staged, _) = all_reduce(&mut t, &ctx, count, in_place, None);
                    let (mixed, calls) = all_reduce(&mut t, &ctx, count, in_place, Some(&node_of));
                    let case = format!("rank {rank} x{count} in_place={in_place}");
                    assert!(mixed == staged, "{case}: mixed hops give other bytes than staged ones");
                    // Rank 0 sends to 1 (same node) and receives from 3 (the other): it copies
                    // into a peer and uploads what the network brought; rank 1 the other way.
                    let peer_copies = calls.iter().filter(|c| matches!(c, Call::PeerCopy(_))).count();
                    let uploads = calls.iter().filter(|c| matches!(c, Call::Upload(..))).count();
                    let downloads = calls.iter().filter(|c| matches!(c, Call::Download(..))).count();
                    match rank % 2 {
                        0 => assert!(peer_copies > 0 && uploads > 0 && downloads == 0, "{case}: {calls:?}"),
                        _ => assert!(peer_copies == 0 && uploads == 0 && downloads > 0, "{case}: {calls:?}"),
                    }
                }
            })
        })
        .collect();
    for h in threads {
        h.join().unwrap();
    }
}

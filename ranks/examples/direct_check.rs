//! The zero-copy path of the verbs mesh (what GPUDirect collectives run on), checked end to end
//! on real verbs with host memory registered in place; the Soft-RoCE VM runs it under mpirun:
//!     mpirun -np 2 direct_check DEVICE GID_INDEX
//! Each rank prints `direct_check: OK` or exits non-zero saying which check failed.
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ranks::verbs_mesh::{self, VerbsOptions};
use ranks::{DirectOp, Rdma, Span, TransportError, World};
use ranks::{ForeignPath, Memory, NicMemory};

/// Host memory another owner allocated, as a GPU buffer would be.
struct HostMem(Arc<Vec<u8>>);

// SAFETY: the vector's heap memory lives as long as this object (it holds an Arc).
unsafe impl NicMemory for HostMem {
    fn len(&self) -> usize {
        self.0.len()
    }
    fn memory(&self) -> Memory {
        Memory::Host {
            addr: self.0.as_ptr() as u64,
            len: self.0.len(),
        }
    }
}

fn pattern(rank: usize, len: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 7 + rank * 31 + 1) as u8).collect()
}

fn deadline() -> Instant {
    Instant::now() + Duration::from_secs(30)
}

fn check(what: &str, ok: bool) -> Result<(), String> {
    if ok {
        Ok(())
    } else {
        Err(format!("check failed: {what}"))
    }
}

fn run(world: &World, m: &mut dyn Rdma) -> Result<(), String> {
    let (rank, peer) = (world.rank(), 1 - world.rank());
    let e = |e: TransportError| e.to_string();
    const LEN: usize = 3 << 20;
    let src = Arc::new(pattern(rank, LEN));
    let dst = Arc::new(vec![0u8; LEN]);
    let (s, path) = m.register_region(Box::new(HostMem(src.clone()))).map_err(e)?;
    check("registered as host stand-in memory", path == ForeignPath::HostStandIn)?;
    let (d, _) = m.register_region(Box::new(HostMem(dst.clone()))).map_err(e)?;
    let want = pattern(peer, LEN);

    // 1. One batch of several transfers each way, one of them empty and one of several MiB.
    let cuts = [(0usize, 0usize), (10, 100), (4096, 300 << 10), (1 << 20, 2 << 20)];
    let mut ops: Vec<DirectOp> = cuts
        .iter()
        .map(|&(off, len)| DirectOp::send(peer, Span::new(s, off, len)))
        .collect();
    ops.extend(
        cuts.iter()
            .map(|&(off, len)| DirectOp::recv(peer, Span::new(d, off, len))),
    );
    m.exchange_direct(&mut ops, deadline()).map_err(e)?;
    check(
        "every op has a completion time",
        ops.iter().all(|o| o.done_at.is_some()),
    )?;
    for &(off, len) in &cuts {
        check(
            &format!("bytes {off}..{} arrived intact", off + len),
            dst[off..off + len] == want[off..off + len],
        )?;
    }
    check(
        "bytes outside the receives untouched",
        dst[110..4096].iter().all(|&b| b == 0),
    )?;

    // 2. Many batches back to back, as ring steps are.
    for i in 0..200usize {
        let off = (i * 4099) % (LEN - 65536);
        let mut ops = [
            DirectOp::send(peer, Span::new(s, off, 65536)),
            DirectOp::recv(peer, Span::new(d, off, 65536)),
        ];
        m.exchange_direct(&mut ops, deadline()).map_err(e)?;
        check(
            &format!("step {i} arrived intact"),
            dst[off..off + 65536] == want[off..off + 65536],
        )?;
    }

    // 3. A span outside its region is refused before anything is posted.
    let r = m.exchange_direct(&mut [DirectOp::send(peer, Span::new(s, LEN - 10, 11))], deadline());
    let msg = r.err().map(|x| x.to_string()).unwrap_or_default();
    check(
        &format!("out-of-region span refused ({msg})"),
        msg.contains("outside region"),
    )?;

    // 4. Lengths that disagree fail on both sides, naming both lengths: rank 0 sends 100 bytes
    // where rank 1 posted a 200-byte receive.
    let mut ops = if rank == 0 {
        [DirectOp::send(peer, Span::new(s, 0, 100))]
    } else {
        [DirectOp::recv(peer, Span::new(d, 0, 200))]
    };
    let r = m.exchange_direct(&mut ops, deadline());
    let msg = r.err().map(|x| x.to_string()).unwrap_or_default();
    let want = if rank == 0 {
        "a 100-byte zero-copy send to rank 1"
    } else {
        "is 100 bytes where 200 were posted"
    };
    check(&format!("length mismatch reported ({msg})"), msg.contains(want))?;
    m.release_region(s);
    m.release_region(d);
    Ok(())
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (Some(device), Some(gid)) = (args.first(), args.get(1).and_then(|g| g.parse().ok())) else {
        eprintln!("usage: mpirun -np 2 direct_check DEVICE GID_INDEX");
        return ExitCode::from(2);
    };
    let world = match World::init(Duration::from_secs(60)) {
        Ok(w) => w,
        Err(e) => {
            eprintln!("direct_check: {e}");
            return ExitCode::FAILURE;
        }
    };
    if world.size() != 2 {
        eprintln!("direct_check: run with mpirun -np 2");
        return ExitCode::from(2);
    }
    let opts = VerbsOptions {
        device: Some(device.clone()),
        devices: Vec::new(),
        port: None,
        gid_index: Some(gid),
        sysfs_root: "/sys".into(),
        qos: ranks::verbs::Qos::default(),
        rdma_cm: false,
        lanes: 1,
        mtu: None,
    };
    let result = verbs_mesh::connect(&world, &opts)
        .map_err(|e| e.to_string())
        .and_then(|mut m| run(&world, &mut m));
    match result {
        Ok(()) => {
            println!("direct_check: rank {}: OK", world.rank());
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("direct_check: rank {}: {e}", world.rank());
            ExitCode::FAILURE
        }
    }
}

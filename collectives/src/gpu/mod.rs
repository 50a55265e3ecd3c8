//! GPU buffers for the collectives: which GPU a rank uses, the device-memory interface the staged
//! algorithms run on, and its two implementations:
//! - [`cuda::CudaGpu`]: real device memory through `cudarc` (driver API, loaded at run time, so the
//!   binary starts on nodes without CUDA), with the reduction kernels of `reduce.cu` loaded as PTX;
//! - [`standin::HostStandIn`]: the same interface over host memory and the CPU kernels, chosen only
//!   by the test-only `MESHRUN_GPU_STANDIN=host`, so the staging data flow (separate device buffers,
//!   uploads, downloads, reductions between device buffers) is tested on machines without a GPU.
//!   It names itself in every report line, so it can never pass for a GPU.

pub mod cuda;
pub mod kernels;
pub mod standin;

use std::ops::Range;

use crate::dtype::{DataType, RedOp};

/// A device buffer, as the [`Gpu`] that allocated it knows it.
pub type BufId = usize;

/// A place in a device buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct At {
    pub buf: BufId,
    pub off: usize,
}

impl At {
    pub fn new(buf: BufId, off: usize) -> At {
        At { buf, off }
    }
}

/// What a GPU is, for the `# Using devices` lines and JSON.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct GpuInfo {
    /// CUDA ordinal (among the GPUs that `CUDA_VISIBLE_DEVICES` leaves visible).
    pub ordinal: usize,
    /// `NVIDIA H100 80GB HBM3`.
    pub name: String,
    /// `0000:1b:00.0`.
    pub pci_bus_id: String,
    /// True for the host stand-in used by tests.
    pub stand_in: bool,
}

impl GpuInfo {
    /// The bus id as nccl-tests prints it in `# Using devices`: `0000:1b:00`.
    pub fn short_bus_id(&self) -> &str {
        self.pci_bus_id.rsplit_once('.').map_or(&self.pci_bus_id, |(a, _)| a)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum GpuError {
    #[error(
        "-g/--gpu needs the NVIDIA driver, but libcuda.so could not be loaded on {host}: install the \
         NVIDIA driver (check with nvidia-smi), or run without -g to test with host buffers"
    )]
    NoDriver { host: String },
    #[error("GPU selection on {host}, local rank {local_rank}: {why}")]
    Selection {
        host: String,
        local_rank: usize,
        why: String,
    },
    #[error("GPU {ordinal} ({name}): {call} failed: {error}{hint}")]
    Call {
        ordinal: usize,
        name: String,
        call: &'static str,
        error: String,
        /// Advice that starts with "; " (or is empty).
        hint: String,
    },
    #[error(
        "GPU {ordinal} ({name}): {call} did not finish within {waited:.1?}: the GPU may be hung or a \
         kernel faulting; check nvidia-smi and the kernel log (Xid errors), or raise --timeout"
    )]
    Stalled {
        ordinal: usize,
        name: String,
        call: &'static str,
        waited: std::time::Duration,
    },
    #[error("GPU buffer {buf}: {what} (bytes {range:?} of a {len}-byte buffer)")]
    OutOfBounds {
        buf: BufId,
        what: &'static str,
        range: Range<usize>,
        len: usize,
    },
}

/// Device memory and the operations the staged collectives need. Every call completes before it
/// returns (copies are synchronous with respect to the host), so host staging buffers can be
/// reused at once.
pub trait Gpu {
    fn info(&self) -> &GpuInfo;
    /// A zeroed device buffer of `len` bytes.
    fn alloc(&mut self, len: usize) -> Result<BufId, GpuError>;
    fn free(&mut self, buf: BufId);
    /// A host buffer for staging: pinned (page-locked) memory where the device has it.
    fn host_staging(&mut self, len: usize) -> Result<Box<dyn Staging>, GpuError>;
    /// Copy `src` into the device at `dst`.
    fn upload(&mut self, dst: At, src: &[u8]) -> Result<(), GpuError>;
    /// Copy `dst.len()` bytes from the device at `src` into `dst`.
    fn download(&mut self, src: At, dst: &mut [u8]) -> Result<(), GpuError>;
    /// Copy `len` bytes from `src` to `dst` on the device (the ranges may overlap only if equal).
    fn copy(&mut self, dst: At, src: At, len: usize) -> Result<(), GpuError>;
    /// A buffer as memory a transport can register in place (GPUDirect RDMA); it keeps the buffer
    /// allocated while the transport holds it.
    fn nic_memory(&self, buf: BufId) -> Result<Box<dyn ranks::NicMemory>, GpuError>;
    /// `dst[i] = a[i] op b[i]` over `bytes` bytes of `dt` elements, on the device. `dst` may be `a`.
    fn reduce(&mut self, dt: DataType, op: RedOp, dst: At, a: At, b: At, bytes: usize) -> Result<(), GpuError>;
    /// The last step of `avg`: divide `range` of `buf` by `nranks` (other ops: nothing).
    fn finalize(
        &mut self,
        dt: DataType,
        op: RedOp,
        buf: BufId,
        range: Range<usize>,
        nranks: usize,
    ) -> Result<(), GpuError>;
    /// How long one call may wait for the device before it is an error (default: a minute).
    fn set_call_limit(&mut self, limit: std::time::Duration) {
        let _ = limit;
    }
}

/// Poll `ready` until it says done, fails, or `limit` passes: spinning at first, then sleeping
/// 20 us between polls. `Ok(false)` from `ready` means not yet. Returns how long it waited on
/// expiry, so the caller can name the call that stalled.
pub fn wait_ready<E>(
    limit: std::time::Duration,
    mut ready: impl FnMut() -> Result<bool, E>,
) -> Result<Result<(), E>, std::time::Duration> {
    let t0 = std::time::Instant::now();
    let mut polls = 0u32;
    loop {
        match ready() {
            Ok(true) => return Ok(Ok(())),
            Ok(false) => {}
            Err(e) => return Ok(Err(e)),
        }
        let waited = t0.elapsed();
        if waited >= limit {
            return Err(waited);
        }
        polls = polls.saturating_add(1);
        if polls > 2_000 {
            std::thread::sleep(std::time::Duration::from_micros(20));
        } else {
            std::hint::spin_loop();
        }
    }
}

/// A host staging buffer.
pub trait Staging {
    fn bytes(&self) -> &[u8];
    fn bytes_mut(&mut self) -> &mut [u8];
}

impl Staging for crate::buffers::HostBuffer {
    fn bytes(&self) -> &[u8] {
        self.as_slice()
    }
    fn bytes_mut(&mut self) -> &mut [u8] {
        self.as_mut_slice()
    }
}

/// How device buffers reach the network.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DataPath {
    /// `--gpu-staging`: copied through pinned host buffers around every transfer.
    Staged,
    /// GPUDirect RDMA: the NIC reads and writes the device buffers, registered as this says.
    Direct(ranks::ForeignPath),
}

impl DataPath {
    pub fn describe(self) -> &'static str {
        match self {
            DataPath::Staged => "staged through pinned host memory (--gpu-staging)",
            DataPath::Direct(p) => p.describe(),
        }
    }
}

/// Which GPU each local rank uses: `--gpu-ids` (one per local rank, or one for all), else local
/// rank modulo the number of visible GPUs (ranks share GPUs round-robin when there are more ranks
/// than GPUs, as in a test of two ranks on one GPU).
pub fn pick_ordinal(ids: Option<&[usize]>, local_rank: usize, visible: usize, host: &str) -> Result<usize, GpuError> {
    let err = |why: String| GpuError::Selection {
        host: host.to_string(),
        local_rank,
        why,
    };
    let visible_note = match std::env::var("CUDA_VISIBLE_DEVICES") {
        Ok(v) => format!(" (CUDA_VISIBLE_DEVICES={v:?})"),
        Err(_) => String::new(),
    };
    if visible == 0 {
        return Err(err(format!(
            "the driver sees no GPU{visible_note}; check nvidia-smi, or run without -g"
        )));
    }
    let ordinal = match ids {
        None | Some([]) => local_rank % visible,
        Some([one]) => *one,
        Some(list) => *list.get(local_rank).ok_or_else(|| {
            err(format!(
                "--gpu-ids lists {} GPUs but this node runs at least {} ranks; give one id per local rank, or one id for all",
                list.len(),
                local_rank + 1
            ))
        })?,
    };
    if ordinal >= visible {
        return Err(err(format!(
            "GPU {ordinal} does not exist: {visible} GPU(s) visible{visible_note}, ids 0 to {}",
            visible - 1
        )));
    }
    Ok(ordinal)
}

/// Parse `--gpu-ids 0,1,2,3`.
pub fn parse_ids(s: &str) -> Result<Vec<usize>, String> {
    s.split(',')
        .map(|x| {
            x.trim()
                .parse::<usize>()
                .map_err(|_| format!("--gpu-ids {s:?}: {x:?} is not a GPU ordinal; expected a list like 0,1,2,3"))
        })
        .collect()
}

/// Open this rank's GPU: the host stand-in under `MESHRUN_GPU_STANDIN=host` (tests), else CUDA.
pub fn open(ids: Option<&[usize]>, local_rank: usize, host: &str) -> Result<Box<dyn Gpu>, GpuError> {
    match std::env::var("MESHRUN_GPU_STANDIN").as_deref() {
        Ok("host") => {
            let ordinal = pick_ordinal(ids, local_rank, standin::VISIBLE, host)?;
            Ok(Box::new(standin::HostStandIn::new(ordinal)))
        }
        Ok(other) => Err(GpuError::Selection {
            host: host.to_string(),
            local_rank,
            why: format!("MESHRUN_GPU_STANDIN={other:?} is not known; the only stand-in is \"host\" (tests only)"),
        }),
        Err(_) => {
            let g = cuda::CudaGpu::open(ids, local_rank, host)?;
            Ok(Box::new(g))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_are_bounded_and_keep_errors() {
        use std::time::Duration;
        let mut n = 0;
        let r: Result<Result<(), &str>, Duration> = wait_ready(Duration::from_secs(5), || {
            n += 1;
            Ok(n == 3000)
        });
        assert_eq!(r, Ok(Ok(())));
        assert_eq!(n, 3000);
        let r = wait_ready(Duration::from_secs(5), || Err::<bool, _>("CUDA_ERROR_ILLEGAL_ADDRESS"));
        assert_eq!(r, Ok(Err("CUDA_ERROR_ILLEGAL_ADDRESS")));
        let t0 = std::time::Instant::now();
        let r = wait_ready(Duration::from_millis(30), || Ok::<bool, ()>(false));
        let waited = r.expect_err("never ready: the limit ends the wait");
        assert!(waited >= Duration::from_millis(30) && t0.elapsed() < Duration::from_secs(5));
    }

    #[test]
    fn ordinals_by_local_rank_or_list() {
        assert_eq!(pick_ordinal(None, 3, 8, "h").unwrap(), 3);
        // Two ranks on one GPU share it.
        assert_eq!(pick_ordinal(None, 1, 1, "h").unwrap(), 0);
        assert_eq!(pick_ordinal(Some(&[2]), 1, 4, "h").unwrap(), 2);
        assert_eq!(pick_ordinal(Some(&[3, 2, 1, 0]), 1, 4, "h").unwrap(), 2);
    }

    #[test]
    fn selection_errors_say_what_is_wrong() {
        let e = pick_ordinal(Some(&[0, 1]), 2, 4, "node7").unwrap_err().to_string();
        assert!(e.contains("node7") && e.contains("--gpu-ids lists 2 GPUs"), "{e}");
        let e = pick_ordinal(Some(&[5]), 0, 4, "h").unwrap_err().to_string();
        assert!(
            e.contains("GPU 5 does not exist: 4 GPU(s) visible") && e.contains("0 to 3"),
            "{e}"
        );
        let e = pick_ordinal(None, 0, 0, "h").unwrap_err().to_string();
        assert!(e.contains("sees no GPU"), "{e}");
        assert!(parse_ids("0,x").unwrap_err().contains("\"x\" is not a GPU ordinal"));
        assert_eq!(parse_ids("0, 1").unwrap(), vec![0, 1]);
    }

    #[test]
    fn short_bus_id_as_nccl_tests_prints_it() {
        let g = GpuInfo {
            ordinal: 0,
            name: "x".into(),
            pci_bus_id: "0000:1b:00.0".into(),
            stand_in: false,
        };
        assert_eq!(g.short_bus_id(), "0000:1b:00");
    }
}

//! The host stand-in for a GPU (tests only, `MESHRUN_GPU_STANDIN=host`): device buffers are
//! separate host buffers reached only through upload/download, and reductions run the CPU
//! kernels between them, so the staged algorithms' data flow is exercised for real without a GPU.

use std::ops::Range;
use std::sync::{Arc, Mutex, MutexGuard};

use super::{At, BufId, Gpu, GpuError, GpuInfo, Staging};
use crate::buffers::HostBuffer;
use crate::dtype::{DataType, RedOp};
use crate::reduce;

/// How many "GPUs" the stand-in pretends a node has.
pub const VISIBLE: usize = 8;

/// A stand-in buffer: shared, so a registration with the NIC keeps it alive after `free`.
type Shared = Arc<Mutex<HostBuffer>>;

fn lock(b: &Shared) -> MutexGuard<'_, HostBuffer> {
    b.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

pub struct HostStandIn {
    info: GpuInfo,
    bufs: Vec<Option<Shared>>,
}

impl HostStandIn {
    pub fn new(ordinal: usize) -> HostStandIn {
        HostStandIn {
            info: GpuInfo {
                ordinal,
                name: "host stand-in for a GPU (MESHRUN_GPU_STANDIN, tests only)".into(),
                pci_bus_id: "host".into(),
                stand_in: true,
            },
            bufs: Vec::new(),
        }
    }

    /// The buffer of `at` and the byte range `len` bytes from it, checked.
    fn range(&self, at: At, len: usize, what: &'static str) -> Result<(Shared, Range<usize>), GpuError> {
        let b = self.bufs.get(at.buf).and_then(|b| b.as_ref());
        let r = at.off..at.off.saturating_add(len);
        let blen = b.map_or(0, |b| lock(b).len());
        match b {
            Some(b) if r.end <= blen => Ok((b.clone(), r)),
            _ => Err(GpuError::OutOfBounds {
                buf: at.buf,
                what,
                range: r,
                len: blen,
            }),
        }
    }

    fn failed(&self, call: &'static str, e: impl ToString) -> GpuError {
        GpuError::Call {
            ordinal: self.info.ordinal,
            name: self.info.name.clone(),
            call,
            error: e.to_string(),
            hint: String::new(),
        }
    }
}

/// A stand-in buffer handed to a transport for registration (host memory registered in place).
struct StandInNicMemory(Shared);

impl ranks::NicMemory for StandInNicMemory {
    fn len(&self) -> usize {
        lock(&self.0).len()
    }
    fn register(
        &self,
        pd: &ranks::verbs::ProtectionDomain,
        access: ranks::verbs::Access,
    ) -> Result<ranks::verbs::ForeignRegion, ranks::verbs::VerbsError> {
        let (addr, len) = {
            let mut b = lock(&self.0);
            (b.as_mut_slice().as_mut_ptr() as u64, b.len())
        };
        // SAFETY: the range is the buffer `self.0` owns, whose heap memory never moves and lives as
        // long as this object, which the transport keeps for the life of the region.
        unsafe { pd.register_host_memory(addr, len, access) }
    }
}

impl Gpu for HostStandIn {
    fn info(&self) -> &GpuInfo {
        &self.info
    }
    fn alloc(&mut self, len: usize) -> Result<BufId, GpuError> {
        self.bufs.push(Some(Arc::new(Mutex::new(HostBuffer::new(len)))));
        Ok(self.bufs.len() - 1)
    }
    fn free(&mut self, buf: BufId) {
        if let Some(b) = self.bufs.get_mut(buf) {
            *b = None;
        }
    }
    fn host_staging(&mut self, len: usize) -> Result<Box<dyn Staging>, GpuError> {
        Ok(Box::new(HostBuffer::new(len)))
    }
    fn upload(&mut self, dst: At, src: &[u8]) -> Result<(), GpuError> {
        let (b, r) = self.range(dst, src.len(), "upload past the end")?;
        lock(&b).as_mut_slice()[r].copy_from_slice(src);
        Ok(())
    }
    fn download(&mut self, src: At, dst: &mut [u8]) -> Result<(), GpuError> {
        let (b, r) = self.range(src, dst.len(), "download past the end")?;
        dst.copy_from_slice(&lock(&b).as_slice()[r]);
        Ok(())
    }
    fn copy(&mut self, dst: At, src: At, len: usize) -> Result<(), GpuError> {
        let (d, dr) = self.range(dst, len, "copy destination past the end")?;
        let (s, sr) = self.range(src, len, "copy source past the end")?;
        let v = lock(&s).as_slice()[sr].to_vec();
        lock(&d).as_mut_slice()[dr].copy_from_slice(&v);
        Ok(())
    }
    fn reduce(&mut self, dt: DataType, op: RedOp, dst: At, a: At, b: At, bytes: usize) -> Result<(), GpuError> {
        // Operands are copied out first, so any aliasing between dst, a and b is fine.
        let (ab, ar) = self.range(a, bytes, "reduce operand past the end")?;
        let av = lock(&ab).as_slice()[ar].to_vec();
        let (bb, br) = self.range(b, bytes, "reduce operand past the end")?;
        let bv = lock(&bb).as_slice()[br].to_vec();
        let (d, dr) = self.range(dst, bytes, "reduce result past the end")?;
        let r = reduce::reduce_from(dt, op, &mut lock(&d).as_mut_slice()[dr], &av, &bv);
        r.map_err(|e| self.failed("reduce", e))
    }
    fn finalize(
        &mut self,
        dt: DataType,
        op: RedOp,
        buf: BufId,
        range: Range<usize>,
        nranks: usize,
    ) -> Result<(), GpuError> {
        let (d, r) = self.range(At::new(buf, range.start), range.len(), "finalize past the end")?;
        let r = reduce::finalize(dt, op, &mut lock(&d).as_mut_slice()[r], nranks);
        r.map_err(|e| self.failed("finalize", e))
    }
    fn nic_memory(&self, buf: BufId) -> Result<Box<dyn ranks::NicMemory>, GpuError> {
        let (b, _) = self.range(At::new(buf, 0), 0, "registering a freed buffer")?;
        Ok(Box::new(StandInNicMemory(b)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn data_moves_only_through_uploads_and_downloads() {
        let mut g = HostStandIn::new(0);
        let a = g.alloc(16).unwrap();
        let b = g.alloc(16).unwrap();
        g.upload(At::new(a, 0), &[1u8; 16]).unwrap();
        g.upload(At::new(b, 8), &[2u8; 8]).unwrap();
        // a[0..8] = a[0..8] + b[8..16], in place.
        g.reduce(
            DataType::Uint8,
            RedOp::Sum,
            At::new(a, 0),
            At::new(a, 0),
            At::new(b, 8),
            8,
        )
        .unwrap();
        let mut out = [0u8; 16];
        g.download(At::new(a, 0), &mut out).unwrap();
        assert_eq!(out, [3, 3, 3, 3, 3, 3, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1]);
        let e = g.upload(At::new(b, 10), &[0u8; 8]).unwrap_err().to_string();
        assert!(e.contains("upload past the end") && e.contains("10..18"), "{e}");
        // Device-to-device copy within one buffer.
        g.copy(At::new(a, 8), At::new(a, 0), 4).unwrap();
        g.download(At::new(a, 0), &mut out).unwrap();
        assert_eq!(out, [3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 1, 1, 1, 1]);
        let e = g.copy(At::new(a, 12), At::new(b, 0), 8).unwrap_err().to_string();
        assert!(e.contains("copy destination past the end"), "{e}");
        g.free(b);
        assert!(g.download(At::new(b, 0), &mut out[..1]).is_err());
        assert!(g.nic_memory(b).is_err(), "a freed buffer cannot be registered");
    }
}

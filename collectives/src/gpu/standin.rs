//! The host stand-in for a GPU (tests only, `MESHRUN_GPU_STANDIN=host`): device buffers are
//! separate host buffers reached only through upload/download, and reductions run the CPU
//! kernels between them, so the staged algorithms' data flow is exercised for real without a GPU.

use std::ops::Range;

use super::{At, BufId, Gpu, GpuError, GpuInfo, Staging};
use crate::buffers::HostBuffer;
use crate::dtype::{DataType, RedOp};
use crate::reduce;

/// How many "GPUs" the stand-in pretends a node has.
pub const VISIBLE: usize = 8;

pub struct HostStandIn {
    info: GpuInfo,
    bufs: Vec<Option<HostBuffer>>,
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

    fn range(&self, at: At, len: usize, what: &'static str) -> Result<(&HostBuffer, Range<usize>), GpuError> {
        let b = self.bufs.get(at.buf).and_then(|b| b.as_ref());
        let r = at.off..at.off.saturating_add(len);
        match b {
            Some(b) if r.end <= b.len() => Ok((b, r)),
            _ => Err(GpuError::OutOfBounds {
                buf: at.buf,
                what,
                range: r,
                len: b.map_or(0, |b| b.len()),
            }),
        }
    }
}

impl Gpu for HostStandIn {
    fn info(&self) -> &GpuInfo {
        &self.info
    }
    fn alloc(&mut self, len: usize) -> Result<BufId, GpuError> {
        self.bufs.push(Some(HostBuffer::new(len)));
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
        let (_, r) = self.range(dst, src.len(), "upload past the end")?;
        if let Some(Some(b)) = self.bufs.get_mut(dst.buf) {
            b.as_mut_slice()[r].copy_from_slice(src);
        }
        Ok(())
    }
    fn download(&mut self, src: At, dst: &mut [u8]) -> Result<(), GpuError> {
        let (b, r) = self.range(src, dst.len(), "download past the end")?;
        dst.copy_from_slice(&b.as_slice()[r]);
        Ok(())
    }
    fn reduce(&mut self, dt: DataType, op: RedOp, dst: At, a: At, b: At, bytes: usize) -> Result<(), GpuError> {
        // Operands are copied out first, so any aliasing between dst, a and b is fine.
        let (ab, ar) = self.range(a, bytes, "reduce operand past the end")?;
        let av = ab.as_slice()[ar].to_vec();
        let (bb, br) = self.range(b, bytes, "reduce operand past the end")?;
        let bv = bb.as_slice()[br].to_vec();
        let (_, dr) = self.range(dst, bytes, "reduce result past the end")?;
        if let Some(Some(d)) = self.bufs.get_mut(dst.buf) {
            reduce::reduce_from(dt, op, &mut d.as_mut_slice()[dr], &av, &bv).map_err(|e| GpuError::Call {
                ordinal: self.info.ordinal,
                name: self.info.name.clone(),
                call: "reduce",
                error: e.to_string(),
                hint: String::new(),
            })?;
        }
        Ok(())
    }
    fn finalize(
        &mut self,
        dt: DataType,
        op: RedOp,
        buf: BufId,
        range: Range<usize>,
        nranks: usize,
    ) -> Result<(), GpuError> {
        let (_, r) = self.range(At::new(buf, range.start), range.len(), "finalize past the end")?;
        if let Some(Some(d)) = self.bufs.get_mut(buf) {
            reduce::finalize(dt, op, &mut d.as_mut_slice()[r], nranks).map_err(|e| GpuError::Call {
                ordinal: self.info.ordinal,
                name: self.info.name.clone(),
                call: "finalize",
                error: e.to_string(),
                hint: String::new(),
            })?;
        }
        Ok(())
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
        g.free(b);
        assert!(g.download(At::new(b, 0), &mut out[..1]).is_err());
    }
}

//! Memory that collectives run on. Host buffers are page-aligned, so they can be registered for
//! RDMA as they are; CUDA device memory (the GPU issue) will sit behind the same interface, with
//! staging copies for transports that need host memory.

/// Alignment of host buffers.
pub const PAGE: usize = 4096;

/// A page-aligned, zero-initialised host buffer.
pub struct HostBuffer {
    raw: Vec<u8>,
    off: usize,
    len: usize,
}

impl HostBuffer {
    pub fn new(len: usize) -> HostBuffer {
        // Over-allocate by a page and start at the first page boundary inside: alignment without
        // a custom allocator.
        let raw = vec![0u8; len + PAGE];
        let addr = raw.as_ptr() as usize;
        let off = (PAGE - addr % PAGE) % PAGE;
        HostBuffer { raw, off, len }
    }
    pub fn len(&self) -> usize {
        self.len
    }
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    pub fn as_slice(&self) -> &[u8] {
        &self.raw[self.off..self.off + self.len]
    }
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        &mut self.raw[self.off..self.off + self.len]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn page_aligned_and_sized() {
        for len in [0, 1, 4095, 4096, 1 << 20] {
            let mut b = HostBuffer::new(len);
            assert_eq!(b.as_slice().as_ptr() as usize % PAGE, 0);
            assert_eq!(b.len(), len);
            b.as_mut_slice().fill(7);
            assert!(b.as_slice().iter().all(|&x| x == 7));
        }
    }
}

//! The stand-in's device memory: every buffer is a memfd mapped shared, so another rank process
//! on this machine can open it, as CUDA IPC opens another process's device buffer. Its handle
//! names the exporting process, the descriptor and the memfd's inode; the peer opens
//! `/proc/PID/fd/FD` and checks the inode, so a handle whose buffer was freed (the descriptor
//! closed, or its number taken by another file) is refused as stale, never mapped.

use std::fs::File;
use std::ops::Range;
use std::os::fd::{AsRawFd, FromRawFd};
use std::os::unix::fs::MetadataExt;
use std::sync::Mutex;

use crate::gpu::peer::HANDLE_BYTES;

/// The first bytes of a stand-in handle, so a CUDA handle is never taken for one.
const MAGIC: &[u8; 4] = b"MRSI";

/// A shared mapping of a memfd: `len` bytes used of `map` mapped (at least one page).
pub(super) struct ShmBuf {
    file: File,
    ptr: *mut u8,
    map: usize,
    len: usize,
    /// Opened from another rank's handle: how many times as long a copy into it takes
    /// (`slow.rs`, tests only; 1 otherwise).
    slow: f64,
}

// SAFETY: the mapping belongs to this value alone (unmapped once, in drop); moving it to another
// thread moves that ownership, and all access goes through `&self`/`&mut self`.
unsafe impl Send for ShmBuf {}

/// Where a stand-in buffer can be opened: what its handle's bytes hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Where {
    pid: u32,
    fd: i32,
    ino: u64,
    dev: u64,
    map: u64,
    /// The exporter's rank in its MPI job (`u32::MAX` outside one): for `slow.rs`.
    rank: u32,
}

impl Where {
    fn encode(&self) -> [u8; HANDLE_BYTES] {
        let mut h = [0u8; HANDLE_BYTES];
        h[..4].copy_from_slice(MAGIC);
        h[4..8].copy_from_slice(&self.pid.to_le_bytes());
        h[8..12].copy_from_slice(&self.fd.to_le_bytes());
        h[16..24].copy_from_slice(&self.ino.to_le_bytes());
        h[24..32].copy_from_slice(&self.dev.to_le_bytes());
        h[32..40].copy_from_slice(&self.map.to_le_bytes());
        h[40..44].copy_from_slice(&self.rank.to_le_bytes());
        h
    }

    fn decode(h: &[u8; HANDLE_BYTES]) -> Option<Where> {
        let n4 = |o: usize| h[o..o + 4].try_into().ok();
        let n8 = |o: usize| h[o..o + 8].try_into().ok().map(u64::from_le_bytes);
        (&h[..4] == MAGIC).then_some(())?;
        Some(Where {
            pid: u32::from_le_bytes(n4(4)?),
            fd: i32::from_le_bytes(n4(8)?),
            ino: n8(16)?,
            dev: n8(24)?,
            map: n8(32)?,
            rank: u32::from_le_bytes(n4(40)?),
        })
    }
}

impl ShmBuf {
    /// A zeroed shared buffer of `len` bytes.
    pub(super) fn new(len: usize) -> std::io::Result<ShmBuf> {
        let map = crate::gpu::round_up(len.max(1), crate::gpu::host_page_size());
        // SAFETY: the name is a NUL-terminated string alive for the call; the descriptor returned
        // is new and owned by the `File` made of it below, which closes it once.
        let fd = unsafe { libc::memfd_create(c"meshrun-standin".as_ptr(), libc::MFD_CLOEXEC) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: `fd` is a descriptor this process just opened and nothing else owns.
        let file = unsafe { File::from_raw_fd(fd) };
        file.set_len(map as u64)?;
        ShmBuf::map(file, map, len)
    }

    /// Map `map` bytes of `file` shared, `len` of them used.
    fn map(file: File, map: usize, len: usize) -> std::io::Result<ShmBuf> {
        // SAFETY: a new shared mapping of `map` bytes of an open file at least that long (set or
        // checked by the caller); the kernel picks the address; the mapping is owned by the
        // `ShmBuf` made of it and unmapped once, in drop.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                map,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        Ok(ShmBuf {
            file,
            ptr: p.cast(),
            map,
            len,
            slow: 1.0,
        })
    }

    /// What a peer needs to open this buffer while this process holds it.
    pub(super) fn handle(&self) -> std::io::Result<[u8; HANDLE_BYTES]> {
        let m = self.file.metadata()?;
        Ok(Where {
            pid: std::process::id(),
            fd: self.file.as_raw_fd(),
            ino: m.ino(),
            dev: m.dev(),
            map: self.map as u64,
            rank: super::slow::this_rank().map_or(u32::MAX, |r| r as u32),
        }
        .encode())
    }

    /// Open a buffer another process exported as `handle`, `len` bytes of it used; a handle that
    /// no longer names a live buffer is refused, saying so.
    pub(super) fn open(handle: &[u8; HANDLE_BYTES], len: usize) -> Result<ShmBuf, String> {
        let w = Where::decode(handle).ok_or("not a stand-in handle (a CUDA IPC handle given to the host stand-in?)")?;
        let path = format!("/proc/{}/fd/{}", w.pid, w.fd);
        let stale = |why: String| {
            format!(
                "stale handle: {path} {why}: the exporting rank (pid {}) freed the buffer or ended; open a handle \
                 while its buffer is allocated",
                w.pid
            )
        };
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .map_err(|e| stale(format!("cannot be opened ({e})")))?;
        let m = file.metadata().map_err(|e| stale(format!("cannot be read ({e})")))?;
        if (m.ino(), m.dev()) != (w.ino, w.dev) {
            return Err(stale(format!(
                "is another file now (inode {} where the handle says {})",
                m.ino(),
                w.ino
            )));
        }
        let map = w.map as usize;
        if m.len() < w.map || len > map {
            return Err(format!(
                "handle of {path}: {len} bytes asked of a {}-byte segment ({} mapped by its exporter)",
                m.len(),
                w.map
            ));
        }
        let mut b = ShmBuf::map(file, map, len).map_err(|e| format!("mmap of {path}: {e}"))?;
        b.slow = super::slow::factor((w.rank != u32::MAX).then_some(w.rank as usize));
        Ok(b)
    }

    pub(super) fn len(&self) -> usize {
        self.len
    }

    pub(super) fn as_slice(&self) -> &[u8] {
        // SAFETY: `ptr` is the start of a live mapping of `map >= len` bytes owned by `self`.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }

    pub(super) fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as in `as_slice`, and `&mut self` makes this the only reference in this process
        // (another process writes into it only while this one waits for its "done").
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

/// Copy `sr` of `s` into `dr` of `d` (the same buffer or two; equal or disjoint ranges), in the
/// time the slow hook sets for `d` (`slow.rs`): straight from one mapping into the other, as a
/// device-to-device copy, with no host buffer between.
pub(super) fn copy(d: &Mutex<ShmBuf>, dr: Range<usize>, s: &Mutex<ShmBuf>, sr: Range<usize>) {
    let t0 = std::time::Instant::now();
    let slow = if std::ptr::eq(d, s) {
        let mut g = d.lock().unwrap_or_else(|p| p.into_inner());
        g.as_mut_slice().copy_within(sr, dr.start);
        g.slow
    } else {
        let from = s.lock().unwrap_or_else(|p| p.into_inner());
        let mut to = d.lock().unwrap_or_else(|p| p.into_inner());
        to.as_mut_slice()[dr].copy_from_slice(&from.as_slice()[sr]);
        to.slow
    };
    if slow > 1.0 {
        std::thread::sleep(t0.elapsed().mul_f64(slow - 1.0));
    }
}

impl Drop for ShmBuf {
    fn drop(&mut self) {
        // SAFETY: unmaps the mapping this value made, once; no slice of it outlives `self`.
        unsafe { libc::munmap(self.ptr.cast(), self.map) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_handle_names_the_segment_and_goes_stale_with_it() {
        let mut a = ShmBuf::new(100).unwrap();
        a.as_mut_slice()[99] = 7;
        let h = a.handle().unwrap();
        let mut b = ShmBuf::open(&h, 100).unwrap();
        assert_eq!(b.as_slice()[99], 7, "the same memory");
        b.as_mut_slice()[0] = 9;
        assert_eq!(a.as_slice()[0], 9);
        assert!(ShmBuf::open(&h, 1 << 20).err().unwrap().contains("bytes asked of a"));
        drop(a);
        // b's mapping keeps the memory; the handle no longer opens anything.
        assert_eq!(b.as_slice()[99], 7);
        let e = ShmBuf::open(&h, 100).err().unwrap();
        assert!(e.starts_with("stale handle: /proc/"), "{e}");
        let mut not = h;
        not[0] = b'X';
        assert!(ShmBuf::open(&not, 1).is_err());
    }
}

//! Completion queues, polled with a deadline.

use std::ffi::CStr;
use std::ptr::NonNull;
use std::sync::Arc;
use std::time::Instant;

use rdma_sys::*;

use super::*;

/// A completion queue, polled (no interrupts).
pub struct CompletionQueue {
    pub(super) raw: NonNull<ibv_cq>,
    pub(super) ctx: Arc<OpenDevice>,
}

// SAFETY: CQ polling is thread-safe in libibverbs; the pointer is never exposed.
unsafe impl Send for CompletionQueue {}

impl Drop for CompletionQueue {
    fn drop(&mut self) {
        // SAFETY: QPs using this CQ are destroyed first (they are declared and dropped before it by
        // the owners in this crate), and it is destroyed once.
        unsafe { ibv_destroy_cq(self.raw.as_ptr()) };
    }
}

/// A successful completion.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Completion {
    pub wr_id: u64,
    pub byte_len: u32,
    pub imm: Option<u32>,
}

fn status_hint(status: ibv_wc_status::Type) -> &'static str {
    match status {
        ibv_wc_status::IBV_WC_RETRY_EXC_ERR => " (the peer never answered: is it alive, and are both sides' GIDs of the same RoCE version? see meshrun devices, -x N)",
        ibv_wc_status::IBV_WC_RNR_RETRY_EXC_ERR => " (the peer posted no receive in time)",
        ibv_wc_status::IBV_WC_REM_ACCESS_ERR => " (the peer's memory region does not grant this access)",
        _ => "",
    }
}

impl CompletionQueue {
    /// Poll once, without waiting: up to `max` completions, stopping at the first error completion
    /// (returned as Err with its work request id).
    pub fn poll(&self, max: usize, out: &mut Vec<Completion>) -> Result<(), VerbsError> {
        const N: usize = 16;
        let mut wcs: [std::mem::MaybeUninit<ibv_wc>; N] = [const { std::mem::MaybeUninit::uninit() }; N];
        let want = max.clamp(1, N) as i32;
        // SAFETY: valid CQ and room for `want` entries; ibv_poll_cq initialises the first `got`.
        // (No zero-filling: this runs in a busy loop.)
        let got = unsafe { ibv_poll_cq(self.raw.as_ptr(), want, wcs.as_mut_ptr().cast()) };
        super::calls::polled(got.max(0) as usize);
        if got < 0 {
            return Err(VerbsError::verb("ibv_poll_cq", self.ctx.name.clone(), errno(), ""));
        }
        // SAFETY: the first `got` entries were written by ibv_poll_cq.
        let wcs: &[ibv_wc] = unsafe { std::slice::from_raw_parts(wcs.as_ptr().cast(), got as usize) };
        for wc in wcs {
            if wc.status != ibv_wc_status::IBV_WC_SUCCESS {
                // SAFETY: ibv_wc_status_str returns a static string for any status.
                let s = unsafe { CStr::from_ptr(ibv_wc_status_str(wc.status)) }
                    .to_string_lossy()
                    .into_owned();
                return Err(VerbsError::Completion {
                    device: self.ctx.name.clone(),
                    wr_id: wc.wr_id,
                    status: s,
                    hint: status_hint(wc.status),
                });
            }
            let has_imm = wc.wc_flags & ibv_wc_flags::IBV_WC_WITH_IMM.0 != 0;
            // SAFETY: the immediate is valid when IBV_WC_WITH_IMM is set.
            let imm = has_imm.then(|| u32::from_be(unsafe { wc.imm_data_invalidated_rkey_union.imm_data }));
            out.push(Completion {
                wr_id: wc.wr_id,
                byte_len: wc.byte_len,
                imm,
            });
        }
        Ok(())
    }

    /// Wait for `n` completions, failing on the first error completion or at `deadline`.
    pub fn wait(&self, n: usize, deadline: Instant, what: &str) -> Result<Vec<Completion>, VerbsError> {
        let start = Instant::now();
        let mut out = Vec::with_capacity(n);
        while out.len() < n {
            let before = out.len();
            self.poll(n - out.len(), &mut out)?;
            if out.len() == before {
                if Instant::now() >= deadline {
                    return Err(VerbsError::Timeout {
                        device: self.ctx.name.clone(),
                        waited: start.elapsed(),
                        what: format!("{what} ({} of {n} completions)", out.len()),
                    });
                }
                std::hint::spin_loop();
            }
        }
        Ok(out)
    }
}

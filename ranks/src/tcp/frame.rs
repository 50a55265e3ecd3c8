//! Message framing on a TCP stream: an 8-byte little-endian length, zero padding, the payload.
//! Payloads of [`ALIGN_MIN`] bytes or more start on an [`ALIGN`]-byte boundary of the stream;
//! both ends compute the padding from their own count of the stream.

/// Payloads at least this large start on an [`ALIGN`]-byte boundary of the stream.
pub const ALIGN_MIN: usize = 4096;
/// Stream alignment of large payloads: a cache line.
pub const ALIGN: usize = 64;
pub(super) const HEADER: usize = 8;
pub(super) const ZEROS: [u8; ALIGN] = [0; ALIGN];

/// Padding between the length and a `len`-byte payload whose frame starts at stream offset `at`.
pub(super) fn pad_for(at: u64, len: usize) -> usize {
    if len < ALIGN_MIN {
        return 0;
    }
    let misalign = ((at + HEADER as u64) % ALIGN as u64) as usize;
    (ALIGN - misalign) % ALIGN
}

/// Copy stream bytes that start at byte `at` of a frame into place: the length field, the padding
/// (dropped), the payload (dropped too for a sink, `buf` None).
pub(super) fn scatter(mut src: &[u8], mut at: usize, hdr: &mut [u8; HEADER], pad: usize, buf: Option<&mut [u8]>) {
    if at < HEADER {
        let k = (HEADER - at).min(src.len());
        hdr[at..at + k].copy_from_slice(&src[..k]);
        src = &src[k..];
        at += k;
    }
    if at < HEADER + pad {
        let k = (HEADER + pad - at).min(src.len());
        src = &src[k..];
        at += k;
    }
    if let (false, Some(buf)) = (src.is_empty(), buf) {
        let from = at - HEADER - pad;
        buf[from..from + src.len()].copy_from_slice(src);
    }
}

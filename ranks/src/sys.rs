//! The few raw libc calls the safe wrappers in `nix` do not cover.

/// Leave the process at once with `code`, without running atexit handlers: used when a deadline
/// expired while another thread may be blocked inside the MPI library, whose exit handlers could
/// then block too.
pub fn exit_now(code: i32) -> ! {
    // SAFETY: `_exit` takes a plain integer, touches no memory of ours and never returns.
    unsafe { libc::_exit(code) }
}

/// The name the system resolver gives `addr` (getnameinfo with NI_NAMEREQD, as traceroute asks:
/// /etc/hosts, then DNS PTR records, as nsswitch.conf orders them), or None where it has none.
/// It may block as long as the resolver's own timeouts: callers bound it ([`crate::names`]).
pub(crate) fn name_of(addr: std::net::IpAddr) -> Option<String> {
    use nix::sys::socket::{SockaddrLike, SockaddrStorage};
    let sa = SockaddrStorage::from(std::net::SocketAddr::new(addr, 0));
    // NI_MAXHOST: the longest name getnameinfo writes, its NUL included.
    let mut host = [0u8; 1025];
    // SAFETY: `sa` is a valid socket address of `sa.len()` bytes that outlives the call; `host` is
    // a writable buffer of the length passed, which getnameinfo NUL-terminates on success; no
    // service buffer is asked for (null, length 0).
    let rc = unsafe {
        libc::getnameinfo(
            sa.as_ptr(),
            sa.len(),
            host.as_mut_ptr().cast::<libc::c_char>(),
            host.len() as libc::socklen_t,
            std::ptr::null_mut(),
            0,
            libc::NI_NAMEREQD,
        )
    };
    if rc != 0 {
        return None;
    }
    let name = std::ffi::CStr::from_bytes_until_nul(&host).ok()?.to_str().ok()?;
    (!name.is_empty()).then(|| name.to_string())
}

//! The few raw libc calls the safe wrappers in `nix` do not cover.

/// Leave the process at once with `code`, without running atexit handlers: used when a deadline
/// expired while another thread may be blocked inside the MPI library, whose exit handlers could
/// then block too.
pub fn exit_now(code: i32) -> ! {
    // SAFETY: `_exit` takes a plain integer, touches no memory of ours and never returns.
    unsafe { libc::_exit(code) }
}

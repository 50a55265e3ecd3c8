//! What only the TCP transport offers: a bandwidth test's connections of its own with one peer
//! (`pairwise -q N` over TCP), each from its own source port; reached through
//! [`super::Transport::streams`]. The TCP mesh implements it (`crate::tcp::TestStreams`).

use std::net::SocketAddr;
use std::time::Instant;

use super::TransportError;

/// Opens a test's connections.
pub trait Streams {
    /// Open `n` connections with `peer` for one test: the receiver listens and accepts, the
    /// sender (`sender`) connects; both by `deadline`.
    fn open_streams(
        &mut self,
        peer: usize,
        n: usize,
        sender: bool,
        deadline: Instant,
    ) -> Result<Box<dyn StreamSet>, TransportError>;
    /// The address `peer`'s end of its mesh connection has, as this rank sees it (None for
    /// this rank itself, or a connection the kernel no longer names).
    fn peer_address(&self, peer: usize) -> Option<std::net::IpAddr>;
}

/// One test's connections with one peer.
pub trait StreamSet {
    /// Each connection's two ends: (this rank's, the peer's), in the order opened.
    fn ends(&self) -> Vec<(SocketAddr, SocketAddr)>;
    /// Send `counts[k]` bytes on connection k, every connection at once, and wait for each
    /// one's answer; each connection's seconds from the start to its answer, by `deadline`.
    fn send(&mut self, counts: &[u64], deadline: Instant) -> Result<Vec<f64>, TransportError>;
    /// Read what the peer's [`StreamSet::send`] sends on every connection and answer each once
    /// it has all its bytes, by `deadline`.
    fn receive(&mut self, deadline: Instant) -> Result<(), TransportError>;
}

//! The mesh over TCP: one connection per pair of ranks, a per-job token in the first bytes, and one
//! progress loop (non-blocking sockets and `poll`) that drives every outstanding operation.
//!
//! Wire format: a 32-byte hello each way when a connection opens (magic, version, token, rank,
//! size), then messages framed as an 8-byte little-endian length, zero padding, and the payload.
//! The padding is empty for payloads under [`ALIGN_MIN`]; larger payloads are padded so that they
//! start on a 64-byte boundary of the byte stream (counted from the first byte after the hello).
//! Both ends compute the padding from their own count of the stream, so it is never sent as a
//! field. Why: the kernel copies a payload into socket buffers, and out of them, at the stream's
//! alignment; a stream whose payloads start 8 bytes past a cache line (an 8-byte header alone)
//! copies 2-2.7x slower than an aligned one (1 MiB swapped both ways over loopback, plain C:
//! 318 us aligned, 660-880 us at offset 8).
//!
//! A bandwidth test may also open connections of its own with a peer ([`TestStreams`], `-q`).

mod connect;
mod frame;
mod progress;
mod streams;

use std::io::{self, IoSlice, IoSliceMut, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsFd;
use std::time::{Duration, Instant};

use nix::poll::{poll, PollFd, PollFlags, PollTimeout};

use crate::transport::{Op, OpKind, Transport, TransportError, TransportKind};
use crate::wire::{Hello, Record};

use frame::{pad_for, HEADER};
use progress::PeerConn;

pub use crate::wire::JobToken;
pub use connect::{loopback_mesh, random_token, TcpListening};
pub use frame::{ALIGN, ALIGN_MIN};
pub use streams::TestStreams;

/// Receives at least this large go straight into the user's buffer; smaller ones through a staging buffer.
const DIRECT_READ_MIN: usize = 64 * 1024;
const STAGING: usize = 256 * 1024;
/// Most messages coalesced into one `writev` (three iovecs each: length, padding, payload).
const MAX_BATCH: usize = 32;
/// How long an exchange keeps trying its sockets (yielding the CPU between tries) before it
/// sleeps in `poll`: a small message's reply usually arrives within tens of microseconds, and a
/// sleep and wake-up costs about as much again (what MPI libraries avoid by polling).
const SPIN: std::time::Duration = std::time::Duration::from_micros(100);

/// An all-to-all TCP mesh.
pub struct TcpMesh {
    rank: usize,
    size: usize,
    hosts: Vec<String>,
    peers: Vec<Option<PeerConn>>,
    /// The address this rank listens on.
    address: std::net::IpAddr,
    /// This job's token, which a test's own connections open with too ([`TestStreams`]).
    token: JobToken,
}

impl TcpMesh {
    fn closed(&self, peer: usize, what: String) -> TransportError {
        TransportError::peer_closed(self.rank, &self.hosts, peer, what)
    }

    fn io(&self, peer: usize, what: &str, e: io::Error) -> TransportError {
        if matches!(
            e.kind(),
            io::ErrorKind::BrokenPipe | io::ErrorKind::ConnectionReset | io::ErrorKind::UnexpectedEof
        ) {
            return self.closed(peer, format!("{what}: {e}"));
        }
        TransportError::io(self.rank, &self.hosts, peer, what.into(), e)
    }
}

impl Transport for TcpMesh {
    fn kind(&self) -> TransportKind {
        TransportKind::Tcp
    }
    fn rank(&self) -> usize {
        self.rank
    }
    fn size(&self) -> usize {
        self.size
    }
    fn host_of(&self, rank: usize) -> &str {
        &self.hosts[rank]
    }
    fn endpoint(&self) -> crate::transport::Endpoint {
        crate::transport::Endpoint {
            address: Some(self.address),
            ..Default::default()
        }
    }

    fn exchange_with(
        &mut self,
        ops: &mut [Op<'_>],
        deadline: Instant,
        work: Option<&mut dyn FnMut()>,
    ) -> Result<(), TransportError> {
        self.exchange_batch(ops, deadline, work)
    }
    fn streams(&mut self) -> Option<&mut dyn crate::transport::Streams> {
        Some(self)
    }
}

#[cfg(test)]
mod tests {
    use super::connect::hello;
    use super::frame::scatter;
    use super::*;
    use crate::transport::Streams;
    use std::net::Ipv4Addr;

    /// A mesh of `n` ranks inside one process, one thread per rank.
    fn local_mesh(n: usize) -> Vec<TcpMesh> {
        loopback_mesh(n, Duration::from_secs(10)).unwrap()
    }

    /// Run `f` on every rank of a local mesh of `n`, each in a thread of its own; a panic on any
    /// rank fails the test.
    fn on_every_rank(n: usize, f: impl Fn(TcpMesh) + Send + Copy + 'static) {
        let handles: Vec<_> = local_mesh(n)
            .into_iter()
            .map(|m| std::thread::spawn(move || f(m)))
            .collect();
        for h in handles {
            h.join().unwrap();
        }
    }

    #[test]
    fn endpoint_roundtrip() {
        for a in ["10.1.2.3:4567", "[fe80::1]:9"] {
            let a: SocketAddr = a.parse().unwrap();
            assert_eq!(SocketAddr::from_bytes(&a.to_bytes()), Some(a));
        }
        assert_eq!(SocketAddr::from_bytes(&[9u8; <SocketAddr as Record>::LEN]), None);
    }

    #[test]
    fn hello_checks_token_rank_and_size() {
        let t = [7u8; 16];
        assert_eq!(Hello::check(&hello(t, 3, 4), &t, 4), Some(3));
        assert_eq!(Hello::check(&hello(t, 3, 4), &[8u8; 16], 4), None);
        assert_eq!(Hello::check(&hello(t, 3, 4), &t, 5), None);
        assert_eq!(Hello::check(&hello(t, 4, 4), &t, 4), None);
    }

    #[test]
    fn large_payloads_start_on_a_cache_line_of_the_stream() {
        // Small payloads: no padding, wherever they start.
        assert_eq!(pad_for(0, 0), 0);
        assert_eq!(pad_for(3, ALIGN_MIN - 1), 0);
        // Large ones: length field, then padding to the next 64-byte boundary.
        assert_eq!(pad_for(0, ALIGN_MIN), 56);
        assert_eq!(pad_for(56, ALIGN_MIN), 0);
        assert_eq!(pad_for(57, 1 << 20), 63);
        assert_eq!(pad_for(1 << 20, 1 << 20), 56);
        for at in 0..200u64 {
            let pad = pad_for(at, 1 << 16);
            assert!(pad < ALIGN);
            assert_eq!((at + (HEADER + pad) as u64) % ALIGN as u64, 0, "frame at {at}");
        }
    }

    #[test]
    fn scatter_places_length_padding_and_payload() {
        let frame: Vec<u8> = (0..(HEADER + 5 + 6) as u8).collect();
        for cut in 0..frame.len() {
            let (mut hdr, mut buf) = ([0u8; HEADER], [0u8; 6]);
            scatter(&frame[..cut], 0, &mut hdr, 5, Some(&mut buf));
            scatter(&frame[cut..], cut, &mut hdr, 5, Some(&mut buf));
            assert_eq!(hdr, [0, 1, 2, 3, 4, 5, 6, 7]);
            assert_eq!(buf, [13, 14, 15, 16, 17, 18], "cut at {cut}");
        }
    }

    #[test]
    fn sinks_drop_payloads_and_keep_the_stream_in_step() {
        // Sinks of every size (staged, direct, larger than the sink buffer) between receives: each
        // receive after them gets its own message, so the sinks consumed exactly their frames.
        let sizes = [3usize, ALIGN_MIN + 1, DIRECT_READ_MIN + 5, 3 << 20, 0, 2 * STAGING + 11];
        on_every_rank(2, move |mut m| {
            let (r, peer) = (m.rank(), 1 - m.rank());
            let pattern = |who: usize, k: usize, len: usize| -> Vec<u8> {
                (0..len).map(|i| (i * 5 + k * 11 + who * 97) as u8).collect()
            };
            // Each size twice: the first sunk, the second received and checked.
            let sends: Vec<Vec<u8>> = sizes
                .iter()
                .enumerate()
                .flat_map(|(k, &l)| [pattern(r, 2 * k, l), pattern(r, 2 * k + 1, l)])
                .collect();
            let mut recvs: Vec<Vec<u8>> = sizes.iter().map(|&l| vec![0u8; l]).collect();
            let mut ops: Vec<Op<'_>> = sends.iter().map(|b| Op::send(peer, b)).collect();
            for (&l, b) in sizes.iter().zip(recvs.iter_mut()) {
                ops.push(Op::sink(peer, l));
                ops.push(Op::recv(peer, b));
            }
            m.exchange(&mut ops, Instant::now() + Duration::from_secs(20)).unwrap();
            assert!(ops.iter().all(|o| o.done_at.is_some()));
            drop(ops);
            for (k, b) in recvs.iter().enumerate() {
                assert!(*b == pattern(peer, 2 * k + 1, sizes[k]), "message after sink {k}");
            }
        });
    }

    #[test]
    fn padded_and_unpadded_frames_interleave_in_one_stream() {
        // Odd small sizes shift the stream so every large frame needs a different padding, and
        // sizes on both sides of the staging/direct-read threshold take both receive paths.
        let sizes = [
            5usize,
            ALIGN_MIN,
            1,
            ALIGN_MIN + 3,
            7,
            DIRECT_READ_MIN - 1,
            13,
            DIRECT_READ_MIN + 5,
            0,
            1 << 20,
            3,
            2 * STAGING + 11,
        ];
        on_every_rank(2, move |mut m| {
            let (r, peer) = (m.rank(), 1 - m.rank());
            let pattern = |who: usize, k: usize, len: usize| -> Vec<u8> {
                (0..len).map(|i| (i * 7 + k * 13 + who * 101) as u8).collect()
            };
            // All in one batch, then again one message per exchange.
            let sends: Vec<Vec<u8>> = sizes.iter().enumerate().map(|(k, &l)| pattern(r, k, l)).collect();
            let mut recvs: Vec<Vec<u8>> = sizes.iter().map(|&l| vec![0u8; l]).collect();
            let mut ops: Vec<Op<'_>> = sends.iter().map(|b| Op::send(peer, b)).collect();
            ops.extend(recvs.iter_mut().map(|b| Op::recv(peer, b)));
            m.exchange(&mut ops, Instant::now() + Duration::from_secs(20)).unwrap();
            drop(ops);
            for (k, b) in recvs.iter().enumerate() {
                assert!(
                    *b == pattern(peer, k, sizes[k]),
                    "batched message {k} ({} bytes)",
                    sizes[k]
                );
            }
            for (k, &len) in sizes.iter().enumerate() {
                let send = pattern(r, k, len);
                let mut recv = vec![0u8; len];
                let mut ops = [Op::send(peer, &send), Op::recv(peer, &mut recv)];
                m.exchange(&mut ops, Instant::now() + Duration::from_secs(20)).unwrap();
                assert!(recv == pattern(peer, k, len), "message {k} ({len} bytes)");
            }
        });
    }

    #[test]
    fn ring_exchange_mixed_sizes_and_many_small_messages() {
        let n = 3;
        on_every_rank(n, move |mut m| {
            let r = m.rank();
            let (right, left) = ((r + 1) % n, (r + n - 1) % n);
            // Sizes straddle the staging/direct-read threshold; zero-length too.
            for len in [0usize, 1, 7, 8, 4096, 65535, 65536, 1 << 20, 3 << 20] {
                let send: Vec<u8> = (0..len)
                    .map(|i| (i as u8).wrapping_mul(31).wrapping_add(r as u8))
                    .collect();
                let mut recv = vec![0u8; len];
                let mut ops = [Op::send(right, &send), Op::recv(left, &mut recv)];
                m.exchange(&mut ops, Instant::now() + Duration::from_secs(20)).unwrap();
                assert!(ops.iter().all(|o| o.done_at.is_some()));
                let want: Vec<u8> = (0..len)
                    .map(|i| (i as u8).wrapping_mul(31).wrapping_add(left as u8))
                    .collect();
                assert_eq!(recv, want, "len {len}");
            }
            // A window of 500 small messages each way in one batch.
            let send = vec![r as u8; 3];
            let mut bufs = vec![[0u8; 3]; 500];
            let mut ops: Vec<Op<'_>> = (0..500).map(|_| Op::send(right, &send)).collect();
            ops.extend(bufs.iter_mut().map(|b| Op::recv(left, b)));
            m.exchange(&mut ops, Instant::now() + Duration::from_secs(20)).unwrap();
            drop(ops);
            assert!(bufs.iter().all(|b| *b == [left as u8; 3]));
        });
    }

    #[test]
    fn overlapped_work_runs_once_while_the_exchange_is_in_flight() {
        let mut meshes = local_mesh(2);
        let mut sender = meshes.pop().unwrap();
        // Rank 1 sends 3 MiB only after 200 ms: rank 0's work runs before its receive completes.
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(200));
            let send = vec![7u8; 3 << 20];
            let mut ops = [Op::send(0, &send)];
            sender
                .exchange(&mut ops, Instant::now() + Duration::from_secs(20))
                .unwrap();
        });
        let mut m = meshes.pop().unwrap();
        let mut recv = vec![0u8; 3 << 20];
        let (mut runs, mut ran_at) = (0, None);
        {
            let mut ops = [Op::recv(1, &mut recv)];
            let mut work = || {
                runs += 1;
                ran_at = Some(Instant::now());
            };
            m.exchange_overlapped(&mut ops, Instant::now() + Duration::from_secs(20), &mut work)
                .unwrap();
            assert!(ops[0].done_at > ran_at, "the work ran after the receive completed");
        }
        assert_eq!(runs, 1);
        assert!(recv.iter().all(|&b| b == 7));
        t.join().unwrap();
        // No ops at all: the work still runs, once.
        let mut runs = 0;
        let mut work = || runs += 1;
        m.exchange_overlapped(&mut [], Instant::now() + Duration::from_secs(1), &mut work)
            .unwrap();
        assert_eq!(runs, 1);
    }

    #[test]
    fn a_tests_own_connections_carry_their_counts_each_from_its_own_port() {
        let mut meshes = local_mesh(2);
        let mut receiver = meshes.pop().unwrap();
        let t = std::thread::spawn(move || {
            let deadline = Instant::now() + Duration::from_secs(20);
            let mut s = receiver.open_streams(0, 3, false, deadline).unwrap();
            s.receive(deadline).unwrap();
            // The mesh still carries messages in step after the test.
            let mut b = [0u8; 3];
            receiver.exchange(&mut [Op::recv(0, &mut b)], deadline).unwrap();
            b
        });
        let mut sender = meshes.pop().unwrap();
        let deadline = Instant::now() + Duration::from_secs(20);
        let mut s = sender.open_streams(1, 3, true, deadline).unwrap();
        let ends = s.ends();
        assert_eq!(ends.len(), 3);
        let ports: std::collections::BTreeSet<u16> = ends.iter().map(|(l, _)| l.port()).collect();
        assert_eq!(ports.len(), 3, "each from its own source port: {ends:?}");
        assert!(
            ends.iter().all(|(_, r)| *r == ends[0].1),
            "all to one listener: {ends:?}"
        );
        let secs = s.send(&[3 << 20, 0, 5], deadline).unwrap();
        assert_eq!(secs.len(), 3);
        assert!(secs.iter().all(|&x| x > 0.0), "{secs:?}");
        sender.exchange(&mut [Op::send(1, b"end")], deadline).unwrap();
        assert_eq!(&t.join().unwrap(), b"end");
    }

    #[test]
    fn a_test_connection_whose_peer_is_gone_fails_at_once() {
        let mut meshes = local_mesh(2);
        let mut receiver = meshes.pop().unwrap();
        let deadline = Instant::now() + Duration::from_secs(30);
        let t = std::thread::spawn(move || {
            // Opens, then leaves without reading.
            let s = receiver.open_streams(0, 2, false, deadline).unwrap();
            drop(s);
        });
        let mut sender = meshes.pop().unwrap();
        let mut s = sender.open_streams(1, 2, true, deadline).unwrap();
        t.join().unwrap();
        let t0 = Instant::now();
        let e = s.send(&[64 << 20, 64 << 20], deadline).unwrap_err().to_string();
        assert!(t0.elapsed() < Duration::from_secs(10), "{e}");
        assert!(e.contains("rank 1 (h1) closed the connection"), "{e}");
    }

    #[test]
    fn receive_times_out_naming_the_peer() {
        let mut meshes = local_mesh(2);
        let mut buf = [0u8; 4];
        let mut ops = [Op::recv(1, &mut buf)];
        let e = meshes[0]
            .exchange(&mut ops, Instant::now() + Duration::from_millis(200))
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("rank 0 (h0): timed out after"), "{e}");
        assert!(e.contains("waiting for rank 1 (h1)"), "{e}");
    }

    #[test]
    fn dead_peer_is_reported_not_waited_for() {
        let mut meshes = local_mesh(2);
        drop(meshes.pop());
        let mut buf = [0u8; 4];
        let mut ops = [Op::recv(1, &mut buf)];
        let t0 = Instant::now();
        let e = meshes[0]
            .exchange(&mut ops, Instant::now() + Duration::from_secs(30))
            .unwrap_err()
            .to_string();
        assert!(t0.elapsed() < Duration::from_secs(5));
        assert!(e.contains("rank 1 (h1) closed the connection"), "{e}");
    }

    #[test]
    fn length_mismatch_is_an_error() {
        let meshes = local_mesh(2);
        let mut it = meshes.into_iter();
        let (mut a, mut b) = (it.next().unwrap(), it.next().unwrap());
        let t = std::thread::spawn(move || {
            let mut ops = [Op::send(0, &[1u8; 5])];
            b.exchange(&mut ops, Instant::now() + Duration::from_secs(5)).unwrap();
            b
        });
        let mut buf = [0u8; 4];
        let mut ops = [Op::recv(1, &mut buf)];
        let e = a
            .exchange(&mut ops, Instant::now() + Duration::from_secs(5))
            .unwrap_err()
            .to_string();
        assert!(e.contains("is 5 bytes where 4 were posted"), "{e}");
        t.join().unwrap();
    }

    #[test]
    fn connection_without_token_is_refused() {
        let token = random_token().unwrap();
        let l0 = TcpListening::bind(IpAddr::V4(Ipv4Addr::LOCALHOST)).unwrap();
        let l1 = TcpListening::bind(IpAddr::V4(Ipv4Addr::LOCALHOST)).unwrap();
        let eps = vec![l0.local_addr(), l1.local_addr()];
        // A stray client with the wrong token connects first.
        let mut stray = TcpStream::connect(eps[0]).unwrap();
        stray.write_all(&hello([0u8; 16], 1, 2)).unwrap();
        let hosts = vec!["h0".to_string(), "h1".to_string()];
        let (e2, h2) = (eps.clone(), hosts.clone());
        let t = std::thread::spawn(move || l1.connect_all(1, &e2, h2, token, Duration::from_secs(5)).map(|_| ()));
        let m0 = l0.connect_all(0, &eps, hosts, token, Duration::from_secs(5));
        assert!(m0.is_ok());
        assert!(t.join().unwrap().is_ok());
        // The stray got no answer: its connection was dropped.
        let mut b = [0u8; 1];
        stray.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        assert_eq!(stray.read(&mut b).unwrap_or(0), 0);
    }
}

//! Device buffers shared between ranks of one node, as NCCL's peer-to-peer transport shares
//! them: a rank exports a buffer ([`super::Gpu::export_peer`]: CUDA IPC's `cuIpcGetMemHandle`,
//! the host stand-in's shared-memory segment), a rank on the same node opens it
//! ([`super::Gpu::open_peer`]: `cuIpcOpenMemHandle`) as a buffer of its own GPU, copies into it
//! with [`super::Gpu::copy`] (`cuMemcpyDtoDAsync`) and closes it with [`super::Gpu::free`]
//! (`cuIpcCloseMemHandle`). The ranks order their copies with the mesh's own messages: the
//! records here, [`Ready`] (where a receiver wants a hop's bytes) and [`Done`] (the copy
//! finished), are what they send each other, each as a [`Control`] message.

/// Bytes of an exported buffer's handle: CUDA's `CUipcMemHandle` is 64.
pub const HANDLE_BYTES: usize = 64;

/// What a rank on the same node needs to open an exported device buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeerHandle {
    /// The driver's handle of the whole allocation (the stand-in's: process, descriptor, inode).
    pub handle: [u8; HANDLE_BYTES],
    /// Where the buffer starts in that allocation (device buffers are page windows in theirs).
    pub offset: u64,
    /// The buffer's length in bytes.
    pub len: u64,
}

/// A receiver's word to the rank that sends it a hop: copy `len` bytes into the buffer `peer`
/// describes, at `at`. `serial` names that export among the receiver's (a buffer freed and
/// allocated again gets a new one), so the sender opens each buffer once and never writes
/// through an old mapping.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ready {
    pub peer: PeerHandle,
    pub serial: u64,
    pub at: u64,
    pub len: u64,
}

/// The sender's word that its copy of a hop finished: the bytes it copied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Done {
    pub bytes: u64,
}

/// A record that is not what the peer should have sent (a different meshrun, or a bug).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("a peer-to-peer {what} record of {got} bytes, expected {want}")]
pub struct BadRecord {
    pub what: &'static str,
    pub got: usize,
    pub want: usize,
}

impl Ready {
    pub const BYTES: usize = HANDLE_BYTES + 5 * 8;

    pub fn encode(&self) -> [u8; Ready::BYTES] {
        let mut b = [0u8; Ready::BYTES];
        b[..HANDLE_BYTES].copy_from_slice(&self.peer.handle);
        let nums = [self.peer.offset, self.peer.len, self.serial, self.at, self.len];
        for (i, n) in nums.iter().enumerate() {
            let o = HANDLE_BYTES + 8 * i;
            b[o..o + 8].copy_from_slice(&n.to_le_bytes());
        }
        b
    }

    pub fn decode(b: &[u8]) -> Result<Ready, BadRecord> {
        if b.len() != Ready::BYTES {
            return Err(BadRecord {
                what: "ready",
                got: b.len(),
                want: Ready::BYTES,
            });
        }
        let num = |i: usize| {
            let o = HANDLE_BYTES + 8 * i;
            let mut n = [0u8; 8];
            n.copy_from_slice(&b[o..o + 8]);
            u64::from_le_bytes(n)
        };
        let mut handle = [0u8; HANDLE_BYTES];
        handle.copy_from_slice(&b[..HANDLE_BYTES]);
        Ok(Ready {
            peer: PeerHandle {
                handle,
                offset: num(0),
                len: num(1),
            },
            serial: num(2),
            at: num(3),
            len: num(4),
        })
    }
}

/// One control message of a hop, as it crosses the mesh: every one the same size, its kind
/// first, so a rank that batches its hops differently from its peer (one transfer of many
/// slices against one transfer per slice) reads them in stream order and keeps each for the
/// hop that needs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Control {
    Ready(Ready),
    Done(Done),
}

impl Control {
    pub const BYTES: usize = 8 + Ready::BYTES;

    pub fn encode(&self) -> [u8; Control::BYTES] {
        let mut b = [0u8; Control::BYTES];
        match self {
            Control::Ready(r) => {
                b[..8].copy_from_slice(&1u64.to_le_bytes());
                b[8..].copy_from_slice(&r.encode());
            }
            Control::Done(d) => {
                b[..8].copy_from_slice(&2u64.to_le_bytes());
                b[8..16].copy_from_slice(&d.bytes.to_le_bytes());
            }
        }
        b
    }

    pub fn decode(b: &[u8]) -> Result<Control, BadRecord> {
        let bad = BadRecord {
            what: "control",
            got: b.len(),
            want: Control::BYTES,
        };
        if b.len() != Control::BYTES {
            return Err(bad);
        }
        let mut n = [0u8; 8];
        n.copy_from_slice(&b[..8]);
        match u64::from_le_bytes(n) {
            1 => Ok(Control::Ready(Ready::decode(&b[8..])?)),
            2 => {
                n.copy_from_slice(&b[8..16]);
                Ok(Control::Done(Done {
                    bytes: u64::from_le_bytes(n),
                }))
            }
            _ => Err(BadRecord {
                what: "control (unknown kind)",
                ..bad
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_and_refuse_a_wrong_length() {
        let mut handle = [0u8; HANDLE_BYTES];
        for (i, b) in handle.iter_mut().enumerate() {
            *b = i as u8 ^ 0xA5;
        }
        let r = Ready {
            peer: PeerHandle {
                handle,
                offset: 4096,
                len: u64::MAX - 1,
            },
            serial: 7,
            at: 1 << 40,
            len: 12345,
        };
        assert_eq!(Ready::decode(&r.encode()), Ok(r));
        let e = Ready::decode(&r.encode()[1..]).unwrap_err();
        assert_eq!(e.to_string(), "a peer-to-peer ready record of 103 bytes, expected 104");
        for c in [Control::Ready(r), Control::Done(Done { bytes: 99 })] {
            assert_eq!(Control::decode(&c.encode()), Ok(c));
        }
        assert!(Control::decode(&[0u8; 9]).is_err());
        assert!(
            Control::decode(&[0u8; Control::BYTES]).is_err(),
            "kind 0 is no control record"
        );
    }
}

//! Device buffers shared between ranks of one node, as NCCL's peer-to-peer transport shares
//! them: a rank exports a buffer ([`super::Gpu::export_peer`]: CUDA IPC's `cuIpcGetMemHandle`,
//! the host stand-in's shared-memory segment), a rank on the same node opens it
//! ([`super::Gpu::open_peer`]: `cuIpcOpenMemHandle`) as a buffer of its own GPU, copies into it
//! with [`super::Gpu::copy`] (`cuMemcpyDtoDAsync`) and closes it with [`super::Gpu::free`]
//! (`cuIpcCloseMemHandle`). The ranks order their copies with the mesh's own messages: the
//! records here, [`Ready`] (where a receiver wants a hop's bytes) and [`Done`] (the copy
//! finished), are what they send each other.

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

impl Done {
    pub const BYTES: usize = 8;

    pub fn encode(&self) -> [u8; Done::BYTES] {
        self.bytes.to_le_bytes()
    }

    pub fn decode(b: &[u8]) -> Result<Done, BadRecord> {
        let bytes: [u8; 8] = b.try_into().map_err(|_| BadRecord {
            what: "done",
            got: b.len(),
            want: Done::BYTES,
        })?;
        Ok(Done {
            bytes: u64::from_le_bytes(bytes),
        })
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
        let d = Done { bytes: 99 };
        assert_eq!(Done::decode(&d.encode()), Ok(d));
        assert!(Done::decode(&[0u8; 9]).is_err());
    }
}

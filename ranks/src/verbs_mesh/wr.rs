//! Work-request ids: which peer, what kind of traffic, and which slot (or op) a completion belongs to.

/// What a work request carries; the kind of a completion picks its handler.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum WrKind {
    /// A fragment of a two-sided message, from a send staging slot.
    Send = 1,
    /// A receive posted on an inbox slot.
    Recv = 2,
    /// A credit write (our consumed count into the peer's credit word).
    Credit = 3,
    /// A measured operation on a test link.
    OneSided = 4,
    /// A zero-copy RDMA write between registered regions.
    DirectWrite = 5,
    /// A receive that takes a zero-copy write's immediate.
    DirectImm = 6,
    /// iWARP (no immediate data): the RDMA write of a fragment's bytes, followed by the SEND of
    /// its notice (a [`WrKind::Send`], whose completion frees the slot); nothing to do on its own.
    Data = 7,
}

impl WrKind {
    fn from_bits(bits: u64) -> Option<WrKind> {
        Some(match bits {
            1 => WrKind::Send,
            2 => WrKind::Recv,
            3 => WrKind::Credit,
            4 => WrKind::OneSided,
            5 => WrKind::DirectWrite,
            6 => WrKind::DirectImm,
            7 => WrKind::Data,
            _ => return None,
        })
    }
}

/// Peer in the high 32 bits, kind in the next 4, slot (or op index) in the low 28.
pub(super) fn wr_id(peer: usize, kind: WrKind, slot: usize) -> u64 {
    ((peer as u64) << 32) | ((kind as u64) << 28) | (slot as u64 & 0x0fff_ffff)
}

/// The peer, kind (None for bits no work request of ours carries) and slot of a work request id.
pub(super) fn decode(wr: u64) -> (usize, Option<WrKind>, usize) {
    (
        (wr >> 32) as usize,
        WrKind::from_bits((wr >> 28) & 0xf),
        (wr & 0x0fff_ffff) as usize,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_round_trip_for_every_kind() {
        for kind in [
            WrKind::Send,
            WrKind::Recv,
            WrKind::Credit,
            WrKind::OneSided,
            WrKind::DirectWrite,
            WrKind::DirectImm,
            WrKind::Data,
        ] {
            for (peer, slot) in [(0, 0), (1, 15), (4095, 0x0fff_ffff)] {
                assert_eq!(decode(wr_id(peer, kind, slot)), (peer, Some(kind), slot));
            }
        }
        assert_eq!(decode(0).1, None, "kind 0 is no work request of ours");
    }
}

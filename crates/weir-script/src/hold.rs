//! The parts of a TLS ClientHello that spans TCP segments, held until the whole is in (as
//! nfqws2 holds them): the instances then act on one packet carrying the whole hello (the
//! first part's headers), so `multisplit` at `midsld` splits the name wherever the client's
//! segments happened to cut it. The held parts are dropped where they come (the scripts
//! took them) and sent on later: as they were when nothing acts on the whole, or when the
//! reassembly gives up (a refusal, the client retransmitting a held part, too many parts).
//! What is held is bounded by the reassembly's limits (per flow and in all) and by
//! [`MAX_PARTS`].

use crate::desync;

/// The most parts of one hello held.
pub const MAX_PARTS: usize = 64;

/// One held part: its TCP sequence number and the IP packet as it came.
#[derive(Clone, Debug)]
pub(crate) struct Part {
    pub seq: u32,
    pub packet: Vec<u8>,
}

/// A flow's held parts.
#[derive(Clone, Debug, Default)]
pub(crate) struct Held {
    /// The sequence number of the hello's first byte.
    pub base: u32,
    pub parts: Vec<Part>,
}

impl Held {
    /// Whether a part with sequence number `seq` is held already (the client sends it
    /// again: it waited long enough, stop holding).
    pub fn has(&self, seq: u32) -> bool {
        self.parts.iter().any(|p| p.seq == seq)
    }

    /// The held packets as they came, in sequence order; nothing held after.
    pub fn release(&mut self) -> Vec<Vec<u8>> {
        let mut parts = std::mem::take(&mut self.parts);
        parts.sort_by_key(|p| p.seq.wrapping_sub(self.base));
        parts.into_iter().map(|p| p.packet).collect()
    }

    /// One packet with the whole hello: the headers of the part where it starts (held, or
    /// `last`, the packet that completed it) and `hello` as the payload.
    pub fn join(&self, last: (u32, &[u8]), hello: &[u8]) -> Option<Vec<u8>> {
        let first = self
            .parts
            .iter()
            .map(|p| (p.seq, &p.packet[..]))
            .chain(std::iter::once(last))
            .find(|(seq, _)| *seq == self.base)?;
        desync::with_payload(first.1, hello)
    }
}

//! What a SYN proxy keeps per connection (Linux's `struct nf_conn_synproxy` extension), and
//! the sequence shift it sets (`nf_ct_seqadj_init`).
//!
//! A SYN proxy answers a client's SYN itself with a SYN cookie and opens the connection to the
//! server only when the client's ACK proves the cookie. The server then picks its own initial
//! sequence number: the proxy shifts the server's sequence numbers (and timestamps) by a
//! constant, for the connection's life, so that the client sees the numbers of the cookie.
//! The protocol is the engine's (`weir_engine::synproxy`); this is its state.

use crate::{Conntrack, Dir, EntryId};

/// A proxied connection's state.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SynproxyExt {
    /// The cookie: the initial sequence number the client was given.
    pub isn: u32,
    /// The timestamp the client was given (its `TSecr` in the SYN sent to the server).
    pub its: u32,
    /// The server's timestamps less the client's view of them.
    pub tsoff: u32,
}

impl<X: Copy + Default> Conntrack<X> {
    /// A proxied connection's state (None: not proxied, or no such entry).
    pub fn synproxy(&self, id: EntryId) -> Option<SynproxyExt> {
        self.get(id)?;
        self.synproxy.get(&id.0).copied()
    }

    /// Set a connection's SYN proxy state (the entry must exist).
    pub fn set_synproxy(&mut self, id: EntryId, x: SynproxyExt) {
        if self.get(id).is_some() {
            self.synproxy.insert(id.0, x);
        }
    }

    /// Linux `nf_ct_seqadj_init`: the sequence numbers of direction `d` shifted by `off`
    /// from now on, whatever their position (0: nothing changes).
    pub fn seqadj_init(&mut self, id: EntryId, d: Dir, off: i32) {
        if off == 0 || self.get(id).is_none() {
            return;
        }
        self.entries[id.0 as usize].tcp.ct_status |= crate::entry::S_SEQADJ;
        let o = &mut self.seqadj.entry(id.0).or_default()[d as usize];
        o.before = off;
        o.after = off;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Config;
    use weir_wire::{LinkType, PacketMeta};

    fn syn() -> Vec<u8> {
        weir_wire::build::tcp4(
            [198, 18, 0, 1].into(),
            [198, 18, 1, 1].into(),
            40000,
            80,
            0x02,
            b"",
        )
    }

    #[test]
    fn state_and_shift_live_and_die_with_the_entry() {
        let mut ct: Conntrack<()> = Conntrack::new(Config::default());
        let f = syn();
        let pm = PacketMeta::parse(&f, LinkType::Ethernet);
        let crate::Track::New(p) = ct.track(&pm, &f, 1) else {
            panic!("a SYN makes a new connection")
        };
        let id = ct.confirm(p, 1).unwrap();
        assert_eq!(ct.synproxy(id), None);
        let x = SynproxyExt {
            isn: 7,
            its: 8,
            tsoff: 9,
        };
        ct.set_synproxy(id, x);
        assert_eq!(ct.synproxy(id), Some(x));
        ct.seqadj_init(id, Dir::Reply, 0);
        assert_eq!(ct.seq_offset(id, Dir::Reply, 100), 0);
        ct.seqadj_init(id, Dir::Reply, -5);
        assert_eq!(ct.seq_offset(id, Dir::Reply, 100), -5);
        assert_eq!(ct.seq_offset(id, Dir::Reply, 1), -5);
        assert_eq!(ct.seq_offset(id, Dir::Original, 100), 0);
        assert!(ct.remove(id));
        // a new connection in the same slot starts clean
        let crate::Track::New(p) = ct.track(&pm, &f, 2) else {
            panic!("a SYN makes a new connection")
        };
        let id2 = ct.confirm(p, 2).unwrap();
        assert_eq!(id2, id);
        assert_eq!(ct.synproxy(id2), None);
        assert_eq!(ct.seq_offset(id2, Dir::Reply, 100), 0);
    }
}

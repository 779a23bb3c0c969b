//! Adjacencies: what the route cache keeps in a connection, so that its later packets need
//! neither the FIB, nor the neighbour table, nor the reverse path filter.
//!
//! An adjacency is the port a connection's direction arrives on (a packet of it arriving on
//! another port is routed and filtered again, as Linux's route cache keeps the input
//! interface), the port it leaves by, and the slot of its next hop's MAC in the neighbour
//! table (so a neighbour whose MAC changes takes its connections along).

use crate::fib::AddrMap;

/// The most adjacencies a router keeps for its connections (a connection holds a `u16`).
pub const MAX_ADJACENCIES: usize = u16::MAX as usize - 1;

/// The slot of an adjacency whose next hop's MAC is not known, on a router that does not
/// resolve them: the frame keeps its destination MAC.
pub const KEEP_MAC: u32 = u32::MAX;

/// One adjacency.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Adj {
    pub in_port: usize,
    pub port: usize,
    pub slot: u32,
}

/// The adjacencies made so far, each with its index (what connections keep).
#[derive(Clone, Default)]
pub struct Adjacencies {
    adjs: Vec<Adj>,
    index: AddrMap<Adj, u16>,
}

impl Adjacencies {
    /// The index of an adjacency, made on first use (None when [`MAX_ADJACENCIES`] are made:
    /// the connection is not cached).
    pub fn index(&mut self, adj: Adj) -> Option<u16> {
        if let Some(&i) = self.index.get(&adj) {
            return Some(i);
        }
        if self.adjs.len() >= MAX_ADJACENCIES {
            return None;
        }
        let i = self.adjs.len() as u16;
        self.adjs.push(adj);
        self.index.insert(adj, i);
        Some(i)
    }

    /// The adjacency of an index a connection kept.
    #[inline]
    pub fn get(&self, i: u16) -> Option<Adj> {
        self.adjs.get(i as usize).copied()
    }

    pub fn len(&self) -> usize {
        self.adjs.len()
    }

    pub fn is_empty(&self) -> bool {
        self.adjs.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_index_per_adjacency() {
        let mut t = Adjacencies::default();
        let a = Adj {
            in_port: 0,
            port: 1,
            slot: 3,
        };
        let b = Adj { slot: 4, ..a };
        let c = Adj { in_port: 2, ..a };
        let (ia, ib, ic) = (
            t.index(a).unwrap(),
            t.index(b).unwrap(),
            t.index(c).unwrap(),
        );
        assert_eq!((ia, ib, ic), (0, 1, 2));
        assert_eq!(t.index(a), Some(0));
        assert_eq!(t.get(ib), Some(b));
        assert_eq!(t.get(9), None);
        assert_eq!(t.len(), 3);
    }
}

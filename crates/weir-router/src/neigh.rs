//! The neighbour table: the MACs of next hops and of hosts on the links, configured or
//! learnt from ARP and neighbour discovery, bounded as Linux bounds its own.
//!
//! A neighbour has a *slot*: its MAC changes in place, so the adjacencies that name the slot
//! (and the connections that cached them) follow a neighbour whose MAC changed. With several
//! workers, what one learns reaches the others through a [`SharedNeighbours`] (ARP reaches one
//! worker only): each keeps its own table for the per-frame lookup and merges the shared one
//! when its generation moves.

use crate::fib::AddrMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use weir_wire::{Addr, Mac};

/// The most neighbours a table learns (Linux's `gc_thresh3` bounds its table the same way):
/// a sender on a link cannot grow the table without end.
pub const MAX_NEIGHBOURS: usize = 65_536;

/// How often the router asks for the same unknown neighbour (ARP request, solicitation).
pub const ASK_PERIOD_NS: u64 = 1_000_000_000;

/// Neighbours learnt by any worker, for the others to merge.
#[derive(Default)]
pub struct SharedNeighbours {
    map: Mutex<AddrMap<Addr, Mac>>,
    gen: AtomicU64,
}

impl SharedNeighbours {
    /// How many times something new was learnt.
    pub fn generation(&self) -> u64 {
        self.gen.load(Ordering::Acquire)
    }
}

/// A neighbour table.
#[derive(Clone, Default)]
pub struct Neighbours {
    /// Neighbours by address: the slot of their MAC.
    slot_of: AddrMap<Addr, u32>,
    /// The MACs, changed in place.
    macs: Vec<Mac>,
    /// New neighbours not learnt because the table was full.
    refused: u64,
    /// When the router last asked for an unknown neighbour, by address (bounded with the
    /// table: cleared when it grows past it).
    asked: AddrMap<Addr, u64>,
    shared: Option<Arc<SharedNeighbours>>,
    seen: u64,
}

impl Neighbours {
    /// Set a neighbour's MAC; whether it changed. A new neighbour beyond
    /// [`MAX_NEIGHBOURS`] is not learnt (and counted).
    pub fn set(&mut self, a: Addr, mac: Mac) -> bool {
        match self.slot_of.get(&a) {
            Some(&slot) => std::mem::replace(&mut self.macs[slot as usize], mac) != mac,
            None if self.macs.len() < MAX_NEIGHBOURS => {
                self.slot_of.insert(a, self.macs.len() as u32);
                self.macs.push(mac);
                true
            }
            None => {
                self.refused += 1;
                false
            }
        }
    }

    /// Whether another neighbour fits (or `a` is known already).
    pub fn fits(&self, a: Addr) -> bool {
        self.macs.len() < MAX_NEIGHBOURS || self.slot_of.contains_key(&a)
    }

    /// Learn a neighbour (and tell the other workers when it is news).
    pub fn learn(&mut self, a: Addr, mac: Mac) {
        if self.set(a, mac) {
            if let Some(sh) = &self.shared {
                if let Ok(mut m) = sh.map.lock() {
                    m.insert(a, mac);
                }
                sh.gen.fetch_add(1, Ordering::Release);
            }
        }
    }

    /// The slot of a neighbour.
    #[inline]
    pub fn slot(&self, a: Addr) -> Option<u32> {
        self.slot_of.get(&a).copied()
    }

    /// The MAC in a slot.
    #[inline]
    pub fn mac_at(&self, slot: u32) -> Mac {
        self.macs[slot as usize]
    }

    /// A neighbour's MAC.
    pub fn mac(&self, a: Addr) -> Option<Mac> {
        self.slot(a).map(|s| self.mac_at(s))
    }

    pub fn len(&self) -> usize {
        self.macs.len()
    }

    pub fn is_empty(&self) -> bool {
        self.macs.is_empty()
    }

    /// New neighbours not learnt because the table was full.
    pub fn refused(&self) -> u64 {
        self.refused
    }

    /// Share what this table learns with other workers' (and take in theirs).
    pub fn share(&mut self, shared: Arc<SharedNeighbours>) {
        self.shared = Some(shared);
    }

    /// Take in what the other workers learnt (an atomic load when nothing changed).
    pub fn sync(&mut self) {
        let Some(sh) = self.shared.clone() else {
            return;
        };
        let g = sh.generation();
        if g != self.seen {
            if let Ok(m) = sh.map.lock() {
                let learnt: Vec<_> = m.iter().map(|(k, v)| (*k, *v)).collect();
                drop(m);
                for (a, mac) in learnt {
                    self.set(a, mac);
                }
            }
            self.seen = g;
        }
    }

    /// Whether to ask for an unknown neighbour now (at most once per [`ASK_PERIOD_NS`]);
    /// remembers that it asked.
    pub fn ask(&mut self, a: Addr, now: u64) -> bool {
        if self.asked.len() >= MAX_NEIGHBOURS && !self.asked.contains_key(&a) {
            self.asked.clear();
        }
        let last = self.asked.entry(a).or_insert(0);
        if *last != 0 && now.saturating_sub(*last) < ASK_PERIOD_NS {
            return false;
        }
        *last = now.max(1);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounded_and_changed_in_place() {
        let mut n = Neighbours::default();
        let m1 = Mac([2, 0, 0, 0, 0, 1]);
        for i in 0..MAX_NEIGHBOURS as u32 {
            assert!(n.set(Addr::v4(0xc612_0000 + i), m1));
        }
        // a new one beyond the bound is not learnt, and counted; a known one still changes
        assert!(!n.set(Addr::v4(0xc613_0001), m1));
        assert_eq!(n.mac(Addr::v4(0xc613_0001)), None);
        assert_eq!(n.refused(), 1);
        let slot = n.slot(Addr::v4(0xc612_0000)).unwrap();
        let m2 = Mac([2, 0, 0, 0, 0, 2]);
        assert!(n.set(Addr::v4(0xc612_0000), m2));
        assert!(
            !n.set(Addr::v4(0xc612_0000), m2),
            "the same MAC again: no change"
        );
        assert_eq!(n.slot(Addr::v4(0xc612_0000)), Some(slot), "in place");
        assert_eq!(n.mac_at(slot), m2);
        // an IPv6 address with the same bits is another neighbour
        assert_eq!(n.mac(Addr::v6(0xc612_0000)), None);
    }

    #[test]
    fn shared_between_workers() {
        let shared = Arc::new(SharedNeighbours::default());
        let (mut w0, mut w1) = (Neighbours::default(), Neighbours::default());
        w0.share(shared.clone());
        w1.share(shared.clone());
        let (a, m) = (Addr::v6(0x2001_0db8 << 96 | 7), Mac([2, 0, 0, 0, 0, 7]));
        w1.sync();
        assert_eq!(w1.mac(a), None);
        w0.learn(a, m);
        w1.sync();
        assert_eq!(w1.mac(a), Some(m));
        // learning it again changes nothing: no new generation
        let g = shared.generation();
        w0.learn(a, m);
        assert_eq!(shared.generation(), g);
    }

    #[test]
    fn asks_once_a_second() {
        let mut n = Neighbours::default();
        let a = Addr::v4(5);
        assert!(n.ask(a, 10));
        assert!(!n.ask(a, 10 + ASK_PERIOD_NS - 1));
        assert!(n.ask(a, 10 + ASK_PERIOD_NS));
        assert!(n.ask(Addr::v4(6), 10));
    }
}

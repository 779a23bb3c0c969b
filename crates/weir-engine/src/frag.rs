//! Virtual reassembly of IP fragments for connection tracking (VPP's "shallow virtual
//! reassembly", `ip4-sv-reass`): what the first fragment of a datagram decided is kept, and
//! the later fragments of the same datagram follow it.
//!
//! Linux reassembles a datagram before connection tracking (`nf_defrag`, priority -400),
//! runs the whole datagram through the chains once, and fragments it again on output. Weir
//! forwards fragments one by one instead: the first fragment (offset 0, with the transport
//! header) takes connection tracking, NAT and every chain as any packet does; when it leaves
//! the host ([`crate::stateful::Stateful::finish`]) its connection and direction are kept
//! here under the datagram's key (addresses, identification, and for IPv4 the protocol, as
//! the kernel's fragment queues are keyed). A later fragment of that datagram takes no chain:
//! it gets the connection and the NAT translation of its first (addresses only: the transport
//! header and its checksum are in the first fragment). A later fragment with no first kept
//! here (its first was dropped, or it came first) is dropped and counted; one that came first
//! can be held ([`Held`]) until its first has passed, as the kernel's reassembly waits for it.
//!
//! The table is bounded: entries expire after the reassembly timeout (Linux's
//! `ipfrag_time`, 30 s) and, when it is full, the oldest entry makes room (counted).

use std::collections::{HashMap, VecDeque};
use weir_conntrack::{CtInfo, Dir, EntryId, Tuple};
use weir_wire::{LinkType, PacketMeta, L3};

/// A datagram: addresses, identification, and the protocol for IPv4 (an IPv6 later
/// fragment names only the header after the fragment header).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct Key {
    src: u128,
    dst: u128,
    id: u32,
    proto: u8,
    v6: bool,
}

impl Key {
    pub fn of(pm: &PacketMeta) -> Key {
        let v6 = pm.l3 == L3::Ipv6;
        Key {
            src: pm.saddr,
            dst: pm.daddr,
            id: pm.frag_id,
            proto: if v6 { 0 } else { pm.l4proto },
            v6,
        }
    }
}

/// What the later fragments of a datagram get.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Follow {
    /// The first fragment was not tracked (`notrack`).
    Untracked,
    /// The first fragment's connection and direction, with the direction's tuple (checked
    /// again, in case the entry was ended and its slot reused).
    Entry {
        id: EntryId,
        dir: Dir,
        info: CtInfo,
        tuple: Tuple,
    },
}

/// The datagrams whose first fragment passed.
#[derive(Clone, Debug)]
pub struct Table {
    map: HashMap<Key, (Follow, u64, u64)>,
    /// Insertion order: (key, generation); a key inserted again has a newer generation.
    order: VecDeque<(Key, u64)>,
    gen: u64,
    cap: usize,
    timeout_ns: u64,
    /// Entries pushed out by newer ones while not expired.
    pub evicted: u64,
}

impl Table {
    /// Linux's `ipfrag_time`.
    pub const TIMEOUT_NS: u64 = 30_000_000_000;
    pub const CAPACITY: usize = 16384;

    pub fn new(cap: usize, timeout_ns: u64) -> Table {
        Table {
            map: HashMap::new(),
            order: VecDeque::new(),
            gen: 0,
            cap: cap.max(1),
            timeout_ns,
            evicted: 0,
        }
    }

    pub fn len(&self) -> usize {
        self.map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Drop the oldest entry of the insertion order (if it is still the current one).
    fn pop_oldest(&mut self, now_ns: u64, only_expired: bool) -> bool {
        let Some(&(k, g)) = self.order.front() else {
            return false;
        };
        match self.map.get(&k) {
            Some(&(_, exp, eg)) if eg == g => {
                if only_expired && exp > now_ns {
                    return false;
                }
                if exp > now_ns {
                    self.evicted += 1;
                }
                self.map.remove(&k);
            }
            _ => {}
        }
        self.order.pop_front();
        true
    }

    /// Keep what a datagram's first fragment got.
    pub fn insert(&mut self, k: Key, f: Follow, now_ns: u64) {
        while self.pop_oldest(now_ns, true) {}
        let exp = now_ns.saturating_add(self.timeout_ns);
        if let Some(e) = self.map.get_mut(&k) {
            // the same datagram's first fragment again (a retransmission, an identification
            // used again): its place in the order stays
            e.0 = f;
            e.1 = exp;
            return;
        }
        while self.map.len() >= self.cap && self.pop_oldest(now_ns, false) {}
        self.gen += 1;
        self.map.insert(k, (f, exp, self.gen));
        self.order.push_back((k, self.gen));
        // stale order slots (entries found expired by `get`) are dropped as they reach the
        // front; keep the queue within twice the table
        while self.order.len() > 2 * self.cap && self.pop_oldest(now_ns, false) {}
    }

    /// What a later fragment of datagram `k` follows, if its first passed and has not
    /// expired.
    pub fn get(&mut self, k: &Key, now_ns: u64) -> Option<Follow> {
        let &(f, exp, _) = self.map.get(k)?;
        if exp <= now_ns {
            self.map.remove(k);
            return None;
        }
        Some(f)
    }
}

impl Default for Table {
    fn default() -> Table {
        Table::new(Table::CAPACITY, Table::TIMEOUT_NS)
    }
}

/// Later fragments that came before the first fragment of their datagram (the kernel
/// reassembles fragments in any order; virtual reassembly needs the first's verdict). They
/// are held, as they arrived, each with a tag `T` of its caller's (where it was read), until
/// the first has passed (then they follow it, [`Held::ready`]) or for [`Held::WAIT_NS`] at
/// most (then they are dropped and counted), bounded in frames.
pub struct Held<T> {
    /// By datagram: when its first held fragment came, and its fragments (tag, frame).
    #[allow(clippy::type_complexity)]
    by_key: HashMap<Key, (u64, Vec<(T, Vec<u8>)>)>,
    frames: usize,
}

impl<T> Default for Held<T> {
    fn default() -> Self {
        Held {
            by_key: HashMap::new(),
            frames: 0,
        }
    }
}

impl<T> Held<T> {
    pub const WAIT_NS: u64 = 1_000_000_000;
    pub const MAX_FRAMES: usize = 1024;
    /// IPv4's largest datagram in 1280-byte pieces, and some.
    pub const MAX_PER_DATAGRAM: usize = 64;

    pub fn is_empty(&self) -> bool {
        self.frames == 0
    }

    /// Frames held.
    pub fn frames(&self) -> usize {
        self.frames
    }

    /// Hold `frame` (of link type `link`); Some(1): it was dropped to stay in bounds. (What
    /// waited too long goes in [`Held::ready`], not here for every frame.)
    pub fn hold(&mut self, tag: T, frame: Vec<u8>, link: LinkType, now: u64) -> Option<usize> {
        let key = Key::of(&PacketMeta::parse(&frame, link));
        let full = self.frames >= Self::MAX_FRAMES;
        let e = self.by_key.entry(key).or_insert((now, Vec::new()));
        if full || e.1.len() >= Self::MAX_PER_DATAGRAM {
            if e.1.is_empty() {
                self.by_key.remove(&key);
            }
            return Some(1);
        }
        e.1.push((tag, frame));
        self.frames += 1;
        None
    }

    /// The fragments held for datagram `key` (e.g. its first went to another worker).
    pub fn take(&mut self, key: &Key) -> Vec<(T, Vec<u8>)> {
        let v = self.by_key.remove(key).map(|e| e.1).unwrap_or_default();
        self.frames -= v.len();
        v
    }

    /// Take out what waited longer than [`Held::WAIT_NS`] (to be dropped).
    pub fn expire(&mut self, now: u64) -> Vec<(T, Vec<u8>)> {
        let old: Vec<Key> = self
            .by_key
            .iter()
            .filter(|(_, (since, _))| now.saturating_sub(*since) >= Self::WAIT_NS)
            .map(|(k, _)| *k)
            .collect();
        old.iter().flat_map(|k| self.take(k)).collect()
    }

    /// The held fragments whose first has passed (`frags` keeps it now), in arrival order
    /// per datagram, and those that waited too long (to be dropped).
    #[allow(clippy::type_complexity)]
    pub fn ready(&mut self, frags: &mut Table, now: u64) -> (Vec<(T, Vec<u8>)>, Vec<(T, Vec<u8>)>) {
        let expired = self.expire(now);
        let keys: Vec<_> = self
            .by_key
            .keys()
            .copied()
            .filter(|k| frags.get(k, now).is_some())
            .collect();
        let mut out = Vec::new();
        for k in keys {
            if let Some((_, v)) = self.by_key.remove(&k) {
                self.frames -= v.len();
                out.extend(v);
            }
        }
        (out, expired)
    }

    /// Take out everything held (their first never came: to be dropped).
    pub fn clear(&mut self) -> Vec<(T, Vec<u8>)> {
        self.frames = 0;
        self.by_key.drain().flat_map(|(_, (_, v))| v).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(id: u32) -> Key {
        Key {
            src: 1,
            dst: 2,
            id,
            proto: 17,
            v6: false,
        }
    }

    #[test]
    fn bounded_expiring_and_oldest_out() {
        let mut t = Table::new(3, 100);
        for i in 0..3 {
            t.insert(key(i), Follow::Untracked, 10);
        }
        assert_eq!(t.get(&key(0), 50), Some(Follow::Untracked));
        // full: the oldest goes, counted
        t.insert(key(3), Follow::Untracked, 20);
        assert_eq!(t.len(), 3);
        assert_eq!(t.evicted, 1);
        assert_eq!(t.get(&key(0), 50), None);
        assert_eq!(t.get(&key(3), 50), Some(Follow::Untracked));
        // expired at its timeout; expired entries make room without counting
        assert_eq!(t.get(&key(1), 110), None);
        t.insert(key(4), Follow::Untracked, 115);
        assert_eq!(t.evicted, 1);
        assert_eq!(t.get(&key(3), 115), Some(Follow::Untracked));
        // a key inserted again keeps one entry and its place, with the new expiry
        for _ in 0..10 {
            t.insert(key(4), Follow::Untracked, 116);
        }
        assert_eq!((t.len(), t.order.len(), t.evicted), (2, 2, 1));
        assert_eq!(t.get(&key(4), 200), Some(Follow::Untracked));
        assert_eq!(t.get(&key(4), 216), None);
    }
}

//! The hash index: the tuple hash, open addressing with linear probing over `u32` slots
//! (entry index, direction and a tag from the hash), lookups, insertion and backward-shift
//! deletion.

use crate::entry::S_V6;
use crate::{Conntrack, Dir, EntryId, Tuple};

#[inline]
fn mix(a: u64, b: u64) -> u64 {
    let r = (a as u128).wrapping_mul(b as u128);
    (r as u64) ^ ((r >> 64) as u64)
}

impl<X: Copy + Default> Conntrack<X> {
    /// Whether some entry has `t` as its original or reply tuple (for NAT port allocation).
    /// Expired entries not yet collected count as in use.
    pub fn reply_in_use(&self, t: &Tuple) -> bool {
        self.lookup(t, self.hash(t)).is_some()
    }

    /// Look a tuple up without side effects: the entry and the direction `t` matches.
    pub fn find(&self, t: &Tuple) -> Option<(EntryId, Dir)> {
        self.find_hashed(t, self.hash(t))
    }

    /// Mean distance (in slots) between a key's home slot and where it sits, plus one: the
    /// slots a successful lookup reads. For benchmarks and tuning.
    #[doc(hidden)]
    pub fn mean_probe_len(&self) -> f64 {
        let n = self.slots.len();
        let (mut sum, mut cnt) = (0usize, 0usize);
        for (i, &s) in self.slots.iter().enumerate() {
            if s == 0 {
                continue;
            }
            let k = s & self.id_mask;
            let t = self.tuple_of((k - 1) >> 1, ((k - 1) & 1) as usize);
            let home = self.home(self.hash(&t));
            sum += (i + n - home) % n + 1;
            cnt += 1;
        }
        sum as f64 / cnt.max(1) as f64
    }

    pub(crate) fn hash(&self, t: &Tuple) -> u64 {
        let seed = self.cfg.hash_seed;
        let ports = ((t.sport as u64) << 48)
            | ((t.dport as u64) << 32)
            | ((t.zone as u64) << 16)
            | ((t.proto as u64) << 8)
            | t.v6 as u64;
        let a = mix(
            (t.src as u64) ^ 0x9e37_79b9_7f4a_7c15,
            ((t.src >> 64) as u64) ^ seed ^ 0xbf58_476d_1ce4_e5b9,
        );
        let b = mix(
            (t.dst as u64) ^ a ^ 0x94d0_49bb_1331_11eb,
            ((t.dst >> 64) as u64) ^ 0x2545_f491_4f6c_dd1d,
        );
        mix(
            ports ^ b ^ 0xd6e8_feb8_6659_fd93,
            seed ^ 0xa076_1d64_78bd_642f,
        )
    }

    #[inline]
    pub(crate) fn home(&self, h: u64) -> usize {
        (((h >> 32) * self.slots.len() as u64) >> 32) as usize
    }

    pub(crate) fn tuple_of(&self, idx: u32, d: usize) -> Tuple {
        let e = &self.entries[idx as usize];
        let v6 = e.tcp.ct_status & S_V6 != 0;
        let (src, dst) = if v6 {
            let a = &self.v6[e.addr[0] as usize];
            (a[2 * d], a[2 * d + 1])
        } else {
            (e.addr[2 * d] as u128, e.addr[2 * d + 1] as u128)
        };
        Tuple {
            zone: e.zone_id(d),
            src,
            dst,
            sport: e.port[2 * d],
            dport: e.port[2 * d + 1],
            proto: e.tcp.ct_proto,
            v6,
        }
    }

    #[inline]
    fn key_matches(&self, key: u32, t: &Tuple) -> bool {
        let idx = ((key - 1) >> 1) as usize;
        let d = ((key - 1) & 1) as usize;
        let e = &self.entries[idx];
        if e.tcp.ct_proto != t.proto
            || e.port[2 * d] != t.sport
            || e.port[2 * d + 1] != t.dport
            || (e.tcp.ct_status & S_V6 != 0) != t.v6
            || e.zone_id(d) != t.zone
        {
            return false;
        }
        if t.v6 {
            let a = &self.v6[e.addr[0] as usize];
            a[2 * d] == t.src && a[2 * d + 1] == t.dst
        } else {
            e.addr[2 * d] as u128 == t.src && e.addr[2 * d + 1] as u128 == t.dst
        }
    }

    /// The key (`idx * 2 + dir + 1`) holding `t`.
    #[inline]
    fn lookup(&self, t: &Tuple, h: u64) -> Option<u32> {
        let n = self.slots.len();
        let tag = (h as u32) & !self.id_mask;
        let mut i = self.home(h);
        loop {
            let s = self.slots[i];
            if s == 0 {
                return None;
            }
            if s & !self.id_mask == tag && self.key_matches(s & self.id_mask, t) {
                return Some(s & self.id_mask);
            }
            i += 1;
            if i == n {
                i = 0;
            }
        }
    }

    /// [`Conntrack::find`] with the tuple's hash already computed (by
    /// [`Conntrack::prefetch_index`]).
    #[inline]
    pub fn find_hashed(&self, t: &Tuple, h: u64) -> Option<(EntryId, Dir)> {
        self.lookup(t, h).map(|k| {
            (
                EntryId((k - 1) >> 1),
                Dir::from_index(((k - 1) & 1) as usize),
            )
        })
    }

    /// `lookup`, removing the entry found if it has expired.
    pub(crate) fn live_lookup(&mut self, t: &Tuple, h: u64, now: u32) -> Option<u32> {
        let k = self.lookup(t, h)?;
        let idx = (k - 1) >> 1;
        if self.is_expired(&self.entries[idx as usize], now) {
            self.remove_idx(idx);
            self.stats.expired += 1;
            return None;
        }
        Some(k)
    }

    /// A packet's tuple looked up as Linux's `resolve_normal_ct` does in the packet's zone
    /// ([`Conntrack::cur_zone`]; `t` carries its id for the original direction, `h` its
    /// hash): then, when the zone's id for the reply direction differs, with that one; an
    /// entry found must have the packet's zone id in the direction it is found in
    /// (`nf_ct_zone_equal`).
    pub(crate) fn packet_lookup(&mut self, t: &Tuple, h: u64, now: u32) -> Option<u32> {
        let z = self.cur_zone;
        if z == crate::Zone::DEFAULT {
            return self.live_lookup(t, h, now);
        }
        let fits = |s: &Self, k: u32| {
            let (idx, d) = (((k - 1) >> 1) as usize, ((k - 1) & 1) as usize);
            s.entries[idx].zone_id(d) == z.id_for(Dir::from_index(d))
        };
        if let Some(k) = self.live_lookup(t, h, now).filter(|&k| fits(self, k)) {
            return Some(k);
        }
        let zr = z.id_for(Dir::Reply);
        if zr == t.zone {
            return None;
        }
        let t2 = Tuple { zone: zr, ..*t };
        let h2 = self.hash(&t2);
        self.live_lookup(&t2, h2, now).filter(|&k| fits(self, k))
    }

    pub(crate) fn index_insert(&mut self, key: u32, h: u64) {
        let n = self.slots.len();
        let mut i = self.home(h);
        while self.slots[i] != 0 {
            i += 1;
            if i == n {
                i = 0;
            }
        }
        self.slots[i] = ((h as u32) & !self.id_mask) | key;
    }

    pub(crate) fn index_remove(&mut self, key: u32) {
        let idx = (key - 1) >> 1;
        let d = ((key - 1) & 1) as usize;
        let t = self.tuple_of(idx, d);
        let h = self.hash(&t);
        let n = self.slots.len();
        let want = ((h as u32) & !self.id_mask) | key;
        let mut i = self.home(h);
        while self.slots[i] != want {
            debug_assert!(self.slots[i] != 0, "conntrack index lost a key");
            if self.slots[i] == 0 {
                return;
            }
            i += 1;
            if i == n {
                i = 0;
            }
        }
        // Backward-shift deletion.
        self.slots[i] = 0;
        let mut j = i;
        loop {
            j += 1;
            if j == n {
                j = 0;
            }
            let s = self.slots[j];
            if s == 0 {
                break;
            }
            let k = s & self.id_mask;
            let kt = self.tuple_of((k - 1) >> 1, ((k - 1) & 1) as usize);
            let home = self.home(self.hash(&kt));
            // Leave it if its home lies cyclically in (i, j].
            let stays = if i <= j {
                i < home && home <= j
            } else {
                i < home || home <= j
            };
            if !stays {
                self.slots[i] = s;
                self.slots[j] = 0;
                i = j;
            }
        }
    }
}

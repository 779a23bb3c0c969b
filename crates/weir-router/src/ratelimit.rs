//! The rate limits of the ICMP errors a router sends, as Linux's: per destination
//! ([`PeerLimit`], `icmp_ratelimit`) and for the whole router ([`Bucket`],
//! `icmp_msgs_per_sec`). Path MTU discovery ("fragmentation needed", "packet too big") is
//! not limited, as in Linux (`icmpv4_mask_allow`, `icmpv6_mask_allow`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use weir_wire::{Addr, Family};

/// Linux's per-destination limit of ICMP errors (`icmpv4_xrlim_allow`, `icmpv6_xrlim_allow`:
/// `inet_peer_xrlim_allow` with `icmp_ratelimit` 1 s), checked before the router-wide
/// [`Bucket`]: a burst of 6 errors to one address, then one per second (IPv6: more for wider
/// routes, 1 s >> ((128 - prefix length) / 32)). Addresses not heard from for the length of a
/// burst are forgotten when the table is full. One for all the workers, as Linux's
/// `inet_peer` table is global.
#[derive(Default)]
pub struct PeerLimit {
    peers: HashMap<Addr, (u64, u64)>,
}

impl PeerLimit {
    pub const BURST: u64 = 6;
    pub const MAX: usize = 8192;
    pub const SECOND: u64 = 1_000_000_000;

    /// The limit shared by the workers (a worker that panicked holding it left it usable).
    pub fn shared(p: &Mutex<PeerLimit>) -> std::sync::MutexGuard<'_, PeerLimit> {
        p.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The period Linux gives errors to a destination: IPv6 by the prefix length of the
    /// route to it (`plen`; a host route when none).
    pub fn period(dst: Addr, plen: Option<u8>) -> u64 {
        match dst.family() {
            Family::Ipv4 => Self::SECOND,
            Family::Ipv6 => {
                let plen = plen.unwrap_or(128).min(128) as u64;
                Self::SECOND >> ((128 - plen) >> 5)
            }
        }
    }

    /// Whether an error to `dst` may leave now (`period`: ns per error); takes a token.
    pub fn allow(&mut self, dst: Addr, period: u64, now: u64) -> bool {
        if self.peers.len() >= Self::MAX && !self.peers.contains_key(&dst) {
            let keep = Self::BURST * Self::SECOND;
            self.peers
                .retain(|_, &mut (_, last)| now.saturating_sub(last) < keep);
            if self.peers.len() >= Self::MAX {
                self.peers.clear();
            }
        }
        // a new destination starts with a full burst (Linux dates a new peer a minute back)
        let e = self.peers.entry(dst).or_insert((Self::BURST * period, now));
        let tokens = (e.0 + now.saturating_sub(e.1)).min(Self::BURST * period);
        e.1 = now;
        if tokens >= period {
            e.0 = tokens - period;
            true
        } else {
            e.0 = tokens;
            false
        }
    }
}

/// A token bucket for the ICMP errors the router sends (Linux's `icmp_msgs_per_sec` and
/// `icmp_msgs_burst`: 1000 per second, bursts of 50).
#[derive(Clone, Debug)]
pub struct Bucket {
    tokens: f64,
    at: u64,
    rate: f64,
    burst: f64,
}

impl Bucket {
    pub const RATE: f64 = 1000.0;
    pub const BURST: f64 = 50.0;

    /// The bucket of one worker of `share`: the router's rate and burst divided among them.
    pub fn new(share: u16) -> Bucket {
        let share = share.max(1) as f64;
        let burst = (Bucket::BURST / share).max(1.0);
        Bucket {
            tokens: burst,
            at: 0,
            rate: Bucket::RATE / share,
            burst,
        }
    }

    pub fn take(&mut self, now: u64) -> bool {
        let dt = now.saturating_sub(self.at) as f64 / 1e9;
        self.at = now;
        self.tokens = (self.tokens + dt * self.rate).min(self.burst);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

/// A worker's ICMP limits: its share of the router's bucket, and the per-destination limit
/// all the workers share.
#[derive(Clone)]
pub struct IcmpLimits {
    pub bucket: Bucket,
    pub peers: Arc<Mutex<PeerLimit>>,
}

impl IcmpLimits {
    /// The limits of one worker of `workers`, sharing `peers` with the others.
    pub fn new(workers: u16, peers: Arc<Mutex<PeerLimit>>) -> IcmpLimits {
        IcmpLimits {
            bucket: Bucket::new(workers),
            peers,
        }
    }

    /// Whether an error to `dst` may leave now (`plen`: the prefix length of the route to
    /// it), per destination first, then the router's rate.
    pub fn allow(&mut self, dst: Addr, plen: Option<u8>, now: u64) -> bool {
        let period = PeerLimit::period(dst, plen);
        PeerLimit::shared(&self.peers).allow(dst, period, now) && self.bucket.take(now)
    }
}

impl Default for IcmpLimits {
    fn default() -> Self {
        IcmpLimits::new(1, Arc::default())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn per_destination_then_router_wide() {
        // per destination: a burst of 6, then one a second; others have their own
        let mut pl = PeerLimit::default();
        let s = PeerLimit::SECOND;
        let one = Addr::v4(1);
        assert_eq!((0..10).filter(|_| pl.allow(one, s, 5)).count(), 6);
        assert!(pl.allow(Addr::v4(2), s, 5) && pl.allow(Addr::v6(1), s, 5));
        assert!(!pl.allow(one, s, 5 + s / 2));
        assert!(pl.allow(one, s, 5 + s + s / 2));
        assert!(!pl.allow(one, s, 5 + s + s / 2));
        // IPv6 to an address behind a /64: four a second
        let a6 = Addr::v6(0x2001_0db8 << 96 | 2);
        let mut l = IcmpLimits::default();
        assert_eq!(PeerLimit::period(a6, Some(64)), s / 4);
        assert_eq!((0..10).filter(|_| l.allow(a6, Some(64), 7)).count(), 6);
        assert!(l.allow(a6, Some(64), 7 + s / 4));
        assert!(!l.allow(a6, Some(64), 7 + s / 4));
        // the rate limit: a burst of 50, then 1000 per second
        let mut bk = Bucket::new(1);
        assert_eq!((0..60).filter(|_| bk.take(1)).count(), 50);
        assert!(bk.take(1 + 1_000_000));
        assert!(!bk.take(1 + 1_000_000));
        // shared among two workers
        let bk2 = Bucket::new(2);
        assert_eq!((bk2.burst, bk2.rate), (25.0, 500.0));
    }
}

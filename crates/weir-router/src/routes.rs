//! The routing table: prefixes, each out of a port, directly or through a next hop, looked
//! up by longest prefix ([`crate::fib::Lpm`]).

use crate::fib::Lpm;
use weir_wire::{Addr, Family};

/// A route: a prefix, the port it leaves by and its next hop (None: the destination is on
/// the link).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Route {
    /// The network (host bits clear).
    pub net: Addr,
    pub len: u8,
    pub port: usize,
    pub via: Option<Addr>,
}

impl Route {
    /// A route to `net/len` (its host bits cleared) out of `port`.
    pub fn new(net: Addr, len: u8, port: usize, via: Option<Addr>) -> Route {
        let len = len.min(net.family().bits());
        Route {
            net: net.masked(len),
            len,
            port,
            via,
        }
    }
}

/// Why a routing table cannot be built.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RouteError {
    /// The same prefix twice.
    Twice(Addr, u8),
    /// A next hop of the other family.
    Family(Addr, u8),
}

impl std::fmt::Display for RouteError {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        match self {
            RouteError::Twice(a, l) => write!(f, "route {a}/{l}: configured twice"),
            RouteError::Family(a, l) => {
                write!(f, "route {a}/{l}: the next hop is of the other family")
            }
        }
    }
}

impl std::error::Error for RouteError {}

/// The routes, longest prefix first, and their index by prefix.
#[derive(Clone, Debug, Default)]
pub struct Routes {
    routes: Vec<Route>,
    fib: Lpm<usize>,
}

impl Routes {
    /// A table of these routes; a prefix given twice, or a next hop of the other family, is
    /// refused.
    pub fn new(routes: Vec<Route>) -> Result<Routes, RouteError> {
        let mut t = Routes::default();
        for r in &routes {
            if r.via.is_some_and(|v| v.family() != r.net.family()) {
                return Err(RouteError::Family(r.net, r.len));
            }
            if t.fib.insert(r.net, r.len, 0).is_some() {
                return Err(RouteError::Twice(r.net, r.len));
            }
        }
        t.set(routes);
        Ok(t)
    }

    /// Replace the table (the first of equal prefixes wins).
    pub fn set(&mut self, mut routes: Vec<Route>) {
        routes.sort_by_key(|r| std::cmp::Reverse(r.len));
        self.fib = Lpm::new();
        for (i, r) in routes.iter().enumerate() {
            if self.fib.exact(r.net, r.len).is_none() {
                self.fib.insert(r.net, r.len, i);
            }
        }
        self.routes = routes;
    }

    /// The longest-prefix route to a destination: its index.
    #[inline]
    pub fn lookup(&self, dst: Addr) -> Option<usize> {
        self.fib.get(dst).copied()
    }

    /// The routes, longest prefix first.
    pub fn iter(&self) -> impl Iterator<Item = &Route> {
        self.routes.iter()
    }

    /// The route at an index of [`Routes::lookup`].
    #[inline]
    pub fn get(&self, i: usize) -> &Route {
        &self.routes[i]
    }

    pub fn all(&self) -> &[Route] {
        &self.routes
    }

    pub fn len(&self) -> usize {
        self.fib.len()
    }

    pub fn is_empty(&self) -> bool {
        self.fib.is_empty()
    }

    /// Distinct prefix lengths of a family (the most probes a lookup makes).
    pub fn lengths(&self, f: Family) -> usize {
        self.fib.lengths(f)
    }

    /// Whether an address is on the link of a port: a route through it without a next hop
    /// holds it (IPv6 link-local addresses are on every link).
    pub fn on_link(&self, port: usize, a: Addr) -> bool {
        a.is_link_local()
            || self
                .routes
                .iter()
                .any(|r| r.port == port && r.via.is_none() && a.within(r.net, r.len))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn a(s: &str) -> Addr {
        s.parse().unwrap()
    }

    #[test]
    fn longest_prefix_and_links() {
        let t = Routes::new(vec![
            Route::new(a("0.0.0.0"), 0, 1, Some(a("198.19.0.1"))),
            Route::new(a("198.18.30.7"), 24, 0, None),
            Route::new(a("2001:db8:30::"), 64, 0, None),
        ])
        .unwrap();
        let r = t.get(t.lookup(a("198.18.30.9")).unwrap());
        assert_eq!(
            (r.net, r.len, r.port, r.via),
            (a("198.18.30.0"), 24, 0, None)
        );
        assert_eq!(t.get(t.lookup(a("203.0.113.1")).unwrap()).port, 1);
        assert_eq!(t.lookup(a("2001:db8:31::1")), None);
        assert!(t.on_link(0, a("198.18.30.2")));
        assert!(!t.on_link(1, a("198.18.30.2")));
        assert!(!t.on_link(0, a("198.18.31.2")));
        assert!(!t.on_link(0, Addr::v6(a("198.18.30.2").bits())));
        assert!(t.on_link(1, a("fe80::5")));
        assert!(!t.on_link(1, a("2001:db8:30::5")));
        assert_eq!(
            (t.len(), t.lengths(Family::Ipv4), t.lengths(Family::Ipv6)),
            (3, 2, 1)
        );
        assert_eq!(
            Routes::new(vec![
                Route::new(a("198.18.0.0"), 16, 0, None),
                Route::new(a("198.18.1.1"), 16, 1, None)
            ])
            .unwrap_err()
            .to_string(),
            "route 198.18.0.0/16: configured twice"
        );
        assert!(matches!(
            Routes::new(vec![Route::new(
                a("198.18.0.0"),
                16,
                0,
                Some(a("2001:db8::1"))
            )]),
            Err(RouteError::Family(..))
        ));
    }
}

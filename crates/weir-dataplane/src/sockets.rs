//! The host's sockets as the engine asks them (`socket` keys, `tproxy`): the kernel's own
//! lookup over sock_diag ([`weir_io::sockdiag`]), each answer kept [`TTL`] so that the
//! packets of one connection cost one system call per period, not one each.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};
use weir_engine::socket::{SockInfo, SockQuery, Sockets};
use weir_io::sockdiag::{Proto, SockDiag};

/// How long an answer is kept.
pub const TTL: Duration = Duration::from_millis(100);
/// The most answers kept (then the cache starts again).
const CACHE_MAX: usize = 16_384;

struct Inner {
    diag: SockDiag,
    cache: HashMap<SockQuery, (Option<SockInfo>, Instant)>,
}

/// One worker's lookups (the lock is the worker's alone).
pub struct KernelSockets {
    inner: Mutex<Inner>,
}

impl KernelSockets {
    pub fn open() -> std::io::Result<KernelSockets> {
        Ok(KernelSockets {
            inner: Mutex::new(Inner {
                diag: SockDiag::open()?,
                cache: HashMap::new(),
            }),
        })
    }
}

impl Sockets for KernelSockets {
    fn lookup(&self, q: &SockQuery) -> Option<SockInfo> {
        let mut g = self.inner.lock().ok()?;
        let now = Instant::now();
        if let Some((a, at)) = g.cache.get(q) {
            if now.duration_since(*at) < TTL {
                return *a;
            }
        }
        let proto = match q.proto {
            6 => Proto::Tcp,
            17 => Proto::Udp,
            _ => return None,
        };
        let found = g
            .diag
            .lookup(
                proto,
                SocketAddr::new(q.remote.0, q.remote.1),
                SocketAddr::new(q.local.0, q.local.1),
                q.ifindex,
            )
            // (an error, a timeout: no socket, as the kernel's lookup that finds none)
            .unwrap_or(None)
            .map(|f| SockInfo {
                transparent: f.transparent,
                mark: f.mark,
                wildcard: f.wildcard,
                state: f.state,
            });
        if g.cache.len() >= CACHE_MAX {
            g.cache.clear();
        }
        g.cache.insert(*q, (found, now));
        found
    }
}

//! `limit`'s token bucket (the kernel's `nft_limit`), shared by rule limits, named limit
//! objects and per-element limits of sets filled from the packet path.

use crate::eval::Bucket;
use weir_lang::ir;

/// The kernel's nft_limit token bucket, in nanoseconds: a packet costs `unit / rate` (bytes:
/// `unit * len / rate`); the bucket holds `burst` packets' worth (bytes: `unit * (rate + burst)
/// / rate`) and starts full. Returns whether the rule goes on: within the rate, or for `over`,
/// beyond it.
pub(crate) fn limit_pass(b: &mut Bucket, l: &ir::Limit, now_ns: u64, bytes: u64) -> bool {
    let nsecs = l.unit.seconds().saturating_mul(1_000_000_000);
    let rate = l.rate.max(1);
    let (max, cost) = if l.bytes {
        let max =
            (nsecs as u128 * (rate + l.burst) as u128 / rate as u128).min(u64::MAX as u128) as u64;
        let cost = (nsecs as u128 * bytes as u128 / rate as u128).min(u64::MAX as u128) as u64;
        (max, cost)
    } else {
        let burst = if l.burst == 0 { 5 } else { l.burst };
        ((nsecs / rate).saturating_mul(burst), nsecs / rate)
    };
    if !b.init {
        b.init = true;
        b.tokens = max;
        b.last_ns = now_ns;
    }
    let tokens = b
        .tokens
        .saturating_add(now_ns.saturating_sub(b.last_ns))
        .min(max);
    b.last_ns = now_ns.max(b.last_ns);
    let within = if tokens >= cost {
        b.tokens = tokens - cost;
        true
    } else {
        b.tokens = tokens;
        false
    };
    within != l.over
}

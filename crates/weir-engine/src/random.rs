//! `meta random` (nft_meta's `prandom_u32()`): a new 32-bit number each time a rule reads it,
//! from a xorshift64 generator per worker ([`State`]), seeded when the engine is made. The
//! numbers are not the kernel's (its generator is per CPU and seeded from the host's
//! entropy), so only their distribution can be compared: `meta random < 0x80000000` holds for
//! about half the packets.

use crate::eval::State;

/// A nonzero seed: the clock's nanoseconds and this process, mixed.
pub(crate) fn seed() -> u64 {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let mut x = t ^ ((std::process::id() as u64) << 32) ^ 0x9e37_79b9_7f4a_7c15;
    // splitmix64's finalizer spreads the bits
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^= x >> 31;
    x.max(1)
}

/// The next number of the worker's generator (xorshift64, Marsaglia), its high 32 bits.
pub(crate) fn next(st: &mut State) -> u32 {
    let mut x = st.meta_rng;
    if x == 0 {
        x = seed();
    }
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    st.meta_rng = x;
    (x >> 32) as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spread_and_nonzero() {
        let mut st = State::default();
        let mut low = 0;
        let mut seen = std::collections::HashSet::new();
        for _ in 0..10_000 {
            let v = next(&mut st);
            seen.insert(v);
            if v < 0x8000_0000 {
                low += 1;
            }
        }
        assert!(st.meta_rng != 0);
        assert!(seen.len() > 9_900, "{}", seen.len());
        assert!((4_500..5_500).contains(&low), "{low}");
    }
}

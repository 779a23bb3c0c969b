//! Deliberate faults in the router's path, for the kernel campaign's mutation test
//! (`crates/weir-lab/tests/kernel_mutants.rs`): each must make the campaign find
//! differences, or the campaign does not test that part of the path.
//!
//! Only with the `mutants` feature (which the lab's tests turn on); without it [`on`] is a
//! constant `false` and the checks compile away. None is active unless [`set`] says so.

/// A fault the router can be built with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Mutant {
    /// Forwarded packets keep their TTL / hop limit.
    NoTtlDecrement = 1,
    /// The reverse path filter lets every source through.
    NoRpFilter = 2,
    /// Every adjacency names neighbour slot 0 (the wrong next hop's MAC).
    AdjacencySlotZero = 3,
    /// A route's own gateway is ignored: the first gateway of a route out of the same port
    /// and family is taken instead.
    OneGatewayPerPort = 4,
}

impl Mutant {
    pub const ALL: [Mutant; 4] = [
        Mutant::NoTtlDecrement,
        Mutant::NoRpFilter,
        Mutant::AdjacencySlotZero,
        Mutant::OneGatewayPerPort,
    ];
}

#[cfg(feature = "mutants")]
static ACTIVE: std::sync::atomic::AtomicU8 = std::sync::atomic::AtomicU8::new(0);

/// Make `m` the active fault (`None`: none), for every router of the process.
#[cfg(feature = "mutants")]
pub fn set(m: Option<Mutant>) {
    ACTIVE.store(
        m.map_or(0, |m| m as u8),
        std::sync::atomic::Ordering::Relaxed,
    );
}

/// Whether fault `m` is active.
#[inline(always)]
pub fn on(m: Mutant) -> bool {
    #[cfg(feature = "mutants")]
    {
        ACTIVE.load(std::sync::atomic::Ordering::Relaxed) == m as u8
    }
    #[cfg(not(feature = "mutants"))]
    {
        let _ = m;
        false
    }
}

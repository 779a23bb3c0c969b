//! TCP reassembly of a TLS ClientHello that spans segments (nfqws2's `reasm_client`).
//!
//! A flow's [`Reasm`] is fed its client segments as (sequence number relative to the
//! hello's first byte, bytes). It learns how long the hello is from the bytes at offset 0
//! ([`super::detect`]'s `incomplete`) and yields the whole payload once every byte up to
//! there is in. Out-of-order segments are placed by offset; overlapping bytes must agree
//! (a retransmission) or the reassembly is refused; bytes before offset 0 (old
//! retransmissions) are dropped, bytes past the hello's end are not kept.
//!
//! It is bounded twice: per flow by the limit given at creation (a hello longer than that
//! is refused at once, a segment ending past it too), and across flows by a shared
//! [`ReasmBudget`] charged for the bytes a flow holds. Whatever refuses the reassembly is
//! counted in the budget; the flow's bytes go back to the budget and the caller lets the
//! parts pass as they are.

use super::tls::{self, Extent};

/// Why a reassembly gave up.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ReasmRefusal {
    /// The hello (or a segment) goes past the flow's limit.
    FlowLimit,
    /// The shared budget has no room for the flow's bytes.
    Budget,
    /// A segment disagrees with bytes already in.
    Conflict,
    /// The bytes at offset 0 are not a TLS ClientHello.
    NotClientHello,
}

/// What [`Reasm::feed`] made of a segment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReasmStatus {
    /// Taken; bytes are still missing.
    NeedMore,
    /// Every byte of the hello is in: [`Reasm::data`].
    Complete,
    /// Given up (sticky): the caller lets the parts pass.
    Refused(ReasmRefusal),
}

/// The bytes all flows' reassemblies may hold together, and what they refused.
#[derive(Clone, Debug, Default)]
pub struct ReasmBudget {
    limit: usize,
    used: usize,
    refused_flow_limit: u64,
    refused_budget: u64,
    refused_other: u64,
}

impl ReasmBudget {
    /// A budget of `limit` bytes.
    pub fn new(limit: usize) -> ReasmBudget {
        ReasmBudget {
            limit,
            ..ReasmBudget::default()
        }
    }

    /// Bytes held by all reassemblies now.
    pub fn used(&self) -> usize {
        self.used
    }

    /// Bytes still free.
    pub fn available(&self) -> usize {
        self.limit - self.used
    }

    /// Reassemblies refused because a hello or segment went past the flow's limit.
    pub fn refused_flow_limit(&self) -> u64 {
        self.refused_flow_limit
    }

    /// Reassemblies refused because the budget was full.
    pub fn refused_budget(&self) -> u64 {
        self.refused_budget
    }

    /// Reassemblies refused for conflicting bytes or for not being a ClientHello.
    pub fn refused_other(&self) -> u64 {
        self.refused_other
    }

    fn charge(&mut self, bytes: usize) -> bool {
        if bytes > self.available() {
            return false;
        }
        self.used += bytes;
        true
    }

    fn release(&mut self, bytes: usize) {
        self.used = self.used.saturating_sub(bytes);
    }

    fn count(&mut self, why: ReasmRefusal) {
        match why {
            ReasmRefusal::FlowLimit => self.refused_flow_limit += 1,
            ReasmRefusal::Budget => self.refused_budget += 1,
            ReasmRefusal::Conflict | ReasmRefusal::NotClientHello => self.refused_other += 1,
        }
    }
}

/// One flow's reassembly of a ClientHello over TCP segments.
#[derive(Clone, Debug)]
pub struct Reasm {
    limit: usize,
    data: Vec<u8>,
    /// Byte ranges present, sorted, merged.
    ranges: Vec<(usize, usize)>,
    /// The hello's exact length once known.
    needed: Option<usize>,
    status: ReasmStatus,
}

impl Reasm {
    /// An empty reassembly of at most `limit` bytes (nfqws2 uses 16 KiB for TCP).
    pub fn new(limit: usize) -> Reasm {
        Reasm {
            limit,
            data: Vec::new(),
            ranges: Vec::new(),
            needed: None,
            status: ReasmStatus::NeedMore,
        }
    }

    /// The status after the last segment.
    pub fn status(&self) -> ReasmStatus {
        self.status
    }

    /// Bytes held (charged to the budget).
    pub fn held(&self) -> usize {
        self.data.len()
    }

    /// The whole payload, once complete.
    pub fn data(&self) -> Option<&[u8]> {
        (self.status == ReasmStatus::Complete).then_some(&self.data[..])
    }

    /// Takes a segment: `rel_seq` is its sequence number minus the hello's first byte's
    /// (wrapping; a "negative" one, as i32, is before the hello). Once `Complete` or
    /// `Refused`, that is the answer to every segment after.
    pub fn feed(&mut self, budget: &mut ReasmBudget, rel_seq: u32, bytes: &[u8]) -> ReasmStatus {
        if self.status != ReasmStatus::NeedMore {
            return self.status;
        }
        // bytes before the hello's start are an old retransmission's: drop them
        let (start, bytes) = if (rel_seq as i32) < 0 {
            let skip = (rel_seq as i32).unsigned_abs() as usize;
            if skip >= bytes.len() {
                return self.status;
            }
            (0usize, &bytes[skip..])
        } else {
            (rel_seq as usize, bytes)
        };
        // keep nothing past the hello's end when it is known
        let bytes = match self.needed {
            Some(n) if start >= n => return self.status,
            Some(n) if start + bytes.len() > n => &bytes[..n - start],
            _ => bytes,
        };
        if bytes.is_empty() {
            return self.status;
        }
        let end = start + bytes.len();
        if end > self.limit {
            return self.refuse(budget, ReasmRefusal::FlowLimit);
        }
        // overlaps must agree
        for &(s, e) in &self.ranges {
            let (os, oe) = (s.max(start), e.min(end));
            if os < oe && self.data[os..oe] != bytes[os - start..oe - start] {
                return self.refuse(budget, ReasmRefusal::Conflict);
            }
        }
        if end > self.data.len() {
            if !budget.charge(end - self.data.len()) {
                return self.refuse(budget, ReasmRefusal::Budget);
            }
            self.data.resize(end, 0);
        }
        self.data[start..end].copy_from_slice(bytes);
        self.ranges.push((start, end));
        self.ranges.sort_unstable();
        let mut merged: Vec<(usize, usize)> = Vec::with_capacity(self.ranges.len());
        for &(s, e) in &self.ranges {
            match merged.last_mut() {
                Some(last) if s <= last.1 => last.1 = last.1.max(e),
                _ => merged.push((s, e)),
            }
        }
        self.ranges = merged;
        self.check(budget)
    }

    /// Reads the contiguous prefix to learn (again) how long the hello is.
    fn check(&mut self, budget: &mut ReasmBudget) -> ReasmStatus {
        let prefix = match self.ranges.first() {
            Some(&(0, e)) => e,
            _ => return self.status,
        };
        match tls::client_hello_extent(&self.data[..prefix]) {
            // too short to tell yet
            Extent::NotHello if prefix < 11 => self.status,
            Extent::NotHello => self.refuse(budget, ReasmRefusal::NotClientHello),
            Extent::Needs { bytes, .. } if bytes > self.limit => {
                self.refuse(budget, ReasmRefusal::FlowLimit)
            }
            Extent::Needs { bytes, exact } => {
                self.needed = exact.then_some(bytes);
                ReasmStatus::NeedMore
            }
            Extent::Whole(end) => {
                let end = end.min(prefix);
                budget.release(self.data.len() - end);
                self.data.truncate(end);
                self.ranges = vec![(0, end)];
                self.status = ReasmStatus::Complete;
                self.status
            }
        }
    }

    fn refuse(&mut self, budget: &mut ReasmBudget, why: ReasmRefusal) -> ReasmStatus {
        budget.count(why);
        budget.release(self.data.len());
        self.data = Vec::new();
        self.ranges.clear();
        self.status = ReasmStatus::Refused(why);
        self.status
    }

    /// Gives the bytes back to the budget and returns the payload if it was complete; the
    /// reassembly is empty and fresh after (same limit).
    pub fn finish(&mut self, budget: &mut ReasmBudget) -> Option<Vec<u8>> {
        budget.release(self.data.len());
        let complete = self.status == ReasmStatus::Complete;
        let data = std::mem::take(&mut self.data);
        *self = Reasm::new(self.limit);
        complete.then_some(data)
    }
}

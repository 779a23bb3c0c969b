//! Profiles, as nfqws2 has them: an ordered list, the first whose [`filter::Filters`] pass
//! is the flow's (chosen again when its protocol or host name becomes known); in each, the
//! instances (a function and its arguments) in order, each with a payload filter and a
//! [`range::Range`] per direction.
//!
//! What a connection keeps of this is a [`FlowState`] of 12 bytes, meant for its connection
//! entry: the chosen profile, and a bit per instance and direction that says it is done
//! (its range is past, or it said so). When every instance of a direction is done, the
//! direction costs one bit test per packet from then on ([`FlowState::done`]).

pub mod filter;
pub mod range;

use crate::payload::PayloadType;
use filter::{Filters, FlowKey};
use range::{Counters, InRange, Range};

/// The most instances a profile may have (one bit each per direction in [`FlowState`]).
pub const MAX_INSTANCES: usize = 32;

/// Which payload types an instance takes (`--payload`): `all`, `known` (neither `empty`
/// nor `unknown`), or a list.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PayloadFilter {
    All,
    Known,
    Types(Vec<PayloadType>),
}

impl PayloadFilter {
    /// nfqws2's syntax: `all`, `known`, or types separated by commas.
    pub fn parse(text: &str) -> Result<PayloadFilter, String> {
        match text {
            "all" => Ok(PayloadFilter::All),
            "known" => Ok(PayloadFilter::Known),
            _ => text
                .split(',')
                .map(|t| {
                    PayloadType::from_name(t.trim())
                        .ok_or_else(|| format!("payload {t:?}: not a payload type"))
                })
                .collect::<Result<Vec<_>, _>>()
                .map(PayloadFilter::Types),
        }
    }

    pub fn accepts(&self, t: PayloadType) -> bool {
        match self {
            PayloadFilter::All => true,
            PayloadFilter::Known => !matches!(t, PayloadType::Empty | PayloadType::Unknown),
            PayloadFilter::Types(l) => l.contains(&t),
        }
    }
}

/// One instance: a function (`F`: a native action or a script function, resolved at
/// configuration) and its filters.
#[derive(Clone, Debug)]
pub struct Instance<F> {
    pub func: F,
    pub payload: PayloadFilter,
    /// `--in-range`: packets from the server (nfqws2's default `x`: none).
    pub in_range: Range,
    /// `--out-range`: packets to the server (default `a`: all).
    pub out_range: Range,
}

impl<F> Instance<F> {
    pub fn new(func: F) -> Instance<F> {
        Instance {
            func,
            payload: PayloadFilter::All,
            in_range: Range::Never,
            out_range: Range::Always,
        }
    }

    fn range(&self, outgoing: bool) -> &Range {
        if outgoing {
            &self.out_range
        } else {
            &self.in_range
        }
    }
}

/// A profile: its name, its filters, its instances.
#[derive(Clone, Debug)]
pub struct Profile<F> {
    pub name: String,
    pub filters: Filters,
    pub instances: Vec<Instance<F>>,
}

/// The profiles, in order.
#[derive(Clone, Debug)]
pub struct Profiles<F> {
    list: Vec<Profile<F>>,
}

/// What a connection keeps of its profile (12 bytes).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FlowState {
    /// The chosen profile's index + 1; 0: none chosen yet; [`FlowState::NONE`]: no profile
    /// matched.
    profile: u16,
    flags: u8,
    /// Per direction (0 out, 1 in): the instances that are done.
    cut: [u32; 2],
}

const CHOSEN: u8 = 1;
const SAW_L7: u8 = 2;
const SAW_HOST: u8 = 4;
const DONE_OUT: u8 = 8;
const DONE_IN: u8 = 16;

impl FlowState {
    const NONE: u16 = u16::MAX;

    /// Whether every instance is done for this direction: the one test a packet of a
    /// direction that is finished costs.
    #[inline]
    pub fn done(&self, outgoing: bool) -> bool {
        self.flags & if outgoing { DONE_OUT } else { DONE_IN } != 0
    }

    /// The chosen profile (None: not chosen yet, or no profile matched).
    pub fn profile(&self) -> Option<usize> {
        match self.profile {
            0 | FlowState::NONE => None,
            p => Some(p as usize - 1),
        }
    }

    /// Instance `i` is done for this direction (it asked for its cutoff).
    pub fn cut(&mut self, outgoing: bool, i: usize) {
        if i < MAX_INSTANCES {
            self.cut[dir(outgoing)] |= 1 << i;
        }
    }

    fn set_done(&mut self, outgoing: bool) {
        self.flags |= if outgoing { DONE_OUT } else { DONE_IN };
    }
}

fn dir(outgoing: bool) -> usize {
    if outgoing {
        0
    } else {
        1
    }
}

/// Why profiles cannot be built.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProfileError(pub String);

impl std::fmt::Display for ProfileError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ProfileError {}

impl<F> Profiles<F> {
    pub fn new(list: Vec<Profile<F>>) -> Result<Profiles<F>, ProfileError> {
        if list.len() >= FlowState::NONE as usize {
            return Err(ProfileError(format!("{} profiles: too many", list.len())));
        }
        if let Some(p) = list.iter().find(|p| p.instances.len() > MAX_INSTANCES) {
            return Err(ProfileError(format!(
                "profile {:?}: {} instances, at most {MAX_INSTANCES}",
                p.name,
                p.instances.len()
            )));
        }
        Ok(Profiles { list })
    }

    pub fn get(&self, i: usize) -> Option<&Profile<F>> {
        self.list.get(i)
    }

    pub fn len(&self) -> usize {
        self.list.len()
    }

    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    pub fn iter(&self) -> impl Iterator<Item = &Profile<F>> {
        self.list.iter()
    }

    /// The most packets of a direction any instance can act on (what the kernel must queue
    /// of each connection), None when some range has no end in packets.
    pub fn packet_bound(&self, outgoing: bool) -> Option<u64> {
        let mut most = 0;
        for i in self.list.iter().flat_map(|p| &p.instances) {
            most = most.max(i.range(outgoing).packet_bound()?);
        }
        Some(most)
    }

    /// Choose the flow's profile if it is not chosen, or choose again if its protocol or
    /// host became known since (a new profile starts with no instance done).
    fn select(&self, st: &mut FlowState, key: &FlowKey) {
        let mut want = st.flags & CHOSEN == 0;
        if key.l7.is_some() && st.flags & SAW_L7 == 0 {
            st.flags |= SAW_L7;
            want = true;
        }
        if key.host.is_some() && st.flags & SAW_HOST == 0 {
            st.flags |= SAW_HOST;
            want = true;
        }
        if !want {
            return;
        }
        let chosen = match self.list.iter().position(|p| p.filters.pass(key)) {
            Some(i) => i as u16 + 1,
            None => FlowState::NONE,
        };
        if chosen != st.profile || st.flags & CHOSEN == 0 {
            let keep = st.flags & (SAW_L7 | SAW_HOST);
            *st = FlowState {
                profile: chosen,
                flags: keep | CHOSEN,
                cut: [0; 2],
            };
        }
    }

    /// The instances to call for this packet, as a bit mask over the chosen profile's
    /// instances (bit `i`: instance `i`), and the profile. Instances whose range is past
    /// are marked done; when all of a direction's are, so is the direction. The caller
    /// calls the instances in order and reports a cutoff with [`FlowState::cut`], then
    /// [`Profiles::settle`].
    pub fn plan(
        &self,
        st: &mut FlowState,
        key: &FlowKey,
        outgoing: bool,
        ptype: PayloadType,
        c: &Counters,
    ) -> Option<(usize, u32)> {
        self.select(st, key);
        if st.done(outgoing) {
            return None;
        }
        let Some(p) = st.profile() else {
            // no profile: nothing to do for this direction, unless the choice may change
            let waits = self.list.iter().any(|p| p.filters.waits_for_l7());
            if !waits || (st.flags & SAW_L7 != 0 && st.flags & SAW_HOST != 0) {
                st.set_done(outgoing);
            }
            return None;
        };
        let prof = &self.list[p];
        let d = dir(outgoing);
        let mut mask = 0u32;
        for (i, inst) in prof.instances.iter().enumerate() {
            if st.cut[d] & (1 << i) != 0 {
                continue;
            }
            match inst.range(outgoing).check(c) {
                InRange::Past => st.cut[d] |= 1 << i,
                InRange::NotYet => {}
                InRange::Yes if inst.payload.accepts(ptype) => mask |= 1 << i,
                InRange::Yes => {}
            }
        }
        self.settle(st, outgoing);
        Some((p, mask))
    }

    /// Whether some instance may still act on the flow (in either direction): its profile
    /// not chosen yet or still open to change, or an instance not done in a direction its
    /// range does not exclude (`x`). A flow for which this is false can leave the slow path
    /// (a flowtable) without the scripts missing anything.
    pub fn active(&self, st: &FlowState) -> bool {
        if st.done(true) && st.done(false) {
            return false;
        }
        let waits = self.list.iter().any(|p| p.filters.waits_for_l7());
        let settled = !waits || (st.flags & SAW_L7 != 0 && st.flags & SAW_HOST != 0);
        if st.flags & CHOSEN == 0 || !settled {
            return true;
        }
        let Some(p) = st.profile() else {
            return false;
        };
        self.list[p].instances.iter().enumerate().any(|(i, inst)| {
            [true, false].into_iter().any(|out| {
                i < MAX_INSTANCES
                    && !st.done(out)
                    && st.cut[dir(out)] & (1 << i) == 0
                    && *inst.range(out) != Range::Never
            })
        })
    }

    /// After the instances ran (and some asked for their cutoff): if every instance of the
    /// chosen profile is done for this direction, the direction is done, unless the
    /// profile may still change (its protocol or host not known yet while some profile
    /// waits for them).
    pub fn settle(&self, st: &mut FlowState, outgoing: bool) {
        let Some(p) = st.profile() else { return };
        let n = self.list[p].instances.len();
        let all = if n == MAX_INSTANCES {
            u32::MAX
        } else {
            (1u32 << n) - 1
        };
        if st.cut[dir(outgoing)] & all == all {
            let waits = self.list.iter().any(|p| p.filters.waits_for_l7());
            if !waits || (st.flags & SAW_L7 != 0 && st.flags & SAW_HOST != 0) {
                st.set_done(outgoing);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::filter::{HostList, Ports};
    use super::*;
    use crate::payload::Protocol;

    fn key(host: Option<&'static str>) -> FlowKey<'static> {
        FlowKey {
            v6: false,
            proto: 6,
            port: 443,
            icmp: None,
            remote: "198.18.0.1".parse().unwrap(),
            l7: host.map(|_| Protocol::Tls),
            host,
        }
    }

    fn n(p: u64) -> Counters {
        Counters {
            packets: p,
            ..Counters::default()
        }
    }

    fn inst(name: &'static str, out: &str) -> Instance<&'static str> {
        Instance {
            out_range: Range::parse(out).unwrap(),
            ..Instance::new(name)
        }
    }

    #[test]
    fn first_match_then_again_when_the_host_is_known() {
        let ps = Profiles::new(vec![
            Profile {
                name: "listed".into(),
                filters: Filters {
                    tcp: Some(Ports::parse("443").unwrap()),
                    hostlist: Some(HostList::parse("example.com")),
                    ..Filters::default()
                },
                instances: vec![inst("split", "-n5")],
            },
            Profile {
                name: "any tcp".into(),
                filters: Filters {
                    tcp: Some(Ports::parse("*").unwrap()),
                    ..Filters::default()
                },
                instances: vec![inst("fake", "-n2"), inst("noop", "a")],
            },
        ])
        .unwrap();
        let mut st = FlowState::default();
        let t = PayloadType::Empty;
        assert_eq!(
            ps.plan(&mut st, &key(None), true, t, &n(1)),
            Some((1, 0b11))
        );
        assert_eq!(
            ps.plan(&mut st, &key(None), true, t, &n(2)),
            Some((1, 0b11))
        );
        assert_eq!(
            ps.plan(&mut st, &key(None), true, t, &n(3)),
            Some((1, 0b10))
        );
        // the host becomes known: the first profile now matches, and starts afresh
        let k = key(Some("www.example.com"));
        assert_eq!(ps.plan(&mut st, &k, true, t, &n(4)), Some((0, 0b1)));
        assert_eq!(ps.plan(&mut st, &k, true, t, &n(5)), Some((0, 0b1)));
        assert!(!st.done(true));
        assert_eq!(ps.plan(&mut st, &k, true, t, &n(6)), Some((0, 0)));
        assert!(
            st.done(true),
            "every instance past its range: the direction is done"
        );
        assert_eq!(ps.plan(&mut st, &k, true, t, &n(7)), None);
        // incoming: the default range is x, so done at once
        assert_eq!(ps.plan(&mut st, &k, false, t, &n(1)), Some((0, 0)));
        assert!(st.done(false));
        assert_eq!(std::mem::size_of::<FlowState>(), 12);
    }

    #[test]
    fn cutoff_and_payload_filters() {
        let mut a = inst("a", "a");
        a.payload = PayloadFilter::parse("tls_client_hello,http_req").unwrap();
        let ps = Profiles::new(vec![Profile {
            name: "p".into(),
            filters: Filters::default(),
            instances: vec![a, inst("b", "a")],
        }])
        .unwrap();
        let mut st = FlowState::default();
        let k = key(None);
        let ch = PayloadType::TlsClientHello;
        assert_eq!(
            ps.plan(&mut st, &k, true, PayloadType::Empty, &n(1)),
            Some((0, 0b10))
        );
        assert_eq!(ps.plan(&mut st, &k, true, ch, &n(2)), Some((0, 0b11)));
        st.cut(true, 0);
        ps.settle(&mut st, true);
        assert_eq!(ps.plan(&mut st, &k, true, ch, &n(3)), Some((0, 0b10)));
        st.cut(true, 1);
        ps.settle(&mut st, true);
        assert!(st.done(true));
        assert_eq!(ps.plan(&mut st, &k, true, ch, &n(4)), None);
        assert!(PayloadFilter::parse("tls_client_hello,nope").is_err());
        assert!(
            PayloadFilter::Known.accepts(ch) && !PayloadFilter::Known.accepts(PayloadType::Unknown)
        );
    }

    #[test]
    fn no_profile_and_bounds() {
        let ps = Profiles::new(vec![Profile {
            name: "udp".into(),
            filters: Filters {
                udp: Some(Ports::parse("443").unwrap()),
                ..Filters::default()
            },
            instances: vec![inst("a", "-n3"), inst("b", "<n9")],
        }])
        .unwrap();
        let mut st = FlowState::default();
        assert_eq!(
            ps.plan(&mut st, &key(None), true, PayloadType::Empty, &n(1)),
            None
        );
        assert!(st.done(true) && st.profile().is_none());
        assert_eq!(ps.packet_bound(true), Some(8));
        assert_eq!(ps.packet_bound(false), Some(0));
        let many = (0..33).map(|_| inst("x", "a")).collect();
        assert!(Profiles::new(vec![Profile {
            name: "big".into(),
            filters: Filters::default(),
            instances: many,
        }])
        .is_err());
    }
}

//! The `dup` statement: copies of a packet sent elsewhere while the original goes on.
//!
//! In the ip and ip6 families (`dup to ADDR [device DEV]`, Linux's `nf_dup_ipv4` /
//! `nf_dup_ipv6`) the copy is the IP packet as it is where the statement runs, untracked
//! (`nf_ct_set(skb, NULL, IP_CT_UNTRACKED)`), with IPv4's don't-fragment bit set and, at
//! prerouting and input only, the TTL (hop limit) decremented, the header checksum
//! computed again; it is routed to the gateway ADDR (out of DEV when given) and leaves as
//! the host's own packet (`ip_local_out`: output, postrouting, egress) to ADDR's link-layer
//! address. While a copy crosses those hooks no `dup` runs (the kernel's `nf_skb_duplicated`
//! / `in_nf_duplicate`): a copy is not duplicated again. In the netdev family (`dup to DEV`,
//! `nf_dup_netdev_egress`) the copy is the frame as it is, link header included, sent out
//! of DEV (through DEV's egress chains when the statement ran at ingress).
//!
//! The evaluator records each statement in `Meta::dups` ([`eval`]) with the header writes
//! made before it; after each base chain the stateful layer makes the copies
//! ([`Stateful::dup_take`]) and keeps them for the caller ([`Stateful::take_dup_out`]), who
//! routes and sends them (`weir_router::Router::dup_out`).

use super::{Buf, Stateful};
use crate::compile::{CTable, CValue};
use crate::eval::{value_of, Meta, Pkt, State};
use weir_lang::ir::Hook;
use weir_wire::{PacketMeta, L3};

/// The most `dup` statements one packet runs in one base chain (more are counted in
/// `Stats::dup_unsent`).
pub const MAX_DUPS: usize = 4;

/// The most copies that wait for the caller.
pub const DUP_MAX: usize = 4096;

/// Where one `dup` statement sends its copy.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DupTo {
    /// 4 or 6: the ip families' gateway in `gw` (IPv4 in the low 32 bits); 0: netdev, the
    /// frame out of `dev`.
    pub family: u8,
    pub gw: u128,
    /// The device as an interface-name value (`weir_wire::field::ifname_value`); 0: none
    /// given (the route to `gw` says).
    pub dev: u128,
}

/// The `dup` statements a base chain ran for a packet, in order (in `Meta`).
#[derive(Clone, Copy, Debug, Default)]
pub struct Dups {
    pub to: [DupTo; MAX_DUPS],
    /// How many of `Meta::writes` each statement saw made (the copy has those).
    pub writes: [u8; MAX_DUPS],
    pub n: u8,
    /// Statements past [`MAX_DUPS`].
    pub over: u8,
}

/// A copy to send: the IP packet (ip families) or the whole frame (netdev).
#[derive(Clone, Debug)]
pub struct DupSend {
    pub data: Vec<u8>,
    pub to: DupTo,
    /// The hook the statement ran at.
    pub hook: Hook,
    /// The packet's mark then (the egress chains of a netdev copy read it).
    pub mark: u32,
}

/// Compiled `dup`: the gateway (family, value) and the device.
#[derive(Clone, Debug)]
pub struct CDup {
    pub addr: Option<(u8, CValue)>,
    pub dev: Option<CValue>,
}

/// Run a `dup` statement: record where the copy goes. False when a map lookup finds nothing
/// (the rule stops, as after the kernel's lookup expression).
pub(crate) fn eval(t: &CTable, d: &CDup, p: &mut Pkt, st: &mut State) -> bool {
    let mut to = DupTo::default();
    if let Some((fam, a)) = &d.addr {
        let Some(gw) = value_of(t, a, p, st) else {
            return false;
        };
        to.family = *fam;
        to.gw = gw;
    }
    if let Some(v) = &d.dev {
        let Some(dev) = value_of(t, v, p, st) else {
            return false;
        };
        to.dev = dev;
    }
    let ok_family = match to.family {
        4 => p.pm.l3 == L3::Ipv4,
        6 => p.pm.l3 == L3::Ipv6,
        _ => true,
    };
    let m = &mut p.meta.dups;
    if !ok_family {
        return true;
    }
    match m.to.get_mut(m.n as usize) {
        Some(slot) => {
            *slot = to;
            m.writes[m.n as usize] = p.meta.nwrites;
            m.n += 1;
        }
        None => m.over = m.over.saturating_add(1),
    }
    true
}

impl Stateful {
    /// The copies `dup` made since the last call, in order.
    pub fn take_dup_out(&mut self) -> Vec<DupSend> {
        std::mem::take(&mut self.dup_out)
    }

    /// While on, `dup` makes no copy (the router sends a copy through the hooks: a copy is
    /// not duplicated again).
    pub fn set_duplicating(&mut self, on: bool) {
        self.duplicating = on;
    }

    /// After a base chain: the copies its `dup` statements asked for, from the frame as it
    /// is (`buf`, `pm`) with the header writes each statement saw made; `meta.dups` emptied.
    pub(super) fn dup_take(&mut self, hook: Hook, buf: &Buf, pm: &PacketMeta, meta: &mut Meta) {
        let d = std::mem::take(&mut meta.dups);
        if d.n == 0 && d.over == 0 {
            return;
        }
        if self.duplicating {
            return;
        }
        self.stats.dup_unsent += d.over as u64;
        for i in 0..d.n as usize {
            if self.dup_out.len() >= DUP_MAX {
                self.stats.dup_unsent += 1;
                continue;
            }
            let mut f = buf.get().to_vec();
            let mut fpm = *pm;
            for (fld, v) in meta.writes[..d.writes[i] as usize].iter().flatten() {
                if crate::nat::set_header_field(&mut f, &fpm, *fld, *v) {
                    fpm = PacketMeta::parse(&f, fpm.link);
                }
            }
            let to = d.to[i];
            let data = if to.family == 0 {
                f
            } else {
                match ip_copy(&f, &fpm, hook) {
                    Some(ip) => ip,
                    None => {
                        self.stats.dup_unsent += 1;
                        continue;
                    }
                }
            };
            self.stats.dup_copies += 1;
            self.dup_out.push(DupSend {
                data,
                to,
                hook,
                mark: meta.mark,
            });
        }
    }
}

/// The IP packet of a copy (`nf_dup_ipv4` / `nf_dup_ipv6`): IPv4's don't-fragment bit set,
/// the TTL or hop limit decremented at prerouting and input, IPv4's header checksum computed
/// again. None when the frame holds no whole IP header.
fn ip_copy(f: &[u8], pm: &PacketMeta, hook: Hook) -> Option<Vec<u8>> {
    let l3 = pm.l3_off as usize;
    let end = pm.l3_end().min(f.len());
    let dec = matches!(hook, Hook::Prerouting | Hook::Input);
    let mut ip = f.get(l3..end)?.to_vec();
    match pm.l3 {
        L3::Ipv4 => {
            let ihl = (*ip.first()? as usize & 15) * 4;
            if ihl < 20 || ip.len() < ihl {
                return None;
            }
            ip[6] |= 0x40;
            if dec {
                ip[8] = ip[8].wrapping_sub(1);
            }
            ip[10..12].copy_from_slice(&[0, 0]);
            let c = weir_wire::checksum::checksum(&ip[..ihl]);
            ip[10..12].copy_from_slice(&c.to_be_bytes());
        }
        L3::Ipv6 => {
            if ip.len() < 40 {
                return None;
            }
            if dec {
                ip[7] = ip[7].wrapping_sub(1);
            }
        }
        _ => return None,
    }
    Some(ip)
}

#[cfg(test)]
mod tests {
    use super::*;
    use weir_wire::LinkType;

    fn v4_frame(ttl: u8) -> Vec<u8> {
        let mut f = vec![0u8; 14];
        f[12] = 8;
        let mut ip = vec![
            0x45, 0, 0, 28, 0, 1, 0, 0, ttl, 17, 0, 0, 198, 18, 0, 1, 198, 19, 0, 2,
        ];
        let c = weir_wire::checksum::checksum(&ip);
        ip[10..12].copy_from_slice(&c.to_be_bytes());
        f.extend_from_slice(&ip);
        f.extend_from_slice(&[0x30, 0x39, 0, 53, 0, 8, 0, 0]);
        f
    }

    #[test]
    fn an_ipv4_copy_has_df_set_and_its_ttl_decremented_at_prerouting_and_input_only() {
        let f = v4_frame(64);
        let pm = PacketMeta::parse(&f, LinkType::Ethernet);
        for (hook, ttl) in [
            (Hook::Prerouting, 63),
            (Hook::Input, 63),
            (Hook::Forward, 64),
            (Hook::Output, 64),
            (Hook::Postrouting, 64),
        ] {
            let ip = ip_copy(&f, &pm, hook).unwrap();
            assert_eq!(ip.len(), 28);
            assert_eq!(ip[8], ttl, "{hook:?}");
            assert_eq!(ip[6] & 0x40, 0x40);
            assert_eq!(weir_wire::checksum::checksum(&ip[..20]), 0);
            assert_eq!(&ip[12..20], &f[26..34]);
        }
    }
}

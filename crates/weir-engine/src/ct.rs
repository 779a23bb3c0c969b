//! The `ct` keys read from the packet's connection entry, as the kernel's `nft_ct_get_eval`
//! reads them (`ct state` is read apart: it has a value without an entry).

use crate::eval::CtView;
use weir_wire::Field;

/// The value of the conntrack key `f` for the connection `c` (whose mark is `mark`); `None`
/// breaks the rule, as the kernel's `NFT_BREAK`: a key this connection does not have (an IPv4
/// address key of an IPv6 connection and the other way round).
///
/// Packets and bytes are counted for every connection (the kernel counts them only with
/// `nf_conntrack_acct`, which a rule reading `ct bytes` turns on). A key without a direction
/// (`ct bytes`, `ct packets`, `ct avgpkt`) sums both directions; `avgpkt` is bytes divided by
/// packets, 0 without packets.
pub(crate) fn ct_key(c: &CtView, mark: u32, f: Field) -> Option<u128> {
    let v4 = c.l3proto == 2;
    let v6 = c.l3proto == 10;
    let both = |a: [u64; 2]| a[0].wrapping_add(a[1]);
    let avg = |bytes: u64, packets: u64| bytes.checked_div(packets).unwrap_or(0);
    Some(match f {
        Field::CtMark => mark as u128,
        Field::CtStatus => c.status as u128,
        Field::CtDirection => c.dir as u128,
        Field::CtExpiration => c.expiration_ms as u128,
        Field::CtL3proto => c.l3proto as u128,
        Field::CtProtocol | Field::CtOriginalProtocol | Field::CtReplyProtocol => {
            c.protocol as u128
        }
        Field::CtOriginalPackets => c.packets[0] as u128,
        Field::CtOriginalBytes => c.bytes[0] as u128,
        Field::CtReplyPackets => c.packets[1] as u128,
        Field::CtReplyBytes => c.bytes[1] as u128,
        Field::CtPackets => both(c.packets) as u128,
        Field::CtBytes => both(c.bytes) as u128,
        Field::CtAvgpkt => avg(both(c.bytes), both(c.packets)) as u128,
        Field::CtOriginalAvgpkt => avg(c.bytes[0], c.packets[0]) as u128,
        Field::CtReplyAvgpkt => avg(c.bytes[1], c.packets[1]) as u128,
        // nft_ct_get_eval: the zone's id (`ct zone`), or its id for a direction (0 where
        // it does not apply)
        Field::CtZone => c.zone.id as u128,
        Field::CtOriginalZone => c.zone.id_for(weir_conntrack::Dir::Original) as u128,
        Field::CtReplyZone => c.zone.id_for(weir_conntrack::Dir::Reply) as u128,
        // the address keys without a family are typed IPv4 here: an IPv6 entry does not match
        Field::CtOriginalSaddr | Field::CtOriginalIpSaddr if v4 => c.orig_src,
        Field::CtOriginalDaddr | Field::CtOriginalIpDaddr if v4 => c.orig_dst,
        Field::CtReplySaddr | Field::CtReplyIpSaddr if v4 => c.reply_src,
        Field::CtReplyDaddr | Field::CtReplyIpDaddr if v4 => c.reply_dst,
        Field::CtOriginalIp6Saddr if v6 => c.orig_src,
        Field::CtOriginalIp6Daddr if v6 => c.orig_dst,
        Field::CtReplyIp6Saddr if v6 => c.reply_src,
        Field::CtReplyIp6Daddr if v6 => c.reply_dst,
        Field::CtOriginalProtoSrc => c.orig_sport as u128,
        Field::CtOriginalProtoDst => c.orig_dport as u128,
        Field::CtReplyProtoSrc => c.reply_sport as u128,
        Field::CtReplyProtoDst => c.reply_dport as u128,
        Field::CtId => ct_id(c) as u128,
        // nft_ct_get_eval: no helper, the rule stops
        Field::CtHelper => {
            weir_wire::field::ifname_value(crate::helper::Kind::from_u8(c.helper)?.name())
        }
        _ => return None,
    })
}

/// The connection's id (`ct id`, the kernel's `nf_ct_get_id`): a keyed hash of its original
/// tuple, the key drawn once per process (the same for every worker), so that a connection
/// keeps one id for its life and ids do not reveal addresses. The kernel also hashes the
/// entry's address: two connections of the same tuple one after the other have different
/// ids there, the same one here.
fn ct_id(c: &CtView) -> u32 {
    use std::hash::{BuildHasher, Hasher};
    static KEY: std::sync::OnceLock<std::collections::hash_map::RandomState> =
        std::sync::OnceLock::new();
    let mut h = KEY.get_or_init(Default::default).build_hasher();
    h.write_u128(c.orig_src);
    h.write_u128(c.orig_dst);
    h.write_u16(c.orig_sport);
    h.write_u16(c.orig_dport);
    h.write_u8(c.protocol);
    h.write_u8(c.l3proto);
    let v = h.finish();
    (v ^ (v >> 32)) as u32
}

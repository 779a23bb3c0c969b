//! Raw payload writes (`@th,16,16 set 80`, `@ih,58,6 set 1`), as nftables compiles and
//! the kernel's `nft_payload_set_eval` runs them.
//!
//! nft turns `@BASE,OFFSET,LEN set VALUE` into one `payload write` of the bytes that hold the
//! bits (after a `payload load` and a `bitwise` that keep the bits around them when the bits
//! do not fill whole bytes). A raw expression has no protocol description, so no checksum
//! type: an IPv4 header written raw keeps its old header checksum, as in the kernel. Only a
//! write after the transport header (`@ih`) asks for the transport checksum's update
//! (`NFT_PAYLOAD_L4CSUM_PSEUDOHDR`), and nft then widens the bytes written to 16-bit words.
//! When those bytes pass the packet's end (or the header is not there: `@th` in a later
//! fragment, `@ih` after neither TCP nor UDP), the kernel's load or write fails and the rule
//! stops.
//!
//! The engine checks that at evaluation ([`window_ok`]) and the stateful layer writes the bytes
//! when the base chain ends ([`apply`]), like the other header writes.

use weir_wire::meta::proto;
use weir_wire::{checksum as cs, Frag, PacketMeta, L3};

/// The inner header (`@ih`): the base whose writes update the transport checksum.
const INNER: u8 = 3;

/// The byte window a write touches, relative to its base: (first byte, bytes).
fn window(base: u8, offset: u16, len: u8) -> (usize, usize) {
    let off = offset as usize;
    let mut first = off / 8;
    let mut n = (off % 8 + len as usize).div_ceil(8);
    // stmt_evaluate_payload: with a checksum to update, an odd byte count grows by one,
    // preferring a 16-bit aligned start
    if base == INNER && n % 2 == 1 {
        n += 1;
        if first % 2 == 1 {
            first -= 1;
        }
    }
    (first, n)
}

/// Whether the kernel's load and write of the bytes holding the bits would succeed: the
/// header is there and the bytes lie inside the packet.
pub(crate) fn window_ok(frame: &[u8], pm: &PacketMeta, base: u8, offset: u16, len: u8) -> bool {
    let (first, n) = window(base, offset, len);
    pm.raw(frame, base, first * 8, n * 8).is_some()
}

/// Pack a write for [`crate::eval::Meta::writes`]: the value (64 bits), the bit offset, the
/// length and the base.
pub(crate) fn pack(base: u8, offset: u16, len: u8, value: u128) -> u128 {
    let v = if len >= 64 {
        value as u64
    } else {
        value as u64 & ((1u64 << len) - 1)
    };
    v as u128 | (offset as u128) << 64 | (len as u128) << 80 | (base as u128) << 88
}

/// Where base `base` starts in the frame (as [`PacketMeta::raw`] finds it).
fn base_start(frame: &[u8], pm: &PacketMeta, base: u8) -> Option<usize> {
    let l4 = pm.l4_off as usize;
    Some(match base {
        0 => 0,
        1 => pm.l3_off as usize,
        2 => l4,
        INNER => match pm.l4proto {
            proto::TCP => l4 + (*frame.get(l4 + 12)? >> 4) as usize * 4,
            proto::UDP => l4 + 8,
            _ => weir_wire::tunnel::inner_offset(frame, pm)?,
        },
        _ => return None,
    })
}

/// Write a packed raw payload write into the frame; returns whether it wrote.
pub fn apply(frame: &mut [u8], pm: &PacketMeta, packed: u128) -> bool {
    let value = packed as u64;
    let offset = (packed >> 64) as u16;
    let len = (packed >> 80) as u8;
    let base = (packed >> 88) as u8;
    if len == 0 || len > 64 || !window_ok(frame, pm, base, offset, len) {
        return false;
    }
    let Some(start) = base_start(frame, pm, base) else {
        return false;
    };
    let (first, n) = window(base, offset, len);
    let at = start + first;
    // (at most 9 bytes: 64 bits at any bit offset, widened by one for `@ih`)
    let mut before = [0u8; 10];
    let old = &mut before[..n];
    old.copy_from_slice(&frame[at..at + n]);
    // the bits, counted from the window's first bit
    let skip = offset as usize - first * 8;
    for i in 0..len as usize {
        let bit = skip + i;
        let on = (value >> (len as usize - 1 - i)) & 1 == 1;
        let (byte, m) = (at + bit / 8, 0x80u8 >> (bit % 8));
        if on {
            frame[byte] |= m;
        } else {
            frame[byte] &= !m;
        }
    }
    if base == INNER {
        l4csum_update(frame, pm, at, old);
    }
    true
}

/// nft_payload_l4csum_update: the transport checksum follows the bytes changed at `at`
/// (TCP; UDP unless its checksum is 0; UDP-Lite; ICMPv6; none in a fragment), a result of 0
/// stored as 0xffff (`CSUM_MANGLED_0`).
fn l4csum_update(frame: &mut [u8], pm: &PacketMeta, at: usize, old: &[u8]) {
    if pm.frag == Frag::Later {
        return;
    }
    let l4 = pm.l4_off as usize;
    let c = match pm.l4proto {
        proto::TCP => l4 + 16,
        proto::UDP | proto::UDPLITE => l4 + 6,
        proto::ICMPV6 if pm.l3 == L3::Ipv6 => l4 + 2,
        _ => return,
    };
    if c + 2 > frame.len() {
        return;
    }
    let sum = u16::from_be_bytes([frame[c], frame[c + 1]]);
    if pm.l4proto == proto::UDP && sum == 0 {
        return;
    }
    let upd = match cs::update_bytes(sum, old, &frame[at..at + old.len()]) {
        0 => 0xffff,
        s => s,
    };
    frame[c..c + 2].copy_from_slice(&upd.to_be_bytes());
}

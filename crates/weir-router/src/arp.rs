//! ARP (RFC 826) for IPv4 over Ethernet: the sender of a request or reply (what the router
//! learns a neighbour from), and the request the router sends for a next hop it does not
//! know.

use weir_wire::{Addr, Mac};

/// The sender of an ARP request or reply for IPv4 over Ethernet: its address and MAC.
pub fn sender(f: &[u8]) -> Option<(Addr, Mac)> {
    if f.get(12..14)? != [0x08, 0x06] || f.get(14..22)? != [0, 1, 8, 0, 6, 4, 0, f[21]] {
        return None;
    }
    if !matches!(f[21], 1 | 2) {
        return None;
    }
    let mac = Mac::from_slice(f.get(22..28)?)?;
    let ip = u32::from_be_bytes(f.get(28..32)?.try_into().ok()?);
    if ip == 0 || mac.is_multicast() {
        return None;
    }
    Some((Addr::v4(ip), mac))
}

/// An ARP request for `target` from `src` (the router's address and MAC on the port),
/// padded to the Ethernet minimum.
pub fn request(mac: Mac, src: u32, target: u32) -> Vec<u8> {
    let mut f = vec![0xff; 6];
    f.extend_from_slice(&mac.0);
    f.extend_from_slice(&[0x08, 0x06, 0, 1, 8, 0, 6, 4, 0, 1]);
    f.extend_from_slice(&mac.0);
    f.extend_from_slice(&src.to_be_bytes());
    f.extend_from_slice(&[0; 6]);
    f.extend_from_slice(&target.to_be_bytes());
    f.resize(60, 0);
    f
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_and_learning() {
        let mac = Mac([2, 0, 0, 0, 0, 9]);
        let f = request(mac, 0xc612_1e01, 0xc612_1e02);
        assert_eq!(f.len(), 60);
        assert_eq!(&f[..6], &[0xff; 6]);
        // what the router sends is what it learns from: sender address and MAC
        assert_eq!(sender(&f), Some((Addr::v4(0xc612_1e01), mac)));
        // not ARP, a multicast sender, a cut frame: nothing learnt
        let mut ip = f.clone();
        ip[12..14].copy_from_slice(&[0x08, 0x00]);
        assert_eq!(sender(&ip), None);
        let mut mc = f.clone();
        mc[22] = 1;
        assert_eq!(sender(&mc), None);
        assert_eq!(sender(&f[..30]), None);
    }
}

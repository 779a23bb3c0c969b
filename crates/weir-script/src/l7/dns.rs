//! DNS over UDP: a standard query or response, recognised by the header's sanity as
//! nfqws2 does (`IsDNSQuery`, `IsDNSResponse`).

use super::be16;

/// A standard query: QR 0, opcode 0, one question, no answers nor authority, at most three
/// additional records (EDNS OPT and the like).
pub fn is_query(p: &[u8]) -> bool {
    p.len() >= 12 && p[2] & 0xfe == 0 && p[4..10] == [0, 1, 0, 0, 0, 0] && be16(p, 10) <= Some(3)
}

/// A standard response: QR 1, opcode 0, one question, at most 100 records in each section.
pub fn is_response(p: &[u8]) -> bool {
    p.len() >= 12
        && p[2] & 0xf8 == 0x80
        && be16(p, 4) == Some(1)
        && be16(p, 6) <= Some(100)
        && be16(p, 8) <= Some(100)
        && be16(p, 10) <= Some(100)
}

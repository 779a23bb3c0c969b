//! SIP (`nf_conntrack_sip` / `nf_nat_sip`): not written yet.

use super::{Cx, Out};

/// Read one SIP message (UDP datagram or TCP segment).
pub fn help(_cx: &Cx, _payload: &[u8], _out: &mut Out) {}

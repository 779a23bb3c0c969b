//! FTP (`nf_conntrack_ftp` / `nf_nat_ftp`): not written yet.

use super::{Cx, Out};

/// Read one segment of the control connection.
pub fn help(_cx: &Cx, _payload: &[u8], _out: &mut Out) {}

//! Reading an action's `name=value` arguments once, at configuration: typed getters whose
//! errors name the argument, and a final check that every argument given was understood.

use std::str::FromStr;

use super::blobs::BlobRef;
use super::markers::Marker;
use super::ActionError;

/// Arguments nfqws2 takes that are the caller's business here (filters, routing of sends,
/// Lua-only features): accepted and ignored.
const IGNORED: &[&str] = &[
    "dir",
    "payload",
    "ifout",
    "fwmark",
    "tls_mod",
    "ip_id_conn",
    "fool",
];

pub(crate) struct Args<'a> {
    func: &'a str,
    list: &'a [(String, String)],
    used: Vec<bool>,
}

impl<'a> Args<'a> {
    pub fn new(func: &'a str, list: &'a [(String, String)]) -> Args<'a> {
        Args {
            func,
            list,
            used: vec![false; list.len()],
        }
    }

    pub fn bad(&self, arg: &str, value: &str, reason: &str) -> ActionError {
        ActionError::BadArg {
            func: self.func.to_string(),
            arg: arg.to_string(),
            value: value.to_string(),
            reason: reason.to_string(),
        }
    }

    /// The value of `k` (the last one given), marking every `k` as read.
    pub fn get(&mut self, k: &str) -> Option<&'a str> {
        let mut r = None;
        for (i, (n, v)) in self.list.iter().enumerate() {
            if n == k {
                self.used[i] = true;
                r = Some(v.as_str());
            }
        }
        r
    }

    /// A flag: present (whatever its value).
    pub fn flag(&mut self, k: &str) -> bool {
        self.get(k).is_some()
    }

    pub fn num<T: FromStr>(&mut self, k: &str) -> Result<Option<T>, ActionError> {
        match self.get(k) {
            None => Ok(None),
            Some(v) => v
                .strip_prefix('+')
                .unwrap_or(v)
                .parse::<T>()
                .map(Some)
                .map_err(|_| self.bad(k, v, "bad number")),
        }
    }

    pub fn marker(&mut self, k: &str) -> Result<Option<Marker>, ActionError> {
        match self.get(k) {
            None => Ok(None),
            Some(v) => Marker::parse(v)
                .map(Some)
                .ok_or_else(|| self.bad(k, v, "unparsable position marker")),
        }
    }

    pub fn markers(&mut self, k: &str) -> Result<Option<Vec<Marker>>, ActionError> {
        match self.get(k) {
            None => Ok(None),
            Some(v) => Marker::parse_list(v)
                .map(Some)
                .map_err(|e| self.bad(k, v, &e)),
        }
    }

    pub fn blob(&mut self, k: &str) -> Result<Option<BlobRef>, ActionError> {
        match self.get(k) {
            None => Ok(None),
            Some(v) => BlobRef::parse(v).map(Some).map_err(|e| self.bad(k, v, &e)),
        }
    }

    /// Every argument given was read (or is one of those ignored).
    pub fn finish(self) -> Result<(), ActionError> {
        for (i, (n, _)) in self.list.iter().enumerate() {
            if !self.used[i] && !IGNORED.contains(&n.as_str()) {
                return Err(ActionError::UnknownArg {
                    func: self.func.to_string(),
                    arg: n.clone(),
                });
            }
        }
        Ok(())
    }
}

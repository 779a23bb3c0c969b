//! nft JSON out.
use crate::ast;
use crate::ir::Family;
use crate::source::SourceMap;
use serde_json::Value;

pub fn rule(_r: &ast::Rule, _family: Family, _sources: &SourceMap) -> Value {
    Value::Null
}

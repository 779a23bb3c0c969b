//! weir-lang (in progress)

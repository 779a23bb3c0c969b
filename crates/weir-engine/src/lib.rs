//! weir-engine (in progress)

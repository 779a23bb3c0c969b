//! weir-classify (in progress)

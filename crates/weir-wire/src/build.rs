//! packet builder (in progress)

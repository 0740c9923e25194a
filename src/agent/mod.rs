//! Layer 2: the agent runtime.

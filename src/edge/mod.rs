//! Layer 3: the Worker.

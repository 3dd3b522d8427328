//! What every experiment is built on: sampling in rounds with a noise
//! reading per sample (`trial`), medians and ratios with 95% intervals
//! (`stats`), claims decided by their interval (`claim`), and the typed
//! envelope each experiment writes (`envelope`).

pub mod claim;
pub mod envelope;
pub mod stats;
pub mod trial;

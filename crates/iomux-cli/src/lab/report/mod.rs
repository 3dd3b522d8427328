//! What a results folder says: its experiments' typed results, the
//! comparison of two runs (`iomux report A B`), and the machine's drift
//! between them.

pub mod compare;
pub mod drift;
pub mod results;

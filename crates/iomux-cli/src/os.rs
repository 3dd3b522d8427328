//! Process utilities (temporary re-exports; see the sys-rustix branch).
pub use iomux::sys::net::{peak_rss, pin_to_cpu, usage};
pub use iomux::sys::{open_fd_count, raise_nofile_limit, set_nofile_soft};

//! The servers iomux is judged against (nginx, redis-server, haproxy) and
//! the clients nobody here wrote (wrk, h2load, redis-benchmark), each
//! started and read the same way by every experiment that uses it.

pub mod clients;
pub mod haproxy;
pub mod nginx;
pub mod redis;

//! One load cut into parts (shards on hosts, processes on a host, loops
//! in a process) whose shares add up exactly, and the `--shard` forms.

use crate::CliResult;
use anyhow::{bail, Context as _};

/// Splits `n` over `parts` as evenly as possible: part `i`'s share.
pub fn share(n: usize, parts: usize, i: usize) -> usize {
    n / parts + usize::from(i < n % parts)
}

/// The sum of the shares of the parts before part `i`.
fn before(n: usize, parts: usize, i: usize) -> usize {
    i * (n / parts) + i.min(n % parts)
}

/// What is divided: the connections and what scales with them.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Share {
    pub conns: usize,
    pub idle: usize,
    /// Global number of the first active connection: numbers pick byte
    /// patterns, so parts must not reuse each other's.
    pub first_conn: u64,
    /// Global index of the first idle connection (source addresses go
    /// round by global index, so every part spreads evenly).
    pub first_idle: u64,
    pub requests: Option<u64>,
    pub rate: Option<f64>,
    pub connect_rate: Option<f64>,
}

impl Share {
    /// Part `i` of `parts`. Idle connections fill each part up to its even
    /// share of all connections, so no part is empty while there are at
    /// least as many connections as parts. Requests go to the parts with
    /// active connections (the others get `Some(0)`), the rate follows
    /// the active connections, the connect rate all of them.
    pub fn part(&self, parts: usize, i: usize) -> Share {
        let (c, all) = (self.conns, self.conns + self.idle);
        let conns = share(c, parts, i);
        let idle = share(all, parts, i) - conns;
        let active_parts = parts.min(c);
        let requests =
            self.requests.map(|r| if i < active_parts { share(r as usize, active_parts, i) as u64 } else { 0 });
        Share {
            conns,
            idle,
            first_conn: self.first_conn + before(c, parts, i) as u64,
            first_idle: self.first_idle + (before(all, parts, i) - before(c, parts, i)) as u64,
            requests,
            rate: self.rate.filter(|_| conns > 0).map(|r| r * conns as f64 / c as f64),
            connect_rate: self.connect_rate.map(|r| r * (conns + idle) as f64 / all.max(1) as f64),
        }
    }

    /// Refuses a split into `parts` separate `iomux load` runs that would
    /// leave one of them nothing to do or a flag it cannot take.
    pub fn check_split(&self, parts: usize, what: &str) -> CliResult<()> {
        let all = self.conns + self.idle;
        if parts > all {
            bail!("{what} {parts} exceeds the {all} connections (--conns + --idle): each part needs at least one");
        }
        if let Some(r) = self.requests {
            // A run of its own needs --requests >= 1 and someone to send them.
            if self.conns < parts || (r as usize) < parts {
                bail!(
                    "--requests {r} over {} active connections cannot be split into {parts} parts ({what}) \
                     that each send: give at least {parts} of both, or use --per-conn or --duration",
                    self.conns
                );
            }
        }
        Ok(())
    }
}

/// `--shard I/N`: shard I (0-based) of N.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Shard {
    pub index: u32,
    pub count: u32,
}

pub fn parse_shard(s: &str) -> Result<Shard, String> {
    let (i, n) = s.split_once('/').ok_or_else(|| format!("'{s}' is not I/N (e.g. 0/4)"))?;
    let num = |x: &str| x.trim().parse::<u32>().map_err(|e| format!("'{x}' in --shard {s}: {e}"));
    shard(num(i)?, num(n)?)
}

fn shard(index: u32, count: u32) -> Result<Shard, String> {
    if count == 0 {
        return Err("a load cannot have 0 shards".into());
    }
    if index >= count {
        return Err(format!("shard {index} does not exist in {count} shards (they are numbered 0 to {})", count - 1));
    }
    Ok(Shard { index, count })
}

/// The environment variable a Kubernetes Indexed Job sets in each pod.
pub const INDEX_ENV: &str = "JOB_COMPLETION_INDEX";

/// `--shard-count N`: the index from [`INDEX_ENV`].
pub fn shard_from_env(count: u32, index: Option<&str>) -> CliResult<Shard> {
    let index = index.with_context(|| {
        format!("--shard-count {count} takes the shard's index from ${INDEX_ENV}, which is not set (or use --shard I/{count})")
    })?;
    let i = index.trim().parse::<u32>().with_context(|| format!("${INDEX_ENV} is '{index}', not a shard index"))?;
    shard(i, count).map_err(anyhow::Error::msg)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn whole(conns: usize, idle: usize) -> Share {
        Share {
            conns,
            idle,
            first_conn: 7,
            first_idle: 3,
            requests: Some(1001),
            rate: Some(999.0),
            connect_rate: Some(50.0),
        }
    }

    #[test]
    fn shares_add_up() {
        for (n, parts) in [(10, 3), (100, 7), (0, 2), (5, 5)] {
            assert_eq!((0..parts).map(|i| share(n, parts, i)).sum::<usize>(), n);
            assert_eq!(before(n, parts, parts), n);
        }
    }

    #[test]
    fn parts_cover_the_whole_exactly_and_never_overlap() {
        for (conns, idle, parts) in [(30, 0, 3), (10, 7, 4), (2, 2, 4), (3, 100, 7), (1000, 0, 256)] {
            let w = whole(conns, idle);
            let ps: Vec<Share> = (0..parts).map(|i| w.part(parts, i)).collect();
            assert_eq!(ps.iter().map(|p| p.conns).sum::<usize>(), conns);
            assert_eq!(ps.iter().map(|p| p.idle).sum::<usize>(), idle);
            assert!(ps.iter().all(|p| p.conns + p.idle > 0), "{conns}+{idle} over {parts}: {ps:?}");
            let active = ps.iter().filter(|p| p.conns > 0).count();
            assert_eq!(ps.iter().filter_map(|p| p.requests).sum::<u64>(), if active > 0 { 1001 } else { 0 });
            let rate: f64 = ps.iter().filter_map(|p| p.rate).sum();
            assert!((rate - 999.0).abs() < 1e-6, "{rate}");
            let connect: f64 = ps.iter().filter_map(|p| p.connect_rate).sum();
            assert!((connect - 50.0).abs() < 1e-9);
            // Connection numbers run on from part to part.
            for pair in ps.windows(2) {
                assert_eq!(pair[1].first_conn, pair[0].first_conn + pair[0].conns as u64);
                assert_eq!(pair[1].first_idle, pair[0].first_idle + pair[0].idle as u64);
            }
            assert_eq!(ps[0].first_conn, 7);
        }
    }

    #[test]
    fn parts_of_parts_are_parts_of_the_whole() {
        // Shard 1 of 3, then 2 processes: the same numbers as 6 parts.
        let w = Share { requests: None, ..whole(60, 0) };
        let shard = w.part(3, 1);
        assert_eq!(shard.part(2, 1).first_conn, w.part(6, 3).first_conn);
    }

    #[test]
    fn splits_that_leave_a_part_idle_are_refused() {
        assert!(whole(2, 0).check_split(3, "--procs").unwrap_err().to_string().contains("exceeds"));
        assert!(whole(2, 5).check_split(3, "--procs").unwrap_err().to_string().contains("--requests"));
        assert!(Share { requests: None, ..whole(2, 5) }.check_split(3, "--procs").is_ok());
        assert!(whole(30, 0).check_split(3, "--procs").is_ok());
    }

    #[test]
    fn shard_forms() {
        assert_eq!(parse_shard("2/5"), Ok(Shard { index: 2, count: 5 }));
        assert!(parse_shard("3/3").unwrap_err().contains("does not exist"));
        assert!(parse_shard("0/0").unwrap_err().contains("0 shards"));
        assert!(parse_shard("1").is_err());
        assert_eq!(shard_from_env(4, Some("3")).unwrap(), Shard { index: 3, count: 4 });
        assert!(shard_from_env(4, None).unwrap_err().to_string().contains(INDEX_ENV));
        assert!(shard_from_env(4, Some("4")).is_err());
        assert!(shard_from_env(4, Some("x")).is_err());
    }
}

//! What the serving experiments share (E6 HTTP, E7 RESP and pub/sub): a
//! server of a cell is iomux on a backend or one of the experiment's
//! peers, named and parsed one way; the metrics of a request/response
//! cell, and its plot.

use crate::lab::harness::envelope::Envelope;
use crate::lab::harness::experiment::Metric;
use crate::lab::harness::stats::Estimate;
use crate::lab::render::markdown::cell as shown;
use crate::lab::render::plot;
use crate::CliResult;

/// `servers!(Server { Nginx => "nginx" })`: the enum of a serving
/// experiment's servers, `Iomux(Backend)` and the peers listed, with
/// `Display` ("iomux-epoll", "nginx"), `FromStr` (the same names) and
/// `is_iomux`.
macro_rules! servers {
    ($name:ident { $( $(#[$doc:meta])* $peer:ident => $text:literal ),+ $(,)? }) => {
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        pub enum $name {
            Iomux(iomux::Backend),
            $( $(#[$doc])* $peer, )+
        }

        impl $name {
            pub fn is_iomux(&self) -> bool {
                matches!(self, $name::Iomux(_))
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                match self {
                    $name::Iomux(b) => write!(f, "iomux-{b}"),
                    $( $name::$peer => f.write_str($text), )+
                }
            }
        }

        impl std::str::FromStr for $name {
            type Err = String;
            fn from_str(s: &str) -> Result<$name, String> {
                match s {
                    $( $text => Ok($name::$peer), )+
                    _ => crate::lab::harness::iomux_server(s)
                        .unwrap_or_else(|| Err(format!("unknown server '{s}'")))
                        .map($name::Iomux),
                }
            }
        }
    };
}
pub(crate) use servers;

/// The metrics `iomux report A B` compares for request/response cells
/// (E6's and E7's).
pub fn request_metrics<R: RequestRun>() -> Vec<Metric<R>> {
    vec![
        Metric {
            name: "requests/s",
            unit: "1/s",
            higher_is_better: true,
            get: |r| if r.served() { r.requests_per_sec() } else { f64::NAN },
        },
        Metric {
            name: "server CPU per request",
            unit: "us",
            higher_is_better: false,
            get: |r| if r.served() { r.server_cpu_us_per_request() } else { f64::NAN },
        },
    ]
}

/// What a request/response run measured, as its table row reads it.
pub trait RequestRun {
    fn requests_per_sec(&self) -> f64;
    fn server_cpu_us_per_request(&self) -> f64;
    /// Shares of one CPU over the run.
    fn server_util(&self) -> f64;
    fn client_util(&self) -> f64;
    /// Periods the CPU quota held the server back (bound cells).
    fn throttled_periods(&self) -> Option<u64>;
    /// Whether it served requests (a memory cell holds connections only):
    /// its request figures mean nothing otherwise.
    fn served(&self) -> bool {
        true
    }
}

/// `request_run!(Run)`: [`RequestRun`] for a run type with a `report`
/// that has `requests_per_sec`, and fields of the trait's names.
macro_rules! request_run {
    ($run:ty $(, served: $served:expr)?) => {
        impl $crate::lab::experiments::serving::RequestRun for $run {
            fn requests_per_sec(&self) -> f64 {
                self.report.requests_per_sec
            }
            fn server_cpu_us_per_request(&self) -> f64 {
                self.server_cpu_us_per_request
            }
            fn server_util(&self) -> f64 {
                self.server_util
            }
            fn client_util(&self) -> f64 {
                self.client_util
            }
            fn throttled_periods(&self) -> Option<u64> {
                self.throttled_periods
            }
            $(fn served(&self) -> bool {
                ($served)(self)
            })?
        }
    };
}
pub(crate) use request_run;

/// A server using this much of its quota used all of it (the quota's
/// accounting lags by a period at each edge of a run).
const QUOTA_USED: f64 = 0.9;

/// The headers of [`request_row`]'s cells.
pub const REQUEST_COLUMNS: [&str; 7] =
    ["server", "runs", "requests/s", "/ nginx", "server CPU us/req", "server CPU", "client CPU"];

/// The cells a request table's row starts with: the server's name with
/// its footnotes (why the arm was not measured, a saturated client, a
/// quota that never held the server back), runs, requests/s, their ratio
/// to `reference`'s, server CPU per request, and the server's and the
/// client's CPU shares. `quota`: the share of a CPU the server had, in the
/// bound scenario.
pub fn request_row<P, K: PartialEq + std::fmt::Display, S: RequestRun>(
    env: &Envelope<P, K, S>,
    (arm, name, quota): (&K, String, Option<f64>),
    reference: Option<Estimate>,
    saturated_at: f64,
    footnote: &mut dyn FnMut(&str) -> String,
) -> Vec<String> {
    let mut name = name;
    if let Some(why) = env.note(arm) {
        name = format!("{name} {}", footnote(why));
    }
    let client_util = env.estimate(arm, S::client_util).map(|e| e.median);
    // In the quota, a server held back in every run and using all of its
    // share set the pace whatever the client's CPU says (wrk reconnecting
    // keeps its CPU busy at any rate).
    let server_util = env.estimate(arm, S::server_util).map(|e| e.median);
    let held_back = quota.is_some_and(|share| {
        env.kept(arm).all(|r| r.throttled_periods().is_some_and(|n| n > 0))
            && server_util.is_some_and(|u| u >= QUOTA_USED * share)
    });
    if let Some(u) = client_util.filter(|&u| u >= saturated_at) {
        let why = match held_back {
            false => {
                format!("{arm}: the client used {:.0}% of its CPU: these requests/s measure the client", u * 100.0)
            }
            true => format!(
                "{arm}: the client used {:.0}% of its CPU, but the server used its whole quota and was held \
                 back in every run: the server set the pace",
                u * 100.0
            ),
        };
        name = format!("{name} {}", footnote(&why));
    }
    if quota.is_some() && env.kept(arm).any(|r| r.throttled_periods() == Some(0)) {
        name = format!("{name} {}", footnote(&format!("{arm}: the quota never held the server back in some runs")));
    }
    let rate = env.estimate(arm, S::requests_per_sec);
    vec![
        name,
        env.kept(arm).count().to_string(),
        shown(rate),
        fixed(rate.zip(reference).map(|(r, n)| r.median / n.median), 2),
        shown(env.estimate(arm, S::server_cpu_us_per_request)),
        percent(env.estimate(arm, S::server_util).map(|e| e.median)),
        percent(client_util),
    ]
}

/// `v` with `digits` decimals, or "-".
pub fn fixed(v: Option<f64>, digits: usize) -> String {
    v.map_or("-".into(), |v| format!("{v:.digits$}"))
}

fn percent(v: Option<f64>) -> String {
    v.map_or("-".into(), |v| format!("{:.0}%", v * 100.0))
}

/// Requests/s per server (median, whiskers its 95% interval), a group of
/// bars per entry of `groups`, each server's arm in it made by `arm`.
pub fn requests_bars<P, K: PartialEq, S: RequestRun, V: Copy + std::fmt::Display, G: Copy>(
    (env, servers): (&Envelope<P, K, S>, &[V]),
    groups: Vec<(String, G)>,
    arm: impl Fn(V, G) -> K,
    (what, x_label): (&str, &str),
) -> CliResult<String> {
    let title = format!("{what} (median, whiskers its 95% interval)");
    plot::bars_per_server(env, servers, groups, |v, &g| arm(v, g), S::requests_per_sec, (&title, x_label, "requests/s"))
}

#[cfg(test)]
mod tests {
    servers!(Server {
        /// A peer.
        Nginx => "nginx",
        Floor => "floor",
    });

    #[test]
    fn names_read_back_as_the_servers_they_name() {
        for s in [Server::Iomux(iomux::Backend::EpollEt), Server::Nginx, Server::Floor] {
            assert_eq!(s.to_string().parse::<Server>(), Ok(s));
        }
        assert_eq!(Server::Iomux(iomux::Backend::Uring).to_string(), "iomux-uring");
        assert!(Server::Iomux(iomux::Backend::Poll).is_iomux() && !Server::Nginx.is_iomux());
        assert_eq!("apache".parse::<Server>(), Err("unknown server 'apache'".to_string()));
    }
}

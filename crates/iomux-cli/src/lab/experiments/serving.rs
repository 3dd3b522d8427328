//! What the serving experiments share (E6 HTTP, E7 RESP and pub/sub): a
//! server of a cell is iomux on a backend or one of the experiment's
//! peers, named and parsed one way; the metrics of a request/response
//! cell, and its plot.

use crate::lab::harness::envelope::Envelope;
use crate::lab::harness::experiment::Metric;
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
/// (E6's and E7's), read by `rate` and `cpu`.
pub fn request_metrics<R>(rate: fn(&R) -> f64, cpu: fn(&R) -> f64) -> Vec<Metric<R>> {
    vec![
        Metric { name: "requests/s", unit: "1/s", higher_is_better: true, get: rate },
        Metric { name: "server CPU per request", unit: "us", higher_is_better: false, get: cpu },
    ]
}

/// Requests/s per server (median, whiskers its 95% interval), a group of
/// bars per entry of `groups`, each server's arm in it made by `arm`.
pub fn requests_bars<P, K: PartialEq, S, V: Copy + std::fmt::Display, G: Copy>(
    env: &Envelope<P, K, S>,
    servers: &[V],
    groups: Vec<(String, G)>,
    arm: impl Fn(V, G) -> K,
    rate: fn(&S) -> f64,
    (what, x_label): (&str, &str),
) -> CliResult<String> {
    let title = format!("{what} (median, whiskers its 95% interval)");
    plot::bars_per_server(env, servers, groups, |v, &g| arm(v, g), rate, (&title, x_label, "requests/s"))
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

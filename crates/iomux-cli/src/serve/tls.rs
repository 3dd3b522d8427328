//! `iomux serve`'s TLS: a certificate from PEM files, or one made at
//! start for tests and the lab, and the loops run with every connection
//! behind a TLS layer (iomux-tls, on rustls).

use crate::stats::{ServerStats, TlsCounts};
use crate::CliResult;
use anyhow::{bail, Context as _};
use iomux::runtime::{Finished, Handler, Runtime};
use iomux_tls::rustls::ServerConfig;
use iomux_tls::{certs, Tls};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The names a made certificate is for.
const SELF_SIGNED_NAMES: [&str; 2] = ["localhost", "127.0.0.1"];

#[derive(clap::Args, Debug, Clone, Default)]
pub struct TlsArgs {
    /// Serve over TLS (1.2 and 1.3, rustls) with this certificate chain,
    /// PEM, the server's certificate first (with --tls-key). Given again,
    /// with a --tls-key each: a client's SNI chooses the first certificate
    /// valid for the name it asks for, and the first serves clients that
    /// send no name or an unknown one.
    #[arg(long, value_name = "PEM", requires = "tls_key", conflicts_with = "tls_self_signed")]
    pub tls_cert: Vec<PathBuf>,
    /// The private key of --tls-cert, PEM (PKCS#8, PKCS#1 or SEC1); one
    /// per --tls-cert, in the same order.
    #[arg(long, value_name = "PEM", requires = "tls_cert")]
    pub tls_key: Vec<PathBuf>,
    /// Serve over TLS with a self-signed ECDSA P-256 certificate for
    /// localhost and 127.0.0.1, made at start and written as cert.pem and
    /// key.pem into DIR, for clients to trust (curl --cacert DIR/cert.pem)
    /// [default DIR: a new private folder, printed at start, removed at
    /// the end]
    #[arg(long, value_name = "DIR", num_args = 0..=1, default_missing_value = "")]
    pub tls_self_signed: Option<PathBuf>,
    /// Offer only these cipher suites, comma-separated, by rustls's names
    /// (TLS13_AES_128_GCM_SHA256, TLS13_AES_256_GCM_SHA384,
    /// TLS13_CHACHA20_POLY1305_SHA256, TLS_ECDHE_ECDSA_WITH_...) [default:
    /// all of rustls's, in its order]
    #[arg(long, value_name = "LIST", value_delimiter = ',')]
    pub tls_suites: Vec<String>,
    /// Offer only these key exchange groups, comma-separated (X25519,
    /// secp256r1, secp384r1, X25519MLKEM768) [default: rustls's]
    #[arg(long, value_name = "LIST", value_delimiter = ',')]
    pub tls_groups: Vec<String>,
    /// Neither session tickets nor a session cache: every handshake is a
    /// full one (a benchmark of full handshakes; clients resume otherwise)
    #[arg(long)]
    pub tls_no_resumption: bool,
}

/// The TLS a server runs with, ready before anything is served.
pub struct TlsSetup {
    pub config: Arc<ServerConfig>,
    /// The files, as the workers of --procs read them (the first pair
    /// is the default certificate).
    pub certs: Vec<PathBuf>,
    pub keys: Vec<PathBuf>,
    /// A made certificate: said at start.
    pub made: bool,
    /// Where a made certificate lives when no DIR was given.
    _dir: Option<crate::os::PrivateDir>,
}

impl TlsArgs {
    /// Loads or makes the certificate, refusing a bad one before serving;
    /// None without TLS flags. `alpn`: the protocols to offer.
    pub fn setup(&self, alpn: &[&[u8]]) -> CliResult<Option<TlsSetup>> {
        let offer = certs::Offer {
            alpn: alpn.iter().map(|p| p.to_vec()).collect(),
            suites: self.tls_suites.clone(),
            groups: self.tls_groups.clone(),
            no_resumption: self.tls_no_resumption,
        };
        if self.tls_cert.len() != self.tls_key.len() {
            let (c, k) = (self.tls_cert.len(), self.tls_key.len());
            bail!("{c} --tls-cert and {k} --tls-key: each certificate needs its key");
        }
        if !self.tls_cert.is_empty() {
            let pairs = self.tls_cert.iter().zip(&self.tls_key);
            let identities = pairs
                .map(|(cert, key)| certs::load(cert, key))
                .collect::<Result<Vec<_>, _>>()
                .map_err(anyhow::Error::msg)?;
            let config = certs::server_config_offering(&identities, &offer).map_err(anyhow::Error::msg)?;
            let (certs, keys) = (self.tls_cert.clone(), self.tls_key.clone());
            return Ok(Some(TlsSetup { config, certs, keys, made: false, _dir: None }));
        }
        let Some(dir) = &self.tls_self_signed else {
            let chosen = !self.tls_suites.is_empty() || !self.tls_groups.is_empty() || self.tls_no_resumption;
            if chosen {
                bail!("--tls-suites, --tls-groups and --tls-no-resumption need --tls-cert or --tls-self-signed");
            }
            return Ok(None);
        };
        let identity = certs::self_signed(&SELF_SIGNED_NAMES).map_err(anyhow::Error::msg)?;
        let (dir, private) = if dir.as_os_str().is_empty() {
            let private = crate::os::PrivateDir::new("iomux-tls", "the made certificate")?;
            (private.path().to_path_buf(), Some(private))
        } else {
            std::fs::create_dir_all(dir).with_context(|| format!("--tls-self-signed: creating {}", dir.display()))?;
            (dir.clone(), None)
        };
        let (cert, key) = (dir.join("cert.pem"), dir.join("key.pem"));
        write_private(&cert, &identity.chain_pem, 0o644)?;
        write_private(&key, &identity.key_pem, 0o600)?;
        let config =
            certs::server_config_offering(std::slice::from_ref(&identity), &offer).map_err(anyhow::Error::msg)?;
        Ok(Some(TlsSetup { config, certs: vec![cert], keys: vec![key], made: true, _dir: private }))
    }
}

fn write_private(path: &Path, text: &str, mode: u32) -> CliResult<()> {
    use std::io::Write;
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(mode)
        .open(path)
        .with_context(|| format!("writing {}", path.display()))?;
    // A file that was there keeps its mode otherwise: a key must not.
    let mode = std::fs::Permissions::from_mode(mode);
    file.set_permissions(mode).with_context(|| format!("setting the mode of {}", path.display()))?;
    file.write_all(text.as_bytes()).with_context(|| format!("writing {}", path.display()))?;
    Ok(())
}

impl TlsSetup {
    /// What the banner says of it.
    pub fn describe(&self) -> String {
        let files: Vec<String> = self.certs.iter().map(|c| c.display().to_string()).collect();
        let by_name = if files.len() > 1 { ", chosen by SNI" } else { "" };
        if self.made {
            format!("TLS, self-signed for {}: {}", SELF_SIGNED_NAMES.join(" and "), files.join(", "))
        } else {
            format!("TLS: {}{by_name}", files.join(", "))
        }
    }
}

/// Runs the loops with `make`'s handlers, each connection behind a TLS
/// layer when `tls` is set; the handlers come back as made, and the TLS
/// figures go into `stats`.
pub fn run_loops<H, F>(
    runtime: Runtime,
    tls: Option<&TlsSetup>,
    stats: &mut ServerStats,
    make: F,
) -> iomux::Result<Finished<H>>
where
    H: Handler + Send,
    F: Fn(usize) -> H + Sync,
{
    let Some(tls) = tls else { return runtime.run(make) };
    let finished = runtime.run(|i| Tls::new(make(i), tls.config.clone()))?;
    let mut counts = TlsCounts::default();
    for handler in &finished.handlers {
        let handshakes = handler.handshakes();
        counts.full_handshakes += handshakes.full;
        counts.resumed_handshakes += handshakes.resumed;
        counts.failed += handler.failed + handler.refused;
    }
    stats.tls = Some(counts);
    let handlers = finished.handlers.into_iter().map(Tls::into_inner).collect();
    Ok(Finished { handlers, loops: finished.loops, stats: finished.stats })
}

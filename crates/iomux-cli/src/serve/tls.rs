//! `iomux serve`'s TLS: a certificate from PEM files, or one made at
//! start for tests and the lab, and the loops run with every connection
//! behind a TLS layer (iomux-tls, on rustls).

use crate::CliResult;
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
    /// PEM, the server's certificate first (with --tls-key).
    #[arg(long, value_name = "PEM", requires = "tls_key", conflicts_with = "tls_self_signed")]
    pub tls_cert: Option<PathBuf>,
    /// The private key of --tls-cert, PEM (PKCS#8, PKCS#1 or SEC1).
    #[arg(long, value_name = "PEM", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// Serve over TLS with a self-signed ECDSA P-256 certificate for
    /// localhost and 127.0.0.1, made at start and written as cert.pem and
    /// key.pem into DIR, for clients to trust (curl --cacert DIR/cert.pem)
    /// [default DIR: a new private folder, printed at start, removed at
    /// the end]
    #[arg(long, value_name = "DIR", num_args = 0..=1, default_missing_value = "")]
    pub tls_self_signed: Option<PathBuf>,
}

/// The TLS a server runs with, ready before anything is served.
pub struct TlsSetup {
    pub config: Arc<ServerConfig>,
    /// The files, as the workers of --procs read them.
    pub cert: PathBuf,
    pub key: PathBuf,
    /// A made certificate: said at start.
    pub made: bool,
    /// Where a made certificate lives when no DIR was given.
    _dir: Option<crate::os::PrivateDir>,
}

impl TlsArgs {
    /// Loads or makes the certificate, refusing a bad one before serving;
    /// None without TLS flags. `alpn`: the protocols to offer.
    pub fn setup(&self, alpn: &[&[u8]]) -> CliResult<Option<TlsSetup>> {
        if let (Some(cert), Some(key)) = (&self.tls_cert, &self.tls_key) {
            let identity = certs::load(cert, key)?;
            let config = certs::server_config(&identity, alpn)?;
            return Ok(Some(TlsSetup { config, cert: cert.clone(), key: key.clone(), made: false, _dir: None }));
        }
        let Some(dir) = &self.tls_self_signed else { return Ok(None) };
        let identity = certs::self_signed(&SELF_SIGNED_NAMES)?;
        let (dir, private) = if dir.as_os_str().is_empty() {
            let private = crate::os::PrivateDir::new("iomux-tls", "the made certificate")?;
            (private.path().to_path_buf(), Some(private))
        } else {
            std::fs::create_dir_all(dir).map_err(|e| format!("--tls-self-signed: creating {}: {e}", dir.display()))?;
            (dir.clone(), None)
        };
        let (cert, key) = (dir.join("cert.pem"), dir.join("key.pem"));
        write_private(&cert, &identity.chain_pem, 0o644)?;
        write_private(&key, &identity.key_pem, 0o600)?;
        let config = certs::server_config(&identity, alpn)?;
        Ok(Some(TlsSetup { config, cert, key, made: true, _dir: private }))
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
        .map_err(|e| format!("writing {}: {e}", path.display()))?;
    // A file that was there keeps its mode otherwise: a key must not.
    let mode = std::fs::Permissions::from_mode(mode);
    file.set_permissions(mode).map_err(|e| format!("setting the mode of {}: {e}", path.display()))?;
    file.write_all(text.as_bytes()).map_err(|e| format!("writing {}: {e}", path.display()))?;
    Ok(())
}

impl TlsSetup {
    /// What the banner says of it.
    pub fn describe(&self) -> String {
        if self.made {
            format!("TLS, self-signed for {}: {}", SELF_SIGNED_NAMES.join(" and "), self.cert.display())
        } else {
            format!("TLS: {}", self.cert.display())
        }
    }
}

/// Runs the loops with `make`'s handlers, each connection behind a TLS
/// layer when `tls` is set; the handlers come back as made.
pub fn run_loops<H, F>(runtime: Runtime, tls: Option<&TlsSetup>, make: F) -> iomux::Result<Finished<H>>
where
    H: Handler + Send,
    F: Fn(usize) -> H + Sync,
{
    let Some(tls) = tls else { return runtime.run(make) };
    let finished = runtime.run(|i| Tls::new(make(i), tls.config.clone()))?;
    let handlers = finished.handlers.into_iter().map(Tls::into_inner).collect();
    Ok(Finished { handlers, loops: finished.loops, stats: finished.stats })
}

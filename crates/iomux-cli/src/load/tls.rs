//! `iomux load --tls-ca`: every connection of the load behind a TLS
//! client layer (iomux-tls), trusting the given certificates.

use super::LoadArgs;
use crate::CliResult;
use anyhow::Context as _;
use iomux::runtime::{ConnId, Io};
use iomux_tls::rustls::client::Resumption;
use iomux_tls::rustls::pki_types::ServerName;
use iomux_tls::rustls::ClientConfig;
use std::sync::Arc;

/// What every loop's connections share: one config (its session cache
/// serves all of them, so later connections resume) and the server's name.
#[derive(Debug)]
pub struct TlsClient {
    config: Arc<ClientConfig>,
    name: ServerName<'static>,
}

/// The TLS client the flags ask for, None without --tls-ca; a certificate
/// file or a name that is not usable is refused by name.
pub fn client(args: &LoadArgs) -> CliResult<Option<Arc<TlsClient>>> {
    let Some(ca) = &args.tls_ca else { return Ok(None) };
    let roots = iomux_tls::certs::roots(ca).map_err(anyhow::Error::msg)?;
    let mut config = ClientConfig::builder().with_root_certificates(roots).with_no_client_auth();
    if args.tls_full_handshakes {
        config.resumption = Resumption::disabled();
    }
    let name = ServerName::try_from(args.tls_name.clone())
        .with_context(|| format!("--tls-name {:?} is not a DNS name or an IP address", args.tls_name))?;
    Ok(Some(Arc::new(TlsClient { config: Arc::new(config), name })))
}

impl TlsClient {
    /// Puts a client layer on the connection just opened; one that cannot
    /// have it is reset (it comes to on_close as any failed connection),
    /// never used in the clear.
    pub fn layer_on<S>(&self, io: &mut Io<S>, conn: ConnId) {
        let layered = iomux_tls::client_layer(&self.config, self.name.clone()).map(|layer| io.set_layer(conn, layer));
        if !matches!(layered, Ok(true)) {
            io.abort(conn);
        }
    }
}

//! Certificates and configs: from PEM files, or made on the spot
//! (ECDSA P-256, self-signed) for tests, the lab and `--tls-self-signed`.

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::ServerSessionMemoryCache;
use rustls::{RootCertStore, ServerConfig};
use std::path::Path;
use std::sync::Arc;

/// A certificate chain and its key.
pub struct Identity {
    /// The chain, the server's own certificate first.
    pub chain: Vec<CertificateDer<'static>>,
    /// The certificate's private key.
    pub key: PrivateKeyDer<'static>,
    /// The chain as PEM (for a client to trust, or for nginx).
    pub chain_pem: String,
    /// The key as PEM.
    pub key_pem: String,
}

impl Identity {
    /// A root store that trusts this identity's own certificate (a
    /// self-signed one is its own root).
    pub fn roots(&self) -> Result<RootCertStore, String> {
        let mut roots = RootCertStore::empty();
        for cert in &self.chain {
            roots.add(cert.clone()).map_err(|e| format!("trusting the certificate: {e}"))?;
        }
        Ok(roots)
    }
}

/// Reads a PEM certificate chain and a PEM private key (PKCS#8, PKCS#1
/// or SEC1), naming the file and what is wrong with it.
pub fn load(chain: &Path, key: &Path) -> Result<Identity, String> {
    let read = |path: &Path| std::fs::read_to_string(path).map_err(|e| format!("reading {}: {e}", path.display()));
    let (chain_pem, key_pem) = (read(chain)?, read(key)?);
    let certs = CertificateDer::pem_slice_iter(chain_pem.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("{}: not a PEM certificate chain: {e}", chain.display()))?;
    if certs.is_empty() {
        return Err(format!("{}: no CERTIFICATE block", chain.display()));
    }
    let private = PrivateKeyDer::from_pem_slice(key_pem.as_bytes())
        .map_err(|e| format!("{}: not a PEM private key: {e}", key.display()))?;
    Ok(Identity { chain: certs, key: private, chain_pem, key_pem })
}

/// A root store of every certificate in a PEM file (a client trusting a
/// self-signed server trusts its certificate itself).
pub fn roots(pem: &Path) -> Result<RootCertStore, String> {
    let text = std::fs::read_to_string(pem).map_err(|e| format!("reading {}: {e}", pem.display()))?;
    let mut roots = RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(text.as_bytes()) {
        let cert = cert.map_err(|e| format!("{}: not a PEM certificate: {e}", pem.display()))?;
        roots.add(cert).map_err(|e| format!("{}: a certificate that cannot be trusted: {e}", pem.display()))?;
    }
    if roots.is_empty() {
        return Err(format!("{}: no CERTIFICATE block", pem.display()));
    }
    Ok(roots)
}

/// A self-signed ECDSA P-256 certificate for `names` (DNS names or IP
/// addresses), made now.
pub fn self_signed(names: &[&str]) -> Result<Identity, String> {
    let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
    let made = rcgen::generate_simple_self_signed(names).map_err(|e| format!("making a certificate: {e}"))?;
    let key = PrivateKeyDer::try_from(made.key_pair.serialize_der()).map_err(|e| format!("its key: {e}"))?;
    Ok(Identity {
        chain: vec![made.cert.der().clone()],
        key,
        chain_pem: made.cert.pem(),
        key_pem: made.key_pair.serialize_pem(),
    })
}

/// A server config for `identity`: TLS 1.2 and 1.3 with rustls's default
/// suites and provider, ALPN `alpn` in order of preference (none: no
/// ALPN), resumption by stateless tickets (TLS 1.3) and by a session cache
/// (TLS 1.2), no early data, no client certificates.
pub fn server_config(identity: &Identity, alpn: &[&[u8]]) -> Result<Arc<ServerConfig>, String> {
    let mut config = ServerConfig::builder()
        .with_no_client_auth()
        .with_single_cert(identity.chain.clone(), identity.key.clone_key())
        .map_err(|e| format!("the certificate and key do not make a server config: {e}"))?;
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    config.ticketer = rustls::crypto::aws_lc_rs::Ticketer::new().map_err(|e| format!("session tickets: {e}"))?;
    config.session_storage = ServerSessionMemoryCache::new(4096);
    config.max_early_data_size = 0;
    Ok(Arc::new(config))
}

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

/// What a server config offers besides its certificate.
#[derive(Clone, Debug, Default)]
pub struct Offer {
    /// ALPN protocols in order of preference (none: no ALPN).
    pub alpn: Vec<Vec<u8>>,
    /// Cipher suites by rustls's names (`TLS13_AES_128_GCM_SHA256`);
    /// empty: every suite of the provider, in its order.
    pub suites: Vec<String>,
    /// Key exchange groups by name (`X25519`, `secp256r1`); empty: the
    /// provider's.
    pub groups: Vec<String>,
    /// Neither tickets nor a session cache: every handshake is a full one.
    pub no_resumption: bool,
}

/// A server config for `identity`: TLS 1.2 and 1.3 with rustls's default
/// suites and provider, ALPN `alpn` in order of preference (none: no
/// ALPN), resumption by stateless tickets (TLS 1.3) and by a session cache
/// (TLS 1.2), no early data, no client certificates.
pub fn server_config(identity: &Identity, alpn: &[&[u8]]) -> Result<Arc<ServerConfig>, String> {
    let offer = Offer { alpn: alpn.iter().map(|p| p.to_vec()).collect(), ..Offer::default() };
    server_config_offering(std::slice::from_ref(identity), &offer)
}

/// A server config for `identities` offering what `offer` says. With
/// several, a client's SNI chooses the first certificate valid for its
/// name, and the first one serves a client that sends none or an unknown
/// name. A suite or group the provider does not have is refused by name,
/// with the names it has.
pub fn server_config_offering(identities: &[Identity], offer: &Offer) -> Result<Arc<ServerConfig>, String> {
    let mut provider = rustls::crypto::aws_lc_rs::default_provider();
    let suite_name = |s: &rustls::SupportedCipherSuite| format!("{:?}", s.suite());
    let all: Vec<String> = provider.cipher_suites.iter().map(suite_name).collect();
    chosen("suite", &offer.suites, &all)?;
    provider.cipher_suites.retain(|s| offer.suites.is_empty() || named(&offer.suites, &suite_name(s)));
    let group_name = |g: &&'static dyn rustls::crypto::SupportedKxGroup| format!("{:?}", g.name());
    let all: Vec<String> = provider.kx_groups.iter().map(group_name).collect();
    chosen("group", &offer.groups, &all)?;
    provider.kx_groups.retain(|g| offer.groups.is_empty() || named(&offer.groups, &group_name(g)));
    let provider = Arc::new(provider);
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("the suites and groups chosen make no TLS config: {e}"))?
        .with_no_client_auth();
    let mut config = match identities {
        [] => return Err("a server config needs a certificate".into()),
        [one] => builder
            .with_single_cert(one.chain.clone(), one.key.clone_key())
            .map_err(|e| format!("the certificate and key do not make a server config: {e}"))?,
        several => {
            let mut keys = Vec::new();
            for (i, id) in several.iter().enumerate() {
                let key = rustls::sign::CertifiedKey::from_der(id.chain.clone(), id.key.clone_key(), &provider)
                    .map_err(|e| format!("certificate {} and its key do not make a server config: {e}", i + 1))?;
                keys.push(Arc::new(key));
            }
            let by_name = crate::sni::ByName::new(keys).ok_or("a server config needs a certificate")?;
            builder.with_cert_resolver(Arc::new(by_name))
        }
    };
    config.alpn_protocols = offer.alpn.clone();
    if offer.no_resumption {
        // The builder's ticketer makes no tickets, but its storage is a
        // cache that TLS 1.2 resumes session IDs from: replaced by one that
        // stores nothing. And no TLS 1.3 ticket is even sent.
        config.session_storage = Arc::new(rustls::server::NoServerSessionStorage {});
        config.send_tls13_tickets = 0;
    } else {
        config.ticketer = rustls::crypto::aws_lc_rs::Ticketer::new().map_err(|e| format!("session tickets: {e}"))?;
        config.session_storage = ServerSessionMemoryCache::new(4096);
    }
    config.max_early_data_size = 0;
    Ok(Arc::new(config))
}

fn named(names: &[String], name: &str) -> bool {
    names.iter().any(|n| n.eq_ignore_ascii_case(name))
}

/// Refuses a name in `wanted` that is not in `all`.
fn chosen(what: &str, wanted: &[String], all: &[String]) -> Result<(), String> {
    match wanted.iter().find(|w| !named(all, w)) {
        Some(unknown) => Err(format!("no TLS {what} is named {unknown:?}; there are {}", all.join(", "))),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unknown_suite_or_group_is_refused_with_the_known_names() {
        let identity = [self_signed(&["localhost"]).unwrap()];
        let offer = |suites: &[&str], groups: &[&str]| Offer {
            suites: suites.iter().map(|s| s.to_string()).collect(),
            groups: groups.iter().map(|s| s.to_string()).collect(),
            ..Offer::default()
        };
        let err = server_config_offering(&identity, &offer(&["TLS13_AES_128_GCM"], &[])).err().unwrap();
        assert!(err.contains("\"TLS13_AES_128_GCM\"") && err.contains("TLS13_AES_128_GCM_SHA256"), "{err}");
        let err = server_config_offering(&identity, &offer(&[], &["x448"])).err().unwrap();
        assert!(err.starts_with("no TLS group is named \"x448\"") && err.contains("X25519"), "{err}");
        // One suite and one group, neither the provider's first: a config.
        let ok = server_config_offering(&identity, &offer(&["TLS13_CHACHA20_POLY1305_SHA256"], &["secp256r1"]));
        assert!(ok.is_ok());
    }
}

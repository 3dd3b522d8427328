//! A certificate chosen by the name a client asks for (SNI), as nginx
//! chooses a `server` block: the first certificate valid for the name (by
//! its subject alternative names, as a client checks them), else the
//! first one, for clients that send no name or an unknown one. The
//! client's signature schemes are not consulted: two certificates for one
//! name (RSA and ECDSA) are not told apart, as by rustls's own resolvers.

use rustls::pki_types::ServerName;
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use std::sync::Arc;

#[derive(Debug)]
pub(crate) struct ByName {
    /// In the order given; never empty.
    keys: Vec<Arc<CertifiedKey>>,
}

impl ByName {
    pub(crate) fn new(keys: Vec<Arc<CertifiedKey>>) -> Option<ByName> {
        (!keys.is_empty()).then_some(ByName { keys })
    }

    fn valid_for(key: &CertifiedKey, name: &ServerName<'_>) -> bool {
        // Parsed at each handshake (a few microseconds for a handful of
        // certificates, against a handshake's hundred): webpki's parsed
        // form borrows the DER, so it is not kept.
        key.end_entity_cert()
            .ok()
            .and_then(|der| webpki::EndEntityCert::try_from(der).ok())
            .is_some_and(|cert| cert.verify_is_valid_for_subject_name(name).is_ok())
    }
}

impl ResolvesServerCert for ByName {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        let first = self.keys.first()?;
        let asked = hello.server_name().and_then(|n| ServerName::try_from(n).ok());
        let chosen = asked.and_then(|name| self.keys.iter().find(|k| Self::valid_for(k, &name)));
        Some(chosen.unwrap_or(first).clone())
    }
}

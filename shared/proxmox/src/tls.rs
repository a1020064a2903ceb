//! How a connection trusts the server's certificate. Verification is never turned off: a
//! self-signed Proxmox certificate is trusted by its pinned SHA-256 fingerprint (the handshake
//! signature is still checked against it), a private CA by its certificate with hostname
//! verification, and anything else by the platform's roots.
//!
//! Whatever the mode, the verifier records the fingerprint the server presented and whether it
//! refused it, so a mismatch can tell the operator exactly what to pin.

use std::sync::{Arc, Mutex};

use pulse_domain::connection::Fingerprint;
use rustls::DigitallySignedStruct;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};

use crate::Error;

/// How the server's certificate is trusted.
#[derive(Clone)]
pub enum TlsMode {
    /// The end-entity certificate's SHA-256 must equal this (Proxmox's default self-signed
    /// certificate). Names and expiry are not checked: the pin is the identity.
    Pinned(Fingerprint),
    /// Certificates (PEM) of a private CA the server's chain must lead to, with its name checked.
    Ca(Vec<CertificateDer<'static>>),
    /// The platform's trusted roots, with the name checked (a publicly signed certificate).
    Public,
}

impl std::fmt::Debug for TlsMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TlsMode::Pinned(fp) => write!(f, "Pinned({fp})"),
            TlsMode::Ca(certs) => write!(f, "Ca({} certificates)", certs.len()),
            TlsMode::Public => f.write_str("Public"),
        }
    }
}

impl TlsMode {
    /// The mode of a stored connection's trust.
    pub fn from_trust(trust: &pulse_domain::connection::Trust) -> Result<Self, Error> {
        use pulse_domain::connection::Trust;
        Ok(match trust {
            Trust::Pinned(fp) => TlsMode::Pinned(*fp),
            Trust::Ca(pem) => TlsMode::ca_pem(pem.as_bytes())?,
            Trust::Public => TlsMode::Public,
        })
    }

    /// A CA mode from PEM text holding one or more certificates.
    pub fn ca_pem(pem: &[u8]) -> Result<Self, Error> {
        let certs = CertificateDer::pem_slice_iter(pem)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| Error::Ca {
                why: format!("the CA file is not PEM certificates ({e})"),
            })?;
        if certs.is_empty() {
            return Err(Error::Ca {
                why: "the CA file holds no certificate (expected -----BEGIN CERTIFICATE-----)"
                    .into(),
            });
        }
        roots(&certs)?;
        Ok(TlsMode::Ca(certs))
    }
}

fn roots(certs: &[CertificateDer<'static>]) -> Result<rustls::RootCertStore, Error> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in certs {
        roots.add(cert.clone()).map_err(|e| Error::Ca {
            why: format!("a certificate of the CA file cannot be a trust anchor ({e})"),
        })?;
    }
    Ok(roots)
}

/// What the last handshake showed.
#[derive(Debug, Clone, Default)]
pub(crate) struct Seen {
    pub presented: Option<Fingerprint>,
    /// Why the certificate was refused, when it was.
    pub refused: Option<String>,
}

#[derive(Debug)]
enum Check {
    Pinned(Fingerprint),
    Delegate(Arc<dyn ServerCertVerifier>),
}

/// The one verifier of every mode: it checks, then records what it saw.
#[derive(Debug)]
pub(crate) struct Verifier {
    check: Check,
    provider: Arc<CryptoProvider>,
    seen: Mutex<Seen>,
}

impl Verifier {
    pub(crate) fn new(mode: &TlsMode) -> Result<Arc<Self>, Error> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let check =
            match mode {
                TlsMode::Pinned(fp) => Check::Pinned(*fp),
                TlsMode::Ca(certs) => {
                    let verifier = rustls::client::WebPkiServerVerifier::builder_with_provider(
                        Arc::new(roots(certs)?),
                        provider.clone(),
                    )
                    .build()
                    .map_err(|e| Error::Ca {
                        why: format!("the CA certificates cannot verify servers ({e})"),
                    })?;
                    Check::Delegate(verifier)
                }
                TlsMode::Public => {
                    let verifier = rustls_platform_verifier::Verifier::new(provider.clone())
                        .map_err(|e| Error::Ca {
                            why: format!("the platform's trusted roots could not be loaded ({e})"),
                        })?;
                    Check::Delegate(Arc::new(verifier))
                }
            };
        Ok(Arc::new(Self {
            check,
            provider,
            seen: Mutex::new(Seen::default()),
        }))
    }

    pub(crate) fn client_config(self: &Arc<Self>) -> Result<rustls::ClientConfig, Error> {
        let mut config = rustls::ClientConfig::builder_with_provider(self.provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|e| Error::Ca {
                why: format!("no TLS version is available ({e})"),
            })?
            .dangerous()
            .with_custom_certificate_verifier(self.clone())
            .with_no_client_auth();
        // pveproxy and the PBS proxy speak HTTP/1.1.
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(config)
    }

    pub(crate) fn seen(&self) -> Seen {
        self.seen.lock().map(|s| s.clone()).unwrap_or_default()
    }

    fn record(&self, presented: Fingerprint, refused: Option<String>) {
        if let Ok(mut seen) = self.seen.lock() {
            *seen = Seen {
                presented: Some(presented),
                refused,
            };
        }
    }
}

impl ServerCertVerifier for Verifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let presented = Fingerprint::of_der(end_entity.as_ref());
        let verdict = match &self.check {
            Check::Pinned(pinned) if *pinned == presented => Ok(ServerCertVerified::assertion()),
            Check::Pinned(pinned) => {
                self.record(
                    presented,
                    Some(format!(
                        "the server presented a certificate with SHA-256 fingerprint {presented}, \
                         not the pinned {pinned}"
                    )),
                );
                return Err(rustls::Error::InvalidCertificate(
                    rustls::CertificateError::ApplicationVerificationFailure,
                ));
            }
            Check::Delegate(inner) => {
                inner.verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
            }
        };
        match &verdict {
            Ok(_) => self.record(presented, None),
            Err(e) => self.record(
                presented,
                Some(format!(
                    "the server's certificate (SHA-256 fingerprint {presented}) was refused: {e}"
                )),
            ),
        }
        verdict
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

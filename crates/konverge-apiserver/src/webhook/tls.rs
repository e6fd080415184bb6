//! A webhook's serving certificate verified as kube-apiserver (Go's `crypto/x509`) verifies
//! it, where that differs from WebPKI's rules.
//!
//! Go accepts a certificate that is itself one of the trusted roots without building a chain
//! (`Verify`: a leaf found in `Roots` is its own chain), whatever its basic constraints say:
//! the self-signed certificate `openssl req -x509` makes, marked as a CA, placed in
//! `caBundle` and served by the webhook, is the most common recipe for a test webhook, and
//! WebPKI refuses it (`CaUsedAsEndEntity`). Such a certificate is still checked for what Go
//! checks of every leaf: its validity period, that it names the server (subject alternative
//! names only, no common name), and that its extended key usages, if any, allow serving TLS.
//! Every other certificate goes through WebPKI's verification.

use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{CertificateError, DigitallySignedStruct, Error, SignatureScheme};

/// WebPKI's verifier, with Go's acceptance of a trusted root served as the leaf.
#[derive(Debug)]
pub(super) struct GoVerifier {
    webpki: Arc<rustls::client::WebPkiServerVerifier>,
    roots: Vec<CertificateDer<'static>>,
}

impl GoVerifier {
    /// A verifier trusting `roots` (the `caBundle`'s certificates).
    pub(super) fn new(
        roots: Vec<CertificateDer<'static>>,
        provider: Arc<rustls::crypto::CryptoProvider>,
    ) -> Result<GoVerifier, String> {
        let mut store = rustls::RootCertStore::empty();
        for root in &roots {
            store.add(root.clone()).map_err(|e| e.to_string())?;
        }
        let webpki =
            rustls::client::WebPkiServerVerifier::builder_with_provider(Arc::new(store), provider)
                .build()
                .map_err(|e| e.to_string())?;
        Ok(GoVerifier { webpki, roots })
    }

    /// Go's checks of a leaf that is a trusted root.
    fn verify_trusted_leaf(
        end_entity: &CertificateDer<'_>,
        server_name: &ServerName<'_>,
        now: UnixTime,
    ) -> Result<ServerCertVerified, Error> {
        let usage = crate::auth::x509::usage(end_entity)
            .map_err(|_| Error::InvalidCertificate(CertificateError::BadEncoding))?;
        let now = i64::try_from(now.as_secs()).unwrap_or(i64::MAX);
        if now < usage.not_before {
            return Err(Error::InvalidCertificate(CertificateError::NotValidYet));
        }
        if now > usage.not_after {
            return Err(Error::InvalidCertificate(CertificateError::Expired));
        }
        let parsed = rustls::server::ParsedCertificate::try_from(end_entity)?;
        rustls::client::verify_server_name(&parsed, server_name)?;
        if !usage.server_auth {
            return Err(Error::InvalidCertificate(CertificateError::InvalidPurpose));
        }
        Ok(ServerCertVerified::assertion())
    }
}

impl ServerCertVerifier for GoVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, Error> {
        if self
            .roots
            .iter()
            .any(|root| root.as_ref() == end_entity.as_ref())
        {
            return Self::verify_trusted_leaf(end_entity, server_name, now);
        }
        self.webpki
            .verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        self.webpki.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        self.webpki.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.webpki.supported_verify_schemes()
    }
}

/// No verification of the server's certificate (`insecureSkipTLSVerify`), but of the
/// handshake's signatures with it, as Go's `InsecureSkipVerify` does.
#[derive(Debug)]
pub(super) struct Unverified {
    provider: Arc<rustls::crypto::CryptoProvider>,
}

impl Unverified {
    pub(super) fn new(provider: Arc<rustls::crypto::CryptoProvider>) -> Unverified {
        Unverified { provider }
    }
}

impl ServerCertVerifier for Unverified {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
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
    ) -> Result<HandshakeSignatureValid, Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

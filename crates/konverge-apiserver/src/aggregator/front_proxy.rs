//! The identity the server proxies to aggregated API servers with: kube-apiserver's
//! `--proxy-client-cert-file` (a client certificate, `CN=front-proxy-client` as kubeadm makes
//! it) signed by `--requestheader-client-ca-file`, which it publishes, with the names and
//! headers an aggregated server must accept, in the `kube-system/extension-apiserver-authentication`
//! ConfigMap.

use std::sync::{Arc, OnceLock};

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose,
};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use serde_json::{Value, json};

use crate::webhook::ClientIdentity;

/// The client certificate's common name, as kubeadm makes it.
pub const CLIENT_NAME: &str = "front-proxy-client";

/// The front proxy's CA and client certificate.
#[derive(Clone)]
pub struct FrontProxy {
    ca_pem: String,
    identity: ClientIdentity,
}

impl std::fmt::Debug for FrontProxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FrontProxy")
            .field("ca_pem", &self.ca_pem)
            .finish_non_exhaustive()
    }
}

/// A front proxy identity that cannot be used.
#[derive(Debug, thiserror::Error)]
#[error("the front proxy's {what}: {reason}")]
pub struct FrontProxyError {
    what: &'static str,
    reason: String,
}

impl FrontProxy {
    /// The CA (PEM) `cert_pem` was signed by, and the client certificate and its key (PEM).
    pub fn from_pem(
        ca_pem: &str,
        cert_pem: &str,
        key_pem: &str,
    ) -> Result<FrontProxy, FrontProxyError> {
        let error = |what: &'static str| {
            move |e: rustls::pki_types::pem::Error| FrontProxyError {
                what,
                reason: e.to_string(),
            }
        };
        CertificateDer::pem_slice_iter(ca_pem.as_bytes())
            .next()
            .ok_or(FrontProxyError {
                what: "CA",
                reason: "no certificate".into(),
            })?
            .map_err(error("CA"))?;
        let chain = CertificateDer::pem_slice_iter(cert_pem.as_bytes())
            .collect::<Result<Vec<_>, _>>()
            .map_err(error("client certificate"))?;
        let key = PrivateKeyDer::from_pem_slice(key_pem.as_bytes()).map_err(error("key"))?;
        Ok(FrontProxy {
            ca_pem: ca_pem.to_string(),
            identity: ClientIdentity {
                chain,
                key: Arc::new(key),
            },
        })
    }

    /// A CA and client certificate made for this process (one per process: every server
    /// built in it proxies as the same front proxy).
    pub fn for_this_process() -> Result<Arc<FrontProxy>, FrontProxyError> {
        static MADE: OnceLock<Result<Arc<FrontProxy>, String>> = OnceLock::new();
        MADE.get_or_init(|| generate().map(Arc::new).map_err(|e| e.to_string()))
            .clone()
            .map_err(|reason| FrontProxyError {
                what: "certificates",
                reason,
            })
    }

    /// The CA (PEM) aggregated servers verify the front proxy by.
    pub fn ca_pem(&self) -> &str {
        &self.ca_pem
    }

    pub(crate) fn identity(&self) -> &ClientIdentity {
        &self.identity
    }

    /// What kube-apiserver publishes of it in `extension-apiserver-authentication`: the CA
    /// and, as JSON lists, the allowed names and the headers carrying the user.
    pub fn request_header_data(&self) -> Value {
        json!({
            "requestheader-client-ca-file": self.ca_pem,
            "requestheader-allowed-names": format!("[\"{CLIENT_NAME}\"]"),
            "requestheader-username-headers": "[\"X-Remote-User\"]",
            "requestheader-group-headers": "[\"X-Remote-Group\"]",
            "requestheader-extra-headers-prefix": "[\"X-Remote-Extra-\"]",
        })
    }
}

fn generate() -> Result<FrontProxy, rcgen::Error> {
    let mut ca_params = CertificateParams::default();
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "front-proxy-ca");
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate()?)?;
    let key = KeyPair::generate()?;
    let mut params = CertificateParams::default();
    params
        .distinguished_name
        .push(DnType::CommonName, CLIENT_NAME);
    params.is_ca = IsCa::ExplicitNoCa;
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    params.use_authority_key_identifier_extension = true;
    let cert = params.signed_by(&key, &ca)?;
    Ok(FrontProxy {
        ca_pem: ca.pem(),
        identity: ClientIdentity {
            chain: vec![cert.der().clone()],
            key: Arc::new(PrivateKeyDer::Pkcs8(key.serialize_der().into())),
        },
    })
}

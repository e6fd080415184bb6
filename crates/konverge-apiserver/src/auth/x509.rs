//! X.509 client certificates: what a certificate's subject says about its holder, read as
//! kube-apiserver reads it, and issuing one signed by a CA (what `konverge kubeconfig --user`
//! hands out); and serving certificates signed by the same CA, one per server of a cluster.
//!
//! kube-apiserver's mapping: the subject's common name is the user (the last CN when there are
//! several; a certificate without one authenticates nobody), every organization (O) is a group,
//! in order, and the kube UID attribute (`1.3.6.1.4.1.57683.2`), if present, is the user's uid.
//! The credential id is `X509SHA256=` and the hex SHA-256 of the certificate.
//!
//! Only the fields needed are decoded (DER through `yasna`); verifying the certificate is the
//! TLS layer's job.

use base64::Engine as _;
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject as _;
use yasna::models::{ObjectIdentifier, TaggedDerValue};
use yasna::tags::{
    TAG_BMPSTRING, TAG_GENERALIZEDTIME, TAG_IA5STRING, TAG_NUMERICSTRING, TAG_PRINTABLESTRING,
    TAG_TELETEXSTRING, TAG_UTCTIME, TAG_UTF8STRING,
};
use yasna::{ASN1Result, DERWriter, Tag};

use super::authn::ClientCertificate;

/// `commonName` (2.5.4.3).
const OID_COMMON_NAME: &[u64] = &[2, 5, 4, 3];
/// `organizationName` (2.5.4.10).
const OID_ORGANIZATION: &[u64] = &[2, 5, 4, 10];
/// The attribute kube-apiserver reads a user's uid from.
const OID_KUBE_UID: &[u64] = &[1, 3, 6, 1, 4, 1, 57683, 2];
/// `ecdsa-with-SHA256`.
const OID_ECDSA_SHA256: &[u64] = &[1, 2, 840, 10045, 4, 3, 2];
/// `subjectKeyIdentifier`.
const OID_SUBJECT_KEY_ID: &[u64] = &[2, 5, 29, 14];
/// `keyUsage`.
const OID_KEY_USAGE: &[u64] = &[2, 5, 29, 15];
/// `basicConstraints`.
const OID_BASIC_CONSTRAINTS: &[u64] = &[2, 5, 29, 19];
/// `authorityKeyIdentifier`.
const OID_AUTHORITY_KEY_ID: &[u64] = &[2, 5, 29, 35];
/// `extKeyUsage`.
const OID_EXT_KEY_USAGE: &[u64] = &[2, 5, 29, 37];
/// `id-kp-clientAuth`.
const OID_CLIENT_AUTH: &[u64] = &[1, 3, 6, 1, 5, 5, 7, 3, 2];
/// `subjectAltName`.
const OID_SUBJECT_ALT_NAME: &[u64] = &[2, 5, 29, 17];

/// Why a certificate could not be read or issued.
#[derive(Debug, thiserror::Error)]
pub enum X509Error {
    /// The certificate is not DER X.509 this module can read.
    #[error("malformed certificate: {0}")]
    Malformed(String),
    /// A subject attribute is not one of the string types X.509 names use.
    #[error("the subject has an attribute of unsupported type (ASN.1 tag {0})")]
    UnsupportedString(u64),
    /// The CA certificate is not PEM.
    #[error("the CA certificate is not a PEM certificate: {0}")]
    CaCertificate(String),
    /// The CA key is not a PEM ECDSA P-256 private key.
    #[error("the CA key is not a PEM ECDSA P-256 private key: {0}")]
    CaKey(String),
    /// A user name is required (a certificate without a common name authenticates nobody).
    #[error("the user name (the certificate's common name) may not be empty")]
    EmptyUser,
    /// Key generation or signing failed.
    #[error("cannot generate the certificate: {0}")]
    Generate(String),
}

fn malformed(e: yasna::ASN1Error) -> X509Error {
    X509Error::Malformed(e.to_string())
}

/// One attribute of a subject: its type and value.
type Attribute = (ObjectIdentifier, String);

/// What this module reads of a certificate.
struct Parsed {
    /// The subject `Name`, tag and length included.
    subject_der: Vec<u8>,
    /// The subject key identifier, if the certificate has one.
    subject_key_id: Option<Vec<u8>>,
    /// The `SubjectPublicKeyInfo`, tag and length included.
    public_key_info: Vec<u8>,
    /// `notBefore` and `notAfter`, in seconds since the Unix epoch.
    validity: (i64, i64),
    /// The extended key usages, if the certificate restricts them.
    extended_key_usages: Option<Vec<ObjectIdentifier>>,
}

/// What a TLS client checks of a server's certificate that its chain does not tell: when it
/// is valid and what it may be used for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Usage {
    /// The start of validity, in seconds since the Unix epoch.
    pub not_before: i64,
    /// The end of validity, in seconds since the Unix epoch.
    pub not_after: i64,
    /// Whether it may serve TLS: it has no extended key usage, or `serverAuth` or
    /// `anyExtendedKeyUsage` among them (Go's rule; the key usage bits are not looked at).
    pub server_auth: bool,
}

/// `id-kp-serverAuth`.
const OID_SERVER_AUTH: &[u64] = &[1, 3, 6, 1, 5, 5, 7, 3, 1];
/// `anyExtendedKeyUsage`.
const OID_ANY_EXT_KEY_USAGE: &[u64] = &[2, 5, 29, 37, 0];

/// The validity and server use of the DER certificate `der`. The certificate is not
/// verified here.
pub fn usage(der: &[u8]) -> Result<Usage, X509Error> {
    let parsed = parse(der)?;
    let server_auth = parsed.extended_key_usages.as_ref().is_none_or(|usages| {
        usages.iter().any(|oid| {
            let components = oid.components().as_slice();
            components == OID_SERVER_AUTH || components == OID_ANY_EXT_KEY_USAGE
        })
    });
    Ok(Usage {
        not_before: parsed.validity.0,
        not_after: parsed.validity.1,
        server_auth,
    })
}

/// A `Time` (UTCTime `YYMMDDHHMMSSZ`, or GeneralizedTime `YYYYMMDDHHMMSSZ`), in seconds
/// since the Unix epoch.
fn read_time(r: yasna::BERReader) -> ASN1Result<i64> {
    let value = r.read_tagged_der()?;
    let text = std::str::from_utf8(value.value()).map_err(|_| invalid())?;
    let digits = text.strip_suffix('Z').ok_or_else(invalid)?;
    let full = match value.tag() {
        TAG_UTCTIME if digits.len() == 12 => {
            // Years 50-99 are 19xx, 00-49 20xx (RFC 5280).
            let year: u32 = digits[..2].parse().map_err(|_| invalid())?;
            let century = if year >= 50 { "19" } else { "20" };
            format!("{century}{digits}")
        }
        TAG_GENERALIZEDTIME if digits.len() == 14 => digits.to_string(),
        _ => return Err(invalid()),
    };
    let at = format!(
        "{}-{}-{}T{}:{}:{}Z",
        &full[0..4],
        &full[4..6],
        &full[6..8],
        &full[8..10],
        &full[10..12],
        &full[12..14]
    );
    at.parse::<jiff::Timestamp>()
        .map(|t| t.as_second())
        .map_err(|_| invalid())
}

fn invalid() -> yasna::ASN1Error {
    yasna::ASN1Error::new(yasna::ASN1ErrorKind::Invalid)
}

/// Reads the subject and the subject key identifier of a DER certificate.
fn parse(der: &[u8]) -> Result<Parsed, X509Error> {
    yasna::parse_ber(der, |r| {
        r.read_sequence(|r| {
            let parsed = r.next().read_sequence(|r| {
                // version [0], serialNumber, signature, issuer, validity.
                r.read_optional(|r| r.read_tagged(Tag::context(0), |r| r.read_der()))?;
                for _ in 0..3 {
                    r.next().read_der()?;
                }
                let validity = r
                    .next()
                    .read_sequence(|r| Ok((read_time(r.next())?, read_time(r.next())?)))?;
                let subject_der = r.next().read_der()?;
                let public_key_info = r.next().read_der()?;
                let mut subject_key_id = None;
                let mut extended_key_usages = None;
                // issuerUniqueID [1], subjectUniqueID [2], extensions [3].
                while let Some(field) = r.read_optional(|r| r.read_tagged_der())? {
                    if field.tag() == Tag::context(3) {
                        subject_key_id = find_subject_key_id(field.value())?;
                        extended_key_usages = find_extended_key_usages(field.value())?;
                    }
                }
                Ok(Parsed {
                    subject_der,
                    subject_key_id,
                    public_key_info,
                    validity,
                    extended_key_usages,
                })
            })?;
            r.next().read_der()?; // signatureAlgorithm
            r.next().read_der()?; // signatureValue
            Ok(parsed)
        })
    })
    .map_err(malformed)
}

/// The extended key usages in a `[3] EXPLICIT SEQUENCE OF Extension`, if it has them.
fn find_extended_key_usages(extensions: &[u8]) -> ASN1Result<Option<Vec<ObjectIdentifier>>> {
    let Some(value) = extension_value(extensions, OID_EXT_KEY_USAGE)? else {
        return Ok(None);
    };
    yasna::parse_der(&value, |r| r.collect_sequence_of(|r| r.read_oid())).map(Some)
}

/// The value of the extension `oid` in a `[3] EXPLICIT SEQUENCE OF Extension`.
fn extension_value(extensions: &[u8], oid: &[u64]) -> ASN1Result<Option<Vec<u8>>> {
    let extensions = yasna::parse_ber(extensions, |r| {
        r.collect_sequence_of(|r| {
            r.read_sequence(|r| {
                let id = r.next().read_oid()?;
                r.read_optional(|r| r.read_bool())?;
                let value = r.next().read_bytes()?;
                Ok((id, value))
            })
        })
    })?;
    Ok(extensions
        .into_iter()
        .find(|(id, _)| id.components().as_slice() == oid)
        .map(|(_, value)| value))
}

/// The key identifier in a `SEQUENCE OF Extension`, if one is the subject key identifier.
fn find_subject_key_id(extensions: &[u8]) -> ASN1Result<Option<Vec<u8>>> {
    extension_value(extensions, OID_SUBJECT_KEY_ID)?
        .map(|value| yasna::parse_ber(&value, |r| r.read_bytes()))
        .transpose()
}

/// Every attribute of a `Name` (tag and length included), in order.
fn name_attributes(name: &[u8]) -> Result<Vec<Attribute>, X509Error> {
    let mut unsupported = None;
    let rdns = yasna::parse_ber(name, |r| {
        r.collect_sequence_of(|r| {
            r.collect_set_of(|r| {
                r.read_sequence(|r| {
                    let kind = r.next().read_oid()?;
                    let value = r.next().read_tagged_der()?;
                    match string_value(&value) {
                        Some(text) => Ok((kind, text)),
                        None => {
                            unsupported = Some(value.tag().tag_number);
                            Ok((kind, String::new()))
                        }
                    }
                })
            })
        })
    })
    .map_err(malformed)?;
    if let Some(tag) = unsupported {
        return Err(X509Error::UnsupportedString(tag));
    }
    Ok(rdns.into_iter().flatten().collect())
}

/// The text of an attribute value of one of the string types X.509 names use.
fn string_value(value: &TaggedDerValue) -> Option<String> {
    let bytes = value.value();
    let tag = value.tag();
    if tag == TAG_BMPSTRING {
        if !bytes.len().is_multiple_of(2) {
            return None;
        }
        let units: Vec<u16> = bytes
            .chunks_exact(2)
            .map(|pair| u16::from_be_bytes([pair[0], pair[1]]))
            .collect();
        return String::from_utf16(&units).ok();
    }
    if tag == TAG_UTF8STRING {
        return String::from_utf8(bytes.to_vec()).ok();
    }
    if [
        TAG_PRINTABLESTRING,
        TAG_IA5STRING,
        TAG_NUMERICSTRING,
        TAG_TELETEXSTRING,
    ]
    .contains(&tag)
    {
        return Some(String::from_utf8_lossy(bytes).into_owned());
    }
    None
}

impl ClientCertificate {
    /// What the DER certificate `der` says about its holder (see the module documentation).
    /// The certificate is not verified here.
    pub fn from_der(der: &[u8]) -> Result<ClientCertificate, X509Error> {
        let parsed = parse(der)?;
        let mut certificate = ClientCertificate::from_subject(&parsed.subject_der)?;
        certificate.credential_id = format!("X509SHA256={}", hex(&sha256(der)));
        Ok(certificate)
    }

    /// The user a subject `Name` (DER, tag and length included) names.
    fn from_subject(name: &[u8]) -> Result<ClientCertificate, X509Error> {
        let mut certificate = ClientCertificate {
            common_name: String::new(),
            organizations: Vec::new(),
            uids: Vec::new(),
            credential_id: String::new(),
        };
        for (kind, value) in name_attributes(name)? {
            match kind.components().as_slice() {
                OID_COMMON_NAME => certificate.common_name = value,
                OID_ORGANIZATION => certificate.organizations.push(value),
                OID_KUBE_UID => certificate.uids.push(value),
                _ => {}
            }
        }
        Ok(certificate)
    }
}

/// The public key of the DER certificate `der`, as a `SubjectPublicKeyInfo` (DER): what
/// kube-apiserver takes from a certificate in `--service-account-key-file`. The certificate is
/// not verified here.
pub fn public_key_info(der: &[u8]) -> Result<Vec<u8>, X509Error> {
    Ok(parse(der)?.public_key_info)
}

fn sha256(bytes: &[u8]) -> Vec<u8> {
    ring::digest::digest(&ring::digest::SHA256, bytes)
        .as_ref()
        .to_vec()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A client certificate and its private key.
#[derive(Clone, PartialEq, Eq)]
pub struct IssuedCertificate {
    /// The certificate (PEM).
    pub cert_pem: String,
    /// Its private key (PKCS#8 PEM, ECDSA P-256).
    pub key_pem: String,
}

impl std::fmt::Debug for IssuedCertificate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IssuedCertificate")
            .field("cert_pem", &self.cert_pem)
            .field("key_pem", &"<redacted>")
            .finish()
    }
}

/// What a client certificate is issued for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CertificateRequest {
    /// The user: the common name.
    pub user: String,
    /// The groups: one organization each, in order.
    pub groups: Vec<String>,
    /// The start of validity, in seconds since the Unix epoch.
    pub not_before: i64,
    /// The end of validity, in seconds since the Unix epoch.
    pub not_after: i64,
}

/// A new key pair and a certificate for it, signed by the CA (`ca_cert_pem`, whose key
/// `ca_key_pem` must be ECDSA P-256, as `konverge up` makes it): subject `O=<group>...,
/// CN=<user>`, for client authentication only (key usage digitalSignature, extended key usage
/// clientAuth, not a CA), naming the CA's key when the CA certificate has a key identifier.
pub fn issue_client_certificate(
    ca_cert_pem: &str,
    ca_key_pem: &str,
    request: &CertificateRequest,
) -> Result<IssuedCertificate, X509Error> {
    if request.user.is_empty() {
        return Err(X509Error::EmptyUser);
    }
    let mut subject: Vec<(&[u64], &str)> = request
        .groups
        .iter()
        .map(|group| (OID_ORGANIZATION, group.as_str()))
        .collect();
    subject.push((OID_COMMON_NAME, &request.user));
    issue(
        ca_cert_pem,
        ca_key_pem,
        &Leaf {
            subject: &subject,
            not_before: request.not_before,
            not_after: request.not_after,
            purpose: OID_CLIENT_AUTH,
            names: &[],
        },
    )
}

/// What a serving certificate is for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServingRequest {
    /// The subject's common name.
    pub common_name: String,
    /// The host names and IP addresses clients reach the server by (its subject alternative
    /// names); an entry that parses as an IP address is one.
    pub names: Vec<String>,
    /// The start of validity, in seconds since the Unix epoch.
    pub not_before: i64,
    /// The end of validity, in seconds since the Unix epoch.
    pub not_after: i64,
}

/// A new key pair and a serving certificate for it, signed by the CA as
/// [`issue_client_certificate`] signs, for server authentication only, naming
/// `request.names`.
pub fn issue_serving_certificate(
    ca_cert_pem: &str,
    ca_key_pem: &str,
    request: &ServingRequest,
) -> Result<IssuedCertificate, X509Error> {
    issue(
        ca_cert_pem,
        ca_key_pem,
        &Leaf {
            subject: &[(OID_COMMON_NAME, &request.common_name)],
            not_before: request.not_before,
            not_after: request.not_after,
            purpose: OID_SERVER_AUTH,
            names: &request.names,
        },
    )
}

/// A certificate [`issue`] writes.
struct Leaf<'a> {
    /// The subject's attributes, in order.
    subject: &'a [(&'a [u64], &'a str)],
    not_before: i64,
    not_after: i64,
    /// The one extended key usage.
    purpose: &'a [u64],
    /// Subject alternative names (none: no extension).
    names: &'a [String],
}

fn issue(
    ca_cert_pem: &str,
    ca_key_pem: &str,
    leaf: &Leaf<'_>,
) -> Result<IssuedCertificate, X509Error> {
    use rcgen::{PublicKeyData as _, SigningKey as _};

    let ca_der = CertificateDer::from_pem_slice(ca_cert_pem.as_bytes())
        .map_err(|e| X509Error::CaCertificate(e.to_string()))?;
    let ca = parse(&ca_der)?;
    let ca_key =
        rcgen::KeyPair::from_pem(ca_key_pem).map_err(|e| X509Error::CaKey(e.to_string()))?;
    if ca_key.algorithm() != &rcgen::PKCS_ECDSA_P256_SHA256 {
        return Err(X509Error::CaKey("another key type".into()));
    }
    let key = rcgen::KeyPair::generate().map_err(|e| X509Error::Generate(e.to_string()))?;

    let signature_algorithm = |w: DERWriter<'_>| {
        w.write_sequence(|w| {
            w.next()
                .write_oid(&ObjectIdentifier::from_slice(OID_ECDSA_SHA256))
        })
    };
    let tbs = yasna::construct_der(|w| {
        w.write_sequence(|w| {
            w.next().write_tagged(Tag::context(0), |w| w.write_u8(2)); // v3
            w.next().write_bigint_bytes(&random_serial(), true);
            signature_algorithm(w.next());
            w.next().write_der(&ca.subject_der);
            w.next().write_sequence(|w| {
                write_time(w.next(), leaf.not_before);
                write_time(w.next(), leaf.not_after);
            });
            w.next().write_sequence(|w| {
                for (kind, value) in leaf.subject {
                    write_attribute(w, kind, value);
                }
            });
            w.next().write_der(&key.subject_public_key_info());
            w.next().write_tagged(Tag::context(3), |w| {
                w.write_sequence(|w| {
                    write_extension(w, OID_KEY_USAGE, true, |w| {
                        w.write_bitvec_bytes(&[0x80], 1) // digitalSignature
                    });
                    write_extension(w, OID_EXT_KEY_USAGE, false, |w| {
                        w.write_sequence(|w| {
                            w.next()
                                .write_oid(&ObjectIdentifier::from_slice(leaf.purpose))
                        })
                    });
                    write_extension(w, OID_BASIC_CONSTRAINTS, true, |w| w.write_sequence(|_| {}));
                    if !leaf.names.is_empty() {
                        write_extension(w, OID_SUBJECT_ALT_NAME, false, |w| {
                            w.write_sequence(|w| {
                                for name in leaf.names {
                                    write_general_name(w.next(), name);
                                }
                            })
                        });
                    }
                    if let Some(id) = &ca.subject_key_id {
                        write_extension(w, OID_AUTHORITY_KEY_ID, false, |w| {
                            w.write_sequence(|w| {
                                w.next()
                                    .write_tagged_implicit(Tag::context(0), |w| w.write_bytes(id))
                            })
                        });
                    }
                });
            });
        })
    });
    let signature = ca_key
        .sign(&tbs)
        .map_err(|e| X509Error::Generate(e.to_string()))?;
    let certificate = yasna::construct_der(|w| {
        w.write_sequence(|w| {
            w.next().write_der(&tbs);
            signature_algorithm(w.next());
            w.next().write_bitvec_bytes(&signature, signature.len() * 8);
        })
    });
    Ok(IssuedCertificate {
        cert_pem: pem("CERTIFICATE", &certificate),
        key_pem: key.serialize_pem(),
    })
}

/// A subject alternative name: an `iPAddress` when `name` parses as one, a `dNSName`
/// otherwise.
fn write_general_name(w: DERWriter<'_>, name: &str) {
    match name.parse::<std::net::IpAddr>() {
        Ok(std::net::IpAddr::V4(ip)) => {
            w.write_tagged_implicit(Tag::context(7), |w| w.write_bytes(&ip.octets()))
        }
        Ok(std::net::IpAddr::V6(ip)) => {
            w.write_tagged_implicit(Tag::context(7), |w| w.write_bytes(&ip.octets()))
        }
        Err(_) => w.write_tagged_implicit(Tag::context(2), |w| w.write_ia5_string(name)),
    }
}

/// One relative distinguished name with a single UTF8String attribute.
fn write_attribute(w: &mut yasna::DERWriterSeq<'_>, kind: &[u64], value: &str) {
    w.next().write_set(|w| {
        w.next().write_sequence(|w| {
            w.next().write_oid(&ObjectIdentifier::from_slice(kind));
            w.next().write_utf8_string(value);
        })
    });
}

/// One extension; `value` writes the DER the OCTET STRING holds.
fn write_extension(
    w: &mut yasna::DERWriterSeq<'_>,
    id: &[u64],
    critical: bool,
    value: impl FnOnce(DERWriter<'_>),
) {
    w.next().write_sequence(|w| {
        w.next().write_oid(&ObjectIdentifier::from_slice(id));
        if critical {
            w.next().write_bool(true);
        }
        w.next().write_bytes(&yasna::construct_der(value));
    });
}

/// UTCTime through 2049, GeneralizedTime after, as RFC 5280 requires.
fn write_time(w: DERWriter<'_>, seconds: i64) {
    let time = jiff::Timestamp::from_second(seconds).unwrap_or(jiff::Timestamp::UNIX_EPOCH);
    let year = time.to_zoned(jiff::tz::TimeZone::UTC).year();
    let (tag, text) = if (1950..2050).contains(&year) {
        (TAG_UTCTIME, time.strftime("%y%m%d%H%M%SZ").to_string())
    } else {
        (
            TAG_GENERALIZEDTIME,
            time.strftime("%Y%m%d%H%M%SZ").to_string(),
        )
    };
    w.write_tagged_der(&TaggedDerValue::from_tag_and_bytes(tag, text.into_bytes()));
}

/// A positive 128-bit random serial number without a leading zero byte.
fn random_serial() -> [u8; 16] {
    let mut bytes: [u8; 16] = rand::random();
    bytes[0] = (bytes[0] & 0x7f) | 0x40;
    bytes
}

/// `der` as a PEM block of `label`, 64 characters a line.
pub(crate) fn pem(label: &str, der: &[u8]) -> String {
    let encoded = base64::engine::general_purpose::STANDARD.encode(der);
    let mut out = format!("-----BEGIN {label}-----\n");
    for line in encoded.as_bytes().chunks(64) {
        out.push_str(std::str::from_utf8(line).unwrap_or_default());
        out.push('\n');
    }
    out.push_str(&format!("-----END {label}-----\n"));
    out
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyUsagePurpose};
    use rustls::pki_types::UnixTime;
    use rustls::server::WebPkiClientVerifier;

    use super::*;

    /// A CA as `konverge up` makes one.
    fn ca() -> (String, String) {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = CertificateParams::default();
        params
            .distinguished_name
            .push(DnType::CommonName, "test-ca");
        params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let cert = params.self_signed(&key).unwrap();
        (cert.pem(), key.serialize_pem())
    }

    fn request(user: &str, groups: &[&str]) -> CertificateRequest {
        let now = jiff::Timestamp::now().as_second();
        CertificateRequest {
            user: user.into(),
            groups: groups.iter().map(|g| g.to_string()).collect(),
            not_before: now - 60,
            not_after: now + 3600,
        }
    }

    fn der(pem: &str) -> CertificateDer<'static> {
        CertificateDer::from_pem_slice(pem.as_bytes()).unwrap()
    }

    #[test]
    fn issued_certificates_verify_and_name_their_user_and_groups() {
        let (ca_pem, ca_key) = ca();
        let issued =
            issue_client_certificate(&ca_pem, &ca_key, &request("alice", &["devs", "ops"]))
                .unwrap();
        assert!(issued.key_pem.starts_with("-----BEGIN PRIVATE KEY-----"));
        let leaf = der(&issued.cert_pem);

        // rustls (the server's verifier) accepts it for client authentication.
        let mut roots = rustls::RootCertStore::empty();
        roots.add(der(&ca_pem)).unwrap();
        let verifier = WebPkiClientVerifier::builder_with_provider(
            Arc::new(roots),
            Arc::new(rustls::crypto::ring::default_provider()),
        )
        .build()
        .unwrap();
        verifier
            .verify_client_cert(&leaf, &[], UnixTime::now())
            .expect("a valid client certificate");
        // Its issuer is the CA's subject, byte for byte: what TLS clients match the
        // server's acceptable CA names against.
        let ca_subject = parse(&der(&ca_pem)).unwrap().subject_der;
        assert!(leaf.windows(ca_subject.len()).any(|w| w == ca_subject));

        let certificate = ClientCertificate::from_der(&leaf).unwrap();
        assert_eq!(certificate.common_name, "alice");
        assert_eq!(certificate.organizations, ["devs", "ops"]);
        assert!(certificate.uids.is_empty());
        assert_eq!(certificate.credential_id.len(), "X509SHA256=".len() + 64);
        assert_eq!(
            certificate.credential_id,
            format!("X509SHA256={}", hex(&sha256(&leaf)))
        );
    }

    #[test]
    fn expired_certificates_do_not_verify() {
        let (ca_pem, ca_key) = ca();
        let mut expired = request("bob", &[]);
        expired.not_after = expired.not_before + 1;
        let leaf = der(&issue_client_certificate(&ca_pem, &ca_key, &expired)
            .unwrap()
            .cert_pem);
        let mut roots = rustls::RootCertStore::empty();
        roots.add(der(&ca_pem)).unwrap();
        let verifier = WebPkiClientVerifier::builder_with_provider(
            Arc::new(roots),
            Arc::new(rustls::crypto::ring::default_provider()),
        )
        .build()
        .unwrap();
        assert!(
            verifier
                .verify_client_cert(&leaf, &[], UnixTime::now())
                .is_err()
        );
        assert!(issue_client_certificate(&ca_pem, &ca_key, &request("", &[])).is_err());
    }

    #[test]
    fn subjects_are_read_as_kube_apiserver_reads_them() {
        // Attributes besides CN and O, a kube UID, a PrintableString.
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = CertificateParams::default();
        params.distinguished_name.push(DnType::CountryName, "DE");
        params.distinguished_name.push(
            DnType::OrganizationName,
            rcgen::DnValue::PrintableString("ops".try_into().unwrap()),
        );
        params
            .distinguished_name
            .push(DnType::CustomDnType(OID_KUBE_UID.to_vec()), "uid-1");
        params.distinguished_name.push(DnType::CommonName, "carol");
        let cert = params.self_signed(&key).unwrap();
        let certificate = ClientCertificate::from_der(cert.der()).unwrap();
        assert_eq!(certificate.common_name, "carol");
        assert_eq!(certificate.organizations, ["ops"]);
        assert_eq!(certificate.uids, ["uid-1"]);

        // No subject at all: no user.
        let mut params = CertificateParams::default();
        params.distinguished_name = rcgen::DistinguishedName::new();
        let cert = params.self_signed(&key).unwrap();
        let certificate = ClientCertificate::from_der(cert.der()).unwrap();
        assert_eq!(certificate.common_name, "");

        assert!(matches!(
            ClientCertificate::from_der(b"\x30\x03\x02\x01\x01"),
            Err(X509Error::Malformed(_))
        ));
    }

    #[test]
    fn multi_valued_and_repeated_attributes_are_all_read() {
        // O=devs+O=ops, CN=first, CN=last (PrintableString), L=Berlin.
        let attribute = |w: DERWriter<'_>, kind: &[u64], tag: Tag, value: &str| {
            w.write_sequence(|w| {
                w.next().write_oid(&ObjectIdentifier::from_slice(kind));
                w.next()
                    .write_tagged_der(&TaggedDerValue::from_tag_and_bytes(
                        tag,
                        value.as_bytes().to_vec(),
                    ));
            })
        };
        let name = yasna::construct_der(|w| {
            w.write_sequence(|w| {
                w.next().write_set(|w| {
                    attribute(w.next(), OID_ORGANIZATION, TAG_UTF8STRING, "devs");
                    attribute(w.next(), OID_ORGANIZATION, TAG_UTF8STRING, "ops");
                });
                w.next()
                    .write_set(|w| attribute(w.next(), OID_COMMON_NAME, TAG_UTF8STRING, "first"));
                w.next().write_set(|w| {
                    attribute(w.next(), OID_COMMON_NAME, TAG_PRINTABLESTRING, "last")
                });
                w.next()
                    .write_set(|w| attribute(w.next(), &[2, 5, 4, 7], TAG_UTF8STRING, "Berlin"));
            })
        });
        let certificate = ClientCertificate::from_subject(&name).unwrap();
        assert_eq!(certificate.common_name, "last");
        assert_eq!(certificate.organizations, ["devs", "ops"]);

        // A value of a type names do not use is an error, as in Go's x509.
        let name = yasna::construct_der(|w| {
            w.write_sequence(|w| {
                w.next().write_set(|w| {
                    w.next().write_sequence(|w| {
                        w.next()
                            .write_oid(&ObjectIdentifier::from_slice(OID_COMMON_NAME));
                        w.next().write_i64(7);
                    })
                });
            })
        });
        assert!(matches!(
            ClientCertificate::from_subject(&name),
            Err(X509Error::UnsupportedString(2))
        ));
    }

    #[test]
    fn times_switch_to_generalized_time_in_2050() {
        let encode = |seconds| yasna::construct_der(|w| write_time(w, seconds));
        assert_eq!(encode(0)[0], 0x17);
        assert_eq!(&encode(0)[2..], b"700101000000Z");
        let in_2050 = 2_524_608_000; // 2050-01-01T00:00:00Z
        assert_eq!(encode(in_2050)[0], 0x18);
        assert_eq!(&encode(in_2050)[2..], b"20500101000000Z");
    }
}

//! The server's TLS identity, the bearer token and the ServiceAccount signing key, generated
//! once per data directory; and client certificates signed by its CA.
//!
//! Layout (all files mode 0600, directories created here mode 0700):
//!
//! ```text
//! DATA_DIR/pki/ca.crt         self-signed CA certificate (PEM), "konverge-ca"
//! DATA_DIR/pki/ca.key         CA private key (PKCS#8 PEM, ECDSA P-256)
//! DATA_DIR/pki/apiserver.crt  serving certificate (PEM) for localhost, 127.0.0.1, ::1
//! DATA_DIR/pki/apiserver.key  serving private key (PKCS#8 PEM, ECDSA P-256)
//! DATA_DIR/pki/sa.key         ServiceAccount token signing key (PKCS#8 PEM, ECDSA P-256)
//! DATA_DIR/token              bearer token (one line, URL-safe base64 of 32 random bytes)
//! ```
//!
//! The first start (none of these files exist) generates them all; later starts load them
//! unchanged so kubeconfigs and ServiceAccount tokens issued earlier keep working. The
//! ServiceAccount key alone is created whenever it is missing (data directories from before
//! it existed). Anything else (some files missing, unreadable or corrupt, a key not matching
//! its certificate, a serving certificate not issued by the CA for 127.0.0.1 or expired) is an
//! error naming the file; nothing is silently regenerated.
//!
//! [`issue_client_certificate`] signs a client certificate with the CA (what
//! `konverge kubeconfig --user` hands out).

use std::fmt;
use std::io;
use std::net::{IpAddr, Ipv4Addr};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DistinguishedName, DnType,
    ExtendedKeyUsagePurpose, IsCa, KeyPair, KeyUsagePurpose, SerialNumber,
};
use rustls::RootCertStore;
use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::ServerCertVerifier;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};

use super::fsutil;
use crate::auth::tokens::ServiceAccountTokens;
use crate::auth::x509::{CertificateRequest, IssuedCertificate, X509Error};

/// Path of the CA certificate, relative to the data directory.
pub const CA_CERT_FILE: &str = "pki/ca.crt";
/// Path of the CA private key, relative to the data directory.
pub const CA_KEY_FILE: &str = "pki/ca.key";
/// Path of the serving certificate, relative to the data directory.
pub const SERVING_CERT_FILE: &str = "pki/apiserver.crt";
/// Path of the serving certificate's private key, relative to the data directory.
pub const SERVING_KEY_FILE: &str = "pki/apiserver.key";
/// Path of the bearer token file, relative to the data directory.
pub const TOKEN_FILE: &str = "token";
/// Path of the ServiceAccount token signing key, relative to the data directory.
pub const SERVICE_ACCOUNT_KEY_FILE: &str = "pki/sa.key";

/// Common name of the generated CA certificate.
pub const CA_COMMON_NAME: &str = "konverge-ca";
/// Common name of the generated serving certificate.
pub const SERVING_COMMON_NAME: &str = "konverge-apiserver";
/// Subject alternative names of the generated serving certificate.
pub const SERVING_NAMES: [&str; 3] = ["localhost", "127.0.0.1", "::1"];

/// Validity of generated certificates (about ten years).
const VALIDITY: Duration = Duration::from_secs(3652 * 24 * 60 * 60);
/// How far in the past generated certificates start being valid (tolerates clock skew).
const BACKDATE: Duration = Duration::from_secs(60 * 60);
/// Random bytes in a generated token.
const TOKEN_BYTES: usize = 32;

const RECOVERY_HINT: &str = "to start over with new credentials, delete the pki directory and \
                             the token file in the data directory (kubeconfigs written before \
                             stop working)";

/// The server's CA, serving certificate and key, and the bearer token, as PEM / text; the
/// ServiceAccount signing key.
///
/// `Debug` redacts the private keys and the token.
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    /// The CA certificate (PEM): what clients trust (`certificate-authority-data`).
    pub ca_pem: String,
    /// The serving certificate (PEM), issued by the CA, for `localhost`, `127.0.0.1`, `::1`.
    pub cert_pem: String,
    /// The serving certificate's private key (PKCS#8 PEM).
    pub key_pem: String,
    /// The bearer token clients send as `Authorization: Bearer <token>`.
    pub token: String,
    /// The key ServiceAccount tokens are signed with (ECDSA P-256, PKCS#8 DER), for
    /// [`ApiServerBuilder::service_account_key`](crate::ApiServerBuilder::service_account_key).
    pub service_account_key: Vec<u8>,
    /// True when this call generated the credentials (first start in the data directory),
    /// false when they were loaded from an earlier start.
    pub generated: bool,
}

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Credentials")
            .field("ca_pem", &self.ca_pem)
            .field("cert_pem", &self.cert_pem)
            .field("key_pem", &"<redacted>")
            .field("token", &"<redacted>")
            .field("service_account_key", &"<redacted>")
            .field("generated", &self.generated)
            .finish()
    }
}

/// Why credentials could not be loaded or created.
#[derive(Debug, thiserror::Error)]
pub enum CredentialsError {
    /// A directory could not be created.
    #[error("cannot create directory {}", path.display())]
    CreateDir {
        /// The directory.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
    /// A credentials file exists but could not be read.
    #[error("cannot read {}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
    /// A credentials file could not be written.
    #[error("cannot write {}", path.display())]
    Write {
        /// The file.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
    /// A credentials file is corrupt or inconsistent with the others.
    #[error("{} is invalid: {reason}; {RECOVERY_HINT}", path.display())]
    Invalid {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// Some credentials files exist and others do not (e.g. an interrupted first start).
    #[error(
        "incomplete credentials in {}: missing {}; present {}; {RECOVERY_HINT}",
        data_dir.display(), list(missing), list(present)
    )]
    Incomplete {
        /// The data directory.
        data_dir: PathBuf,
        /// The files that do not exist.
        missing: Vec<PathBuf>,
        /// The files that do exist.
        present: Vec<PathBuf>,
    },
    /// Key or certificate generation failed.
    #[error("cannot generate credentials")]
    Generate(#[source] rcgen::Error),
    /// A client or serving certificate could not be issued.
    #[error("cannot issue a certificate")]
    Issue(#[source] X509Error),
    /// The shared credentials directory could not be locked.
    #[error("cannot lock {}", path.display())]
    Lock {
        /// The lock file.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
}

fn list(paths: &[PathBuf]) -> String {
    paths
        .iter()
        .map(|p| p.display().to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

fn invalid(path: &Path, reason: impl Into<String>) -> CredentialsError {
    CredentialsError::Invalid {
        path: path.to_path_buf(),
        reason: reason.into(),
    }
}

/// Absolute-ish paths of the credentials files in one data directory.
struct Files {
    data_dir: PathBuf,
    pki_dir: PathBuf,
    ca_cert: PathBuf,
    ca_key: PathBuf,
    cert: PathBuf,
    key: PathBuf,
    token: PathBuf,
    service_account_key: PathBuf,
}

impl Files {
    fn new(data_dir: &Path) -> Self {
        Self {
            data_dir: data_dir.to_path_buf(),
            pki_dir: data_dir.join("pki"),
            ca_cert: data_dir.join(CA_CERT_FILE),
            ca_key: data_dir.join(CA_KEY_FILE),
            cert: data_dir.join(SERVING_CERT_FILE),
            key: data_dir.join(SERVING_KEY_FILE),
            token: data_dir.join(TOKEN_FILE),
            service_account_key: data_dir.join(SERVICE_ACCOUNT_KEY_FILE),
        }
    }

    fn all(&self) -> [&PathBuf; 5] {
        [
            &self.ca_cert,
            &self.ca_key,
            &self.cert,
            &self.key,
            &self.token,
        ]
    }
}

impl Credentials {
    /// Loads the credentials stored in `data_dir`, or generates and stores new ones if none of
    /// the credentials files exist yet (creating `data_dir` if needed). The ServiceAccount
    /// signing key is created whenever it is missing.
    ///
    /// Errors (never panics) if only some of the other files exist, or any of them cannot be
    /// read, is corrupt, or is inconsistent with the others; the error names the file.
    pub fn load_or_create(data_dir: &Path) -> Result<Self, CredentialsError> {
        let files = Files::new(data_dir);
        let (present, missing) = which_exist(&files.all())?;
        if present.is_empty() {
            Self::create(&files)
        } else if missing.is_empty() {
            Self::load_files(&files)
        } else if missing == [files.cert.clone(), files.key.clone()] {
            // A cluster's credentials ([`for_cluster`](Self::for_cluster)) made here: the
            // shared ones are all there, and this server's serving certificate is issued.
            Self::issue_serving_files(&files)?;
            Self::load_files(&files)
        } else {
            Err(CredentialsError::Incomplete {
                data_dir: files.data_dir,
                missing,
                present,
            })
        }
    }

    /// Loads the credentials stored in `data_dir`; errors if any file is missing or invalid
    /// (but creates a missing ServiceAccount key).
    #[cfg(test)]
    pub fn load(data_dir: &Path) -> Result<Self, CredentialsError> {
        Self::load_files(&Files::new(data_dir))
    }

    fn create(files: &Files) -> Result<Self, CredentialsError> {
        for dir in [&files.data_dir, &files.pki_dir] {
            fsutil::create_private_dir_all(dir).map_err(|source| CredentialsError::CreateDir {
                path: dir.clone(),
                source,
            })?;
        }
        fsutil::restrict_dir(&files.pki_dir).map_err(|source| CredentialsError::CreateDir {
            path: files.pki_dir.clone(),
            source,
        })?;

        let generated = generate().map_err(CredentialsError::Generate)?;
        // The token goes last: its presence marks a completed first start.
        write_files(&[
            (&files.ca_key, &generated.ca_key_pem),
            (&files.ca_cert, &generated.ca_pem),
            (&files.key, &generated.key_pem),
            (&files.cert, &generated.cert_pem),
            (
                &files.service_account_key,
                &generated.service_account_key_pem,
            ),
            (&files.token, &format!("{}\n", generated.token)),
        ])?;
        tracing::info!(dir = %files.data_dir.display(), "generated a new CA, serving certificate and token");
        // Read back through the same checks a later start applies.
        let mut credentials = Self::load_files(files)?;
        credentials.generated = true;
        Ok(credentials)
    }

    fn load_files(files: &Files) -> Result<Self, CredentialsError> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());

        let ca_pem = read_text(&files.ca_cert)?;
        let ca_chain = parse_certs(&files.ca_cert, &ca_pem)?;
        let ca_der = &ca_chain[0];
        let mut roots = RootCertStore::empty();
        roots
            .add(ca_der.clone())
            .map_err(|e| invalid(&files.ca_cert, format!("not a usable CA certificate: {e}")))?;
        let ca_key_pem = read_text(&files.ca_key)?;
        check_key(
            &provider,
            &files.ca_key,
            &ca_key_pem,
            ca_der,
            &files.ca_cert,
        )?;

        let cert_pem = read_text(&files.cert)?;
        let chain = parse_certs(&files.cert, &cert_pem)?;
        let verifier =
            WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider.clone())
                .build()
                .map_err(|e| {
                    invalid(&files.ca_cert, format!("not a usable CA certificate: {e}"))
                })?;
        verifier
            .verify_server_cert(
                &chain[0],
                &chain[1..],
                &ServerName::from(IpAddr::V4(Ipv4Addr::LOCALHOST)),
                &[],
                UnixTime::now(),
            )
            .map_err(|e| {
                invalid(
                    &files.cert,
                    format!(
                        "not a valid serving certificate for 127.0.0.1 issued by {}: {e}",
                        files.ca_cert.display()
                    ),
                )
            })?;
        let key_pem = read_text(&files.key)?;
        check_key(&provider, &files.key, &key_pem, &chain[0], &files.cert)?;

        let token = read_token(&files.token)?;

        let service_account_key = load_or_create_service_account_key(&files.service_account_key)?;

        for path in [
            &files.ca_key,
            &files.key,
            &files.token,
            &files.service_account_key,
        ] {
            if fsutil::is_group_or_world_accessible(path) {
                tracing::warn!(
                    file = %path.display(),
                    "secret file is accessible by group or others; consider chmod 600"
                );
            }
        }

        Ok(Self {
            ca_pem,
            cert_pem,
            key_pem,
            token,
            service_account_key,
            generated: false,
        })
    }
}

impl Credentials {
    /// Issues and writes a serving certificate for the loopback names, signed by the CA in
    /// `files`.
    fn issue_serving_files(files: &Files) -> Result<(), CredentialsError> {
        let ca_pem = read_text(&files.ca_cert)?;
        let ca_key_pem = read_text(&files.ca_key)?;
        let serving = issue_serving(&ca_pem, &ca_key_pem, &[])?;
        write_files(&[
            (&files.key, &serving.key_pem),
            (&files.cert, &serving.cert_pem),
        ])
    }

    /// The credentials of one server of a cluster whose servers share `shared_dir`: the CA
    /// and its key, the ServiceAccount signing key and the admin token, laid out as a data
    /// directory's (`pki/ca.crt`, `pki/ca.key`, `pki/sa.key`, `token`: a single server's data
    /// directory can be shared as it is). The first server to find the directory empty
    /// creates them, under a lock (`pki/.lock`) so that servers started at once agree; the
    /// others load them, with the checks [`load_or_create`](Self::load_or_create) applies.
    ///
    /// The serving certificate is this server's own: issued now by the shared CA for
    /// `localhost`, `127.0.0.1`, `::1` and `names` (the addresses clients reach this server
    /// by), and never written to disk.
    pub fn for_cluster(shared_dir: &Path, names: &[String]) -> Result<Self, CredentialsError> {
        let files = Files::new(shared_dir);
        for dir in [&files.data_dir, &files.pki_dir] {
            fsutil::create_private_dir_all(dir).map_err(|source| CredentialsError::CreateDir {
                path: dir.clone(),
                source,
            })?;
        }
        let lock_path = files.pki_dir.join(".lock");
        let lock = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&lock_path)
            .and_then(|file| file.lock().map(|()| file))
            .map_err(|source| CredentialsError::Lock {
                path: lock_path.clone(),
                source,
            })?;
        let (present, missing) = which_exist(&[&files.ca_cert, &files.ca_key, &files.token])?;
        let generated = present.is_empty();
        if generated {
            let (ca_pem, ca_key_pem) = generate_ca().map_err(CredentialsError::Generate)?;
            write_files(&[
                (&files.ca_key, &ca_key_pem),
                (&files.ca_cert, &ca_pem),
                (&files.token, &format!("{}\n", generate_token())),
            ])?;
            tracing::info!(dir = %files.data_dir.display(), "generated the cluster's CA and token");
        } else if !missing.is_empty() {
            return Err(CredentialsError::Incomplete {
                data_dir: files.data_dir,
                missing,
                present,
            });
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let ca_pem = read_text(&files.ca_cert)?;
        let ca_chain = parse_certs(&files.ca_cert, &ca_pem)?;
        let ca_key_pem = read_text(&files.ca_key)?;
        check_key(
            &provider,
            &files.ca_key,
            &ca_key_pem,
            &ca_chain[0],
            &files.ca_cert,
        )?;
        let token = read_token(&files.token)?;
        let service_account_key = load_or_create_service_account_key(&files.service_account_key)?;
        drop(lock);

        let serving = issue_serving(&ca_pem, &ca_key_pem, names)?;
        Ok(Self {
            ca_pem,
            cert_pem: serving.cert_pem,
            key_pem: serving.key_pem,
            token,
            service_account_key,
            generated,
        })
    }
}

/// Which of `paths` exist, and which do not, in order.
fn which_exist(paths: &[&PathBuf]) -> Result<(Vec<PathBuf>, Vec<PathBuf>), CredentialsError> {
    let (mut present, mut missing) = (Vec::new(), Vec::new());
    for path in paths {
        match path.try_exists() {
            Ok(true) => present.push((*path).clone()),
            Ok(false) => missing.push((*path).clone()),
            Err(source) => {
                return Err(CredentialsError::Read {
                    path: (*path).clone(),
                    source,
                });
            }
        }
    }
    Ok((present, missing))
}

/// Writes each file (mode 0600, atomically), in order.
fn write_files(files: &[(&PathBuf, &String)]) -> Result<(), CredentialsError> {
    for (path, contents) in files {
        fsutil::write_private_atomic(path, contents.as_bytes()).map_err(|source| {
            CredentialsError::Write {
                path: (*path).clone(),
                source,
            }
        })?;
    }
    Ok(())
}

/// A serving certificate signed by the CA, for the loopback names and `names`, valid from
/// now (backdated an hour, for clock skew) for about ten years.
fn issue_serving(
    ca_pem: &str,
    ca_key_pem: &str,
    names: &[String],
) -> Result<IssuedCertificate, CredentialsError> {
    let mut all: Vec<String> = SERVING_NAMES.map(str::to_owned).to_vec();
    for name in names {
        if !all.contains(name) {
            all.push(name.clone());
        }
    }
    let now = jiff::Timestamp::now().as_second();
    crate::auth::x509::issue_serving_certificate(
        ca_pem,
        ca_key_pem,
        &crate::auth::x509::ServingRequest {
            common_name: SERVING_COMMON_NAME.into(),
            names: all,
            not_before: now - BACKDATE.as_secs() as i64,
            not_after: now + VALIDITY.as_secs() as i64,
        },
    )
    .map_err(CredentialsError::Issue)
}

/// The ServiceAccount signing key in `path` (PKCS#8 DER), written first if missing.
fn load_or_create_service_account_key(path: &Path) -> Result<Vec<u8>, CredentialsError> {
    let exists = path.try_exists().map_err(|source| CredentialsError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    if !exists {
        let key = KeyPair::generate().map_err(CredentialsError::Generate)?;
        fsutil::write_private_atomic(path, key.serialize_pem().as_bytes()).map_err(|source| {
            CredentialsError::Write {
                path: path.to_path_buf(),
                source,
            }
        })?;
        tracing::info!(file = %path.display(), "generated a ServiceAccount token signing key");
    }
    let pem = read_text(path)?;
    let der = match PrivateKeyDer::from_pem_slice(pem.as_bytes()) {
        Ok(PrivateKeyDer::Pkcs8(der)) => der.secret_pkcs8_der().to_vec(),
        Ok(_) => return Err(invalid(path, "not a PKCS#8 private key")),
        Err(e) => return Err(invalid(path, format!("not a PEM private key: {e}"))),
    };
    ServiceAccountTokens::from_pkcs8(&der).map_err(|e| invalid(path, e.to_string()))?;
    Ok(der)
}

/// A new key pair and a client certificate for `user` in `groups` (one organization each),
/// signed by the CA stored in `data_dir`, valid from now (backdated an hour, for clock skew)
/// for `validity`. The server maps it to that user and groups.
pub fn issue_client_certificate(
    data_dir: &Path,
    user: &str,
    groups: &[String],
    validity: Duration,
) -> Result<IssuedCertificate, CredentialsError> {
    let files = Files::new(data_dir);
    let ca_pem = read_text(&files.ca_cert)?;
    let ca_key_pem = read_text(&files.ca_key)?;
    let now = jiff::Timestamp::now().as_second();
    let request = CertificateRequest {
        user: user.to_string(),
        groups: groups.to_vec(),
        not_before: now - BACKDATE.as_secs() as i64,
        not_after: now.saturating_add(i64::try_from(validity.as_secs()).unwrap_or(i64::MAX)),
    };
    crate::auth::x509::issue_client_certificate(&ca_pem, &ca_key_pem, &request)
        .map_err(CredentialsError::Issue)
}

/// The bearer token in `path`: one line of token characters.
fn read_token(path: &Path) -> Result<String, CredentialsError> {
    let token = read_text(path)?.trim().to_owned();
    if token.is_empty() {
        return Err(invalid(path, "the token is empty"));
    }
    if let Some(bad) = token.chars().find(|c| !is_token_char(*c)) {
        return Err(invalid(
            path,
            format!(
                "the token contains {bad:?}; allowed are ASCII letters, digits and - . _ ~ + / ="
            ),
        ));
    }
    Ok(token)
}

/// Characters allowed in a bearer token (RFC 6750 `b64token`).
fn is_token_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_' | '~' | '+' | '/' | '=')
}

fn read_text(path: &Path) -> Result<String, CredentialsError> {
    let bytes = std::fs::read(path).map_err(|source| CredentialsError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    String::from_utf8(bytes).map_err(|_| invalid(path, "not UTF-8 text"))
}

/// Parses all `CERTIFICATE` blocks of a PEM file; at least one is required.
fn parse_certs(path: &Path, pem: &str) -> Result<Vec<CertificateDer<'static>>, CredentialsError> {
    let certs = CertificateDer::pem_slice_iter(pem.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| invalid(path, format!("not valid PEM: {e}")))?;
    if certs.is_empty() {
        return Err(invalid(path, "contains no PEM CERTIFICATE block"));
    }
    Ok(certs)
}

/// Checks that `key_pem` (from `key_path`) is a usable private key for `cert` (from `cert_path`).
fn check_key(
    provider: &CryptoProvider,
    key_path: &Path,
    key_pem: &str,
    cert: &CertificateDer<'static>,
    cert_path: &Path,
) -> Result<(), CredentialsError> {
    let key = PrivateKeyDer::from_pem_slice(key_pem.as_bytes())
        .map_err(|e| invalid(key_path, format!("not a PEM private key: {e}")))?;
    let signing_key = provider
        .key_provider
        .load_private_key(key)
        .map_err(|e| invalid(key_path, format!("unusable private key: {e}")))?;
    let certified = rustls::sign::CertifiedKey::new(vec![cert.clone()], signing_key);
    match certified.keys_match() {
        Ok(()) | Err(rustls::Error::InconsistentKeys(rustls::InconsistentKeys::Unknown)) => Ok(()),
        Err(rustls::Error::InconsistentKeys(rustls::InconsistentKeys::KeyMismatch)) => {
            Err(invalid(
                key_path,
                format!(
                    "the key does not belong to the certificate in {}",
                    cert_path.display()
                ),
            ))
        }
        Err(e) => Err(invalid(cert_path, format!("unusable certificate: {e}"))),
    }
}

/// Freshly generated credentials, PEM-encoded.
struct Generated {
    ca_pem: String,
    ca_key_pem: String,
    cert_pem: String,
    key_pem: String,
    service_account_key_pem: String,
    token: String,
}

/// Makes `params` valid from now (backdated an hour, for clock skew) for about ten years.
fn valid_from_now(params: &mut CertificateParams) {
    let since_epoch = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    let now = rcgen::date_time_ymd(1970, 1, 1) + Duration::from_secs(since_epoch.as_secs());
    params.not_before = now - BACKDATE;
    params.not_after = now + VALIDITY;
}

/// A new CA: its certificate and key, PEM.
fn generate_ca() -> Result<(String, String), rcgen::Error> {
    let ca = new_ca()?;
    Ok((ca.pem(), ca.key().serialize_pem()))
}

fn new_ca() -> Result<CertifiedIssuer<'static, KeyPair>, rcgen::Error> {
    let ca_key = KeyPair::generate()?;
    let mut ca_params = CertificateParams::default();
    ca_params.distinguished_name = name(CA_COMMON_NAME);
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    ca_params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    valid_from_now(&mut ca_params);
    ca_params.serial_number = Some(random_serial());
    CertifiedIssuer::self_signed(ca_params, ca_key)
}

fn generate() -> Result<Generated, rcgen::Error> {
    let ca = new_ca()?;
    let ca_key_pem = ca.key().serialize_pem();

    let key = KeyPair::generate()?;
    let mut params = CertificateParams::new(SERVING_NAMES.map(str::to_owned).to_vec())?;
    params.distinguished_name = name(SERVING_COMMON_NAME);
    params.is_ca = IsCa::ExplicitNoCa;
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    // Python 3.13+ (VERIFY_X509_STRICT) requires the authority key identifier.
    params.use_authority_key_identifier_extension = true;
    valid_from_now(&mut params);
    params.serial_number = Some(random_serial());
    let cert = params.signed_by(&key, &ca)?;

    Ok(Generated {
        ca_pem: ca.pem(),
        ca_key_pem,
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
        service_account_key_pem: KeyPair::generate()?.serialize_pem(),
        token: generate_token(),
    })
}

fn name(common_name: &str) -> DistinguishedName {
    let mut name = DistinguishedName::new();
    name.push(DnType::CommonName, common_name);
    name
}

/// A positive 128-bit random serial number without a leading zero byte.
fn random_serial() -> SerialNumber {
    let mut bytes: [u8; 16] = rand::random();
    bytes[0] = (bytes[0] & 0x7f) | 0x40;
    SerialNumber::from_slice(&bytes)
}

/// A new bearer token: URL-safe base64 (no padding) of 32 random bytes, 43 characters.
pub fn generate_token() -> String {
    let bytes: [u8; TOKEN_BYTES] = rand::random();
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

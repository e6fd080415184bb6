//! ServiceAccount tokens: the signed JWTs `serviceaccounts/{name}/token` issues (the
//! TokenRequest API) and `TokenReview` verifies, with kube-apiserver's claims.
//!
//! Tokens are signed with ES256 by one key per server; its key id is kube-apiserver's: the
//! base64url SHA-256 of the public key's PKIX encoding. A token whose signature was checked
//! once is remembered (a few thousand at most), so a client sending the same token on every
//! request costs one ECDSA verification, not one per request; the time and audience checks
//! still run each time.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use ring::rand::SystemRandom;
use ring::signature::{
    ECDSA_P256_SHA256_FIXED, ECDSA_P256_SHA256_FIXED_SIGNING, EcdsaKeyPair, KeyPair,
    UnparsedPublicKey,
};
use serde_json::{Value, json};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// The default issuer of the tokens (`--service-account-issuer` of kubeadm clusters), and so
/// their default audience; a server can be given another
/// ([`ApiServerBuilder::service_account_issuer`](crate::ApiServerBuilder::service_account_issuer)).
pub const ISSUER: &str = "https://kubernetes.default.svc.cluster.local";

/// Why a key cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    /// The signing key is not an ECDSA P-256 private key in PKCS#8.
    #[error("not an ECDSA P-256 private key in PKCS#8: {0}")]
    Private(String),
    /// A verifying key is not an ECDSA P-256 public key.
    #[error(
        "public key {index} is not an ECDSA P-256 public key (SubjectPublicKeyInfo DER): konverge signs and verifies ES256 tokens only"
    )]
    Public {
        /// Its position in the list given.
        index: usize,
    },
}

/// A public key tokens are verified with: its key id and its uncompressed P-256 point.
#[derive(Debug, Clone, PartialEq, Eq)]
struct VerifyingKey {
    key_id: String,
    point: Vec<u8>,
}

impl VerifyingKey {
    /// The key of a P-256 point, with kube-apiserver's key id: the base64url SHA-256 of the
    /// key's PKIX encoding.
    fn of_point(point: &[u8]) -> VerifyingKey {
        let mut spki = P256_SPKI_PREFIX.to_vec();
        spki.extend_from_slice(point);
        let digest = ring::digest::digest(&ring::digest::SHA256, &spki);
        VerifyingKey {
            key_id: URL_SAFE_NO_PAD.encode(digest.as_ref()),
            point: point.to_vec(),
        }
    }

    /// The key a P-256 SubjectPublicKeyInfo holds, if that is what `spki` is.
    fn of_spki(spki: &[u8]) -> Option<VerifyingKey> {
        let point = spki.strip_prefix(&P256_SPKI_PREFIX[..])?;
        (point.len() == 65 && point[0] == 0x04).then(|| VerifyingKey::of_point(point))
    }

    /// Whether this key made `signature` of `message`.
    fn verifies(&self, message: &[u8], signature: &[u8]) -> bool {
        UnparsedPublicKey::new(&ECDSA_P256_SHA256_FIXED, &self.point)
            .verify(message, signature)
            .is_ok()
    }

    /// The key as a JSON Web Key.
    fn jwk(&self) -> Value {
        // An uncompressed P-256 point: 0x04, then X and Y, 32 bytes each.
        let (x, y) = self.point[1..].split_at(32);
        json!({
            "use": "sig",
            "kty": "EC",
            "kid": self.key_id,
            "crv": "P-256",
            "alg": "ES256",
            "x": URL_SAFE_NO_PAD.encode(x),
            "y": URL_SAFE_NO_PAD.encode(y),
        })
    }
}

/// The key tokens are signed with, the keys they are verified with, and the issuer they name.
pub struct ServiceAccountTokens {
    key: EcdsaKeyPair,
    /// The signing key's public half, then the other keys tokens may be signed with
    /// (`--service-account-key-file`).
    verifying: Vec<VerifyingKey>,
    /// `iss` of the tokens issued, the one accepted, and the default audience.
    issuer: String,
    /// The claims of tokens whose signature was verified, by token.
    signed: Mutex<HashMap<String, Arc<Value>>>,
}

/// How many verified tokens are remembered; past it the memory starts over.
const REMEMBERED: usize = 4096;

impl std::fmt::Debug for ServiceAccountTokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServiceAccountTokens")
            .field("key_id", &self.verifying[0].key_id)
            .field("issuer", &self.issuer)
            .finish_non_exhaustive()
    }
}

/// The PKIX (`SubjectPublicKeyInfo`) prefix of an uncompressed P-256 public key.
const P256_SPKI_PREFIX: [u8; 26] = [
    0x30, 0x59, 0x30, 0x13, 0x06, 0x07, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01, 0x06, 0x08, 0x2a,
    0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07, 0x03, 0x42, 0x00,
];

/// The claims of a verified token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claims {
    /// The ServiceAccount's namespace.
    pub namespace: String,
    /// The ServiceAccount's name.
    pub name: String,
    /// The ServiceAccount's uid.
    pub uid: String,
    /// The audiences the token is for.
    pub audiences: Vec<String>,
    /// The token's id (`jti`).
    pub id: String,
    /// The object it is bound to, if any.
    pub bound: Option<Bound>,
}

/// The kinds a token can be bound to (TokenRequest `spec.boundObjectRef`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BoundKind {
    /// A Pod, in the ServiceAccount's namespace.
    Pod,
    /// A Secret, in the ServiceAccount's namespace.
    Secret,
    /// A Node.
    Node,
}

impl BoundKind {
    /// The kind as `boundObjectRef.kind` names it.
    pub fn kind(self) -> &'static str {
        match self {
            BoundKind::Pod => "Pod",
            BoundKind::Secret => "Secret",
            BoundKind::Node => "Node",
        }
    }

    /// The key of its claim under `kubernetes.io`, and its resource.
    fn claim(self) -> &'static str {
        match self {
            BoundKind::Pod => "pod",
            BoundKind::Secret => "secret",
            BoundKind::Node => "node",
        }
    }

    /// The kind named `kind`, if tokens can be bound to it.
    pub fn of(kind: &str) -> Option<BoundKind> {
        [BoundKind::Pod, BoundKind::Secret, BoundKind::Node]
            .into_iter()
            .find(|k| k.kind() == kind)
    }
}

/// An object a token is bound to: the token is valid only while it exists with this uid.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bound {
    /// Its kind.
    pub kind: BoundKind,
    /// Its name.
    pub name: String,
    /// Its uid.
    pub uid: String,
}

impl ServiceAccountTokens {
    /// Tokens signed with a new random key (valid until the server stops).
    pub fn generate() -> Self {
        Self::from_pkcs8(&Self::generate_key()).expect("a key ring just made")
    }

    /// A new random signing key, in PKCS#8 DER (for
    /// [`ApiServerBuilder::service_account_key`](crate::ApiServerBuilder::service_account_key):
    /// a server restarted with the same key accepts the tokens it issued before).
    pub fn generate_key() -> Vec<u8> {
        let rng = SystemRandom::new();
        EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &rng)
            .expect("the system random generator works")
            .as_ref()
            .to_vec()
    }

    /// Tokens signed with an ECDSA P-256 key in PKCS#8 DER (what `konverge up` keeps in
    /// its data directory, so tokens outlive restarts).
    pub fn from_pkcs8(der: &[u8]) -> Result<Self, KeyError> {
        let key =
            EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, der, &SystemRandom::new())
                .map_err(|e| KeyError::Private(e.to_string()))?;
        let signing = VerifyingKey::of_point(key.public_key().as_ref());
        Ok(ServiceAccountTokens {
            key,
            verifying: vec![signing],
            issuer: ISSUER.to_string(),
            signed: Mutex::default(),
        })
    }

    /// The same key, issuing and accepting tokens of `issuer` (`--service-account-issuer`),
    /// which is also their default audience (as kube-apiserver's `--api-audiences` defaults
    /// to the issuer).
    pub fn with_issuer(mut self, issuer: impl Into<String>) -> Self {
        self.issuer = issuer.into();
        self.signed
            .get_mut()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
        self
    }

    /// Also accepts tokens signed by the keys of these ECDSA P-256 public keys
    /// (SubjectPublicKeyInfo DER), and publishes them in the key set — as kube-apiserver
    /// verifies with every key of `--service-account-key-file`. The signing key's own public
    /// key may be among them.
    pub fn with_public_keys(mut self, spki_der: &[Vec<u8>]) -> Result<Self, KeyError> {
        for (index, der) in spki_der.iter().enumerate() {
            let key = VerifyingKey::of_spki(der).ok_or(KeyError::Public { index })?;
            if !self.verifying.contains(&key) {
                self.verifying.push(key);
            }
        }
        Ok(self)
    }

    /// The issuer tokens name and must name.
    pub fn issuer(&self) -> &str {
        &self.issuer
    }

    /// The audiences a TokenRequest or TokenReview names in `spec.audiences`, or the issuer.
    pub fn audiences(&self, body: &Value) -> Vec<String> {
        let named: Vec<String> = body
            .pointer("/spec/audiences")
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(|v| v.as_str().map(String::from))
                    .collect()
            })
            .unwrap_or_default();
        if named.is_empty() {
            vec![self.issuer.clone()]
        } else {
            named
        }
    }

    /// The keys tokens verify with, as a JSON Web Key Set (`/openid/v1/jwks`): the signing
    /// key first.
    pub fn jwks(&self) -> Value {
        json!({"keys": self.verifying.iter().map(VerifyingKey::jwk).collect::<Vec<_>>()})
    }

    /// The OpenID provider configuration (`/.well-known/openid-configuration`) with the
    /// keys at `jwks_uri`.
    pub fn openid_configuration(&self, jwks_uri: &str) -> Value {
        json!({
            "issuer": self.issuer,
            "jwks_uri": jwks_uri,
            "response_types_supported": ["id_token"],
            "subject_types_supported": ["public"],
            "id_token_signing_alg_values_supported": ["ES256"],
        })
    }

    /// A token for the ServiceAccount `namespace/name` (uid `uid`), for `audiences`, valid
    /// from `now` for `seconds`, optionally bound to an object.
    #[allow(clippy::too_many_arguments)]
    pub fn issue(
        &self,
        namespace: &str,
        name: &str,
        uid: &str,
        audiences: &[String],
        now: i64,
        seconds: i64,
        bound: Option<&Bound>,
    ) -> String {
        let mut kubernetes = json!({
            "namespace": namespace,
            "serviceaccount": {"name": name, "uid": uid},
        });
        if let Some(bound) = bound {
            kubernetes[bound.kind.claim()] = json!({"name": bound.name, "uid": bound.uid});
        }
        let claims = json!({
            "aud": audiences,
            "exp": now + seconds,
            "iat": now,
            "iss": self.issuer,
            "jti": uuid::Uuid::new_v4().to_string(),
            "kubernetes.io": kubernetes,
            "nbf": now,
            "sub": format!("system:serviceaccount:{namespace}:{name}"),
        });
        let header = json!({"alg": "ES256", "kid": self.verifying[0].key_id});
        let signing_input = format!(
            "{}.{}",
            URL_SAFE_NO_PAD.encode(header.to_string()),
            URL_SAFE_NO_PAD.encode(claims.to_string())
        );
        let signature = self
            .key
            .sign(&SystemRandom::new(), signing_input.as_bytes())
            .expect("signing with a valid key");
        format!(
            "{signing_input}.{}",
            URL_SAFE_NO_PAD.encode(signature.as_ref())
        )
    }

    /// The claims of `token` if this server signed it, it is valid at `now`, and it is for
    /// one of `audiences`; `None` otherwise.
    pub fn verify(&self, token: &str, audiences: &[String], now: i64) -> Option<Claims> {
        let claims = self.signed_claims(token)?;
        if claims["iss"].as_str() != Some(self.issuer.as_str())
            || claims["exp"].as_i64()? < now
            || claims["nbf"].as_i64().unwrap_or(0) > now
        {
            return None;
        }
        let token_audiences: Vec<String> = claims["aud"]
            .as_array()?
            .iter()
            .filter_map(|a| a.as_str().map(String::from))
            .collect();
        let matched: Vec<String> = audiences
            .iter()
            .filter(|a| token_audiences.contains(a))
            .cloned()
            .collect();
        if matched.is_empty() {
            return None;
        }
        let k = &claims["kubernetes.io"];
        let bound = [BoundKind::Pod, BoundKind::Secret, BoundKind::Node]
            .into_iter()
            .find_map(|kind| {
                let claim = &k[kind.claim()];
                Some(Bound {
                    kind,
                    name: claim["name"].as_str()?.to_string(),
                    uid: claim["uid"].as_str().unwrap_or("").to_string(),
                })
            });
        Some(Claims {
            namespace: k["namespace"].as_str()?.to_string(),
            name: k["serviceaccount"]["name"].as_str()?.to_string(),
            uid: k["serviceaccount"]["uid"].as_str()?.to_string(),
            audiences: matched,
            id: claims["jti"].as_str().unwrap_or("").to_string(),
            bound,
        })
    }

    /// The claims of `token` if one of the server's keys signed it (remembered once checked:
    /// the same token always verifies the same way under the same keys).
    fn signed_claims(&self, token: &str) -> Option<Arc<Value>> {
        if let Some(claims) = self
            .signed
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(token)
        {
            return Some(claims.clone());
        }
        let mut parts = token.split('.');
        let (header, claims, signature) = (parts.next()?, parts.next()?, parts.next()?);
        if parts.next().is_some() {
            return None;
        }
        let signature = URL_SAFE_NO_PAD.decode(signature).ok()?;
        let message = format!("{header}.{claims}");
        if !self
            .verifying
            .iter()
            .any(|key| key.verifies(message.as_bytes(), &signature))
        {
            return None;
        }
        let claims: Arc<Value> =
            Arc::new(serde_json::from_slice(&URL_SAFE_NO_PAD.decode(claims).ok()?).ok()?);
        let mut signed = self.signed.lock().unwrap_or_else(|e| e.into_inner());
        if signed.len() >= REMEMBERED {
            signed.clear();
        }
        signed.insert(token.to_string(), claims.clone());
        Some(claims)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_verify_only_as_issued() {
        let tokens = ServiceAccountTokens::generate();
        let aud = vec![ISSUER.to_string()];
        let token = tokens.issue(
            "d",
            "builder",
            "u-1",
            &aud,
            1_000,
            3_600,
            Some(&Bound {
                kind: BoundKind::Pod,
                name: "web".into(),
                uid: "p-1".into(),
            }),
        );
        let claims = tokens.verify(&token, &aud, 2_000).expect("valid");
        assert_eq!(
            (
                claims.namespace.as_str(),
                claims.name.as_str(),
                claims.uid.as_str()
            ),
            ("d", "builder", "u-1")
        );
        let bound = claims.bound.expect("bound");
        assert_eq!(
            (bound.kind, bound.name.as_str(), bound.uid.as_str()),
            (BoundKind::Pod, "web", "p-1")
        );
        // Expired, for another audience, from another key, or tampered with: refused.
        assert!(tokens.verify(&token, &aud, 10_000).is_none());
        assert!(
            tokens
                .verify(&token, &["vault".to_string()], 2_000)
                .is_none()
        );
        assert!(
            ServiceAccountTokens::generate()
                .verify(&token, &aud, 2_000)
                .is_none()
        );
        let mut tampered = token.clone();
        tampered.insert(token.find('.').unwrap() + 3, 'x');
        assert!(tokens.verify(&tampered, &aud, 2_000).is_none());
        // The header names the key as kube-apiserver does.
        let header: Value = serde_json::from_slice(
            &URL_SAFE_NO_PAD
                .decode(token.split('.').next().unwrap())
                .unwrap(),
        )
        .unwrap();
        assert_eq!(header["alg"], "ES256");
        assert_eq!(header["kid"].as_str().unwrap().len(), 43);
    }

    #[test]
    fn a_remembered_token_is_still_checked_for_time_and_audience() {
        let tokens = ServiceAccountTokens::generate();
        let aud = vec![ISSUER.to_string()];
        let token = tokens.issue("d", "builder", "u-1", &aud, 1_000, 3_600, None);
        assert!(tokens.verify(&token, &aud, 2_000).is_some());
        assert!(tokens.verify(&token, &aud, 2_000).is_some());
        assert_eq!(
            tokens.signed.lock().unwrap().len(),
            1,
            "verified once, remembered"
        );
        assert!(tokens.verify(&token, &aud, 10_000).is_none(), "expired");
        assert!(tokens.verify(&token, &["vault".into()], 2_000).is_none());
        // Only what verified is remembered, and never more than REMEMBERED.
        let mut forged = token.clone();
        forged.insert(token.find('.').unwrap() + 3, 'x');
        assert!(tokens.verify(&forged, &aud, 2_000).is_none());
        assert_eq!(tokens.signed.lock().unwrap().len(), 1);
        for i in 0..REMEMBERED + 1 {
            let other = tokens.issue("d", &format!("sa-{i}"), "u", &aud, 1_000, 3_600, None);
            assert!(tokens.verify(&other, &aud, 2_000).is_some());
        }
        assert!(tokens.signed.lock().unwrap().len() <= REMEMBERED);
    }
}

//! What kube-apiserver itself keeps in `kube-system`, with the loops its post-start hooks
//! start (`pkg/controlplane/apiserver/server.go`):
//!
//! - the server's identity Lease (`start-kube-apiserver-identity-lease-controller`): named
//!   after the host (`apiserver-` and the base32 of a SHA-256 over the host name and
//!   `kube-apiserver`), labelled `apiserver.kubernetes.io/identity: kube-apiserver`, renewed
//!   every 10 seconds for 3600; identity Leases that expired are deleted hourly
//!   (`start-kube-apiserver-identity-lease-garbage-collector`);
//! - `extension-apiserver-authentication` (`start-cluster-authentication-info-controller`):
//!   the CA that signs client certificates (`client-ca-file`), combined with the CAs already
//!   published there, for aggregated API servers;
//! - `kube-apiserver-legacy-service-account-token-tracking`
//!   (`start-legacy-token-tracking-controller`): the day legacy token tracking started.
//!
//! The ConfigMaps are put back as their controllers would when changed or deleted.

use std::time::Duration;

use bytes::Bytes;
use konverge_apimachinery::selector::LabelSelector;
use konverge_store::{KeyRange, WatchRequest, WatchResponse};
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject as _;
use serde_json::{Value, json};

use crate::error::{ApiError, Reason};
use crate::registry::{DeleteOptions, ListOptions, Registry, WriteOptions};
use crate::resources::ResourceType;

/// The label that marks an identity Lease, and whose it is.
pub const IDENTITY_LABEL: &str = "apiserver.kubernetes.io/identity";
/// The identity label's value for kube-apiserver.
const KUBE_APISERVER: &str = "kube-apiserver";
/// How long an identity Lease lasts unrenewed.
const LEASE_DURATION_SECONDS: i64 = 3600;
/// How often the identity Lease is renewed.
const RENEW_INTERVAL: Duration = Duration::from_secs(10);
/// How often expired identity Leases are looked for.
const LEASE_GC_PERIOD: Duration = Duration::from_secs(3600);
/// The ConfigMap aggregated API servers read the cluster's authentication from.
pub const AUTHENTICATION_CONFIG_MAP: &str = "extension-apiserver-authentication";
/// The ConfigMap that says since when legacy ServiceAccount tokens are tracked.
pub const TOKEN_TRACKING_CONFIG_MAP: &str = "kube-apiserver-legacy-service-account-token-tracking";
/// How often the token tracking ConfigMap may be created again after a delete.
const TOKEN_TRACKING_CREATE_EVERY: Duration = Duration::from_secs(30 * 60);
const NAMESPACE: &str = "kube-system";

/// What the loops are told about the server.
#[derive(Debug, Clone, Default)]
pub struct Settings {
    /// The host name the identity Lease is named after.
    pub hostname: String,
    /// The PEM of the CAs whose client certificates the server accepts.
    pub client_ca: Option<String>,
    /// The front proxy the server reaches aggregated API servers as.
    pub front_proxy: Option<std::sync::Arc<crate::aggregator::FrontProxy>>,
}

impl Settings {
    /// Settings for this host (its name as the operating system gives it).
    pub fn for_this_host(client_ca: Option<String>) -> Self {
        Settings {
            hostname: hostname::get()
                .map(|h| h.to_string_lossy().into_owned())
                .unwrap_or_default(),
            client_ca,
            front_proxy: None,
        }
    }

    /// These settings, publishing `front_proxy` (`requestheader-*`).
    pub fn with_front_proxy(
        mut self,
        front_proxy: std::sync::Arc<crate::aggregator::FrontProxy>,
    ) -> Self {
        self.front_proxy = Some(front_proxy);
        self
    }
}

/// The server's identity on `hostname`: the name of its Lease, the same for every
/// kube-apiserver on that host.
pub fn server_id(hostname: &str) -> String {
    // Two length-prefixed fields, as Go's cryptobyte builder writes them.
    let mut data = Vec::with_capacity(hostname.len() + KUBE_APISERVER.len() + 4);
    for field in [hostname.as_bytes(), KUBE_APISERVER.as_bytes()] {
        data.extend_from_slice(&u16::try_from(field.len()).unwrap_or(u16::MAX).to_be_bytes());
        data.extend_from_slice(field);
    }
    let hash = ring::digest::digest(&ring::digest::SHA256, &data);
    let encoded = data_encoding::BASE32_NOPAD.encode(&hash.as_ref()[..16]);
    format!("apiserver-{}", encoded.to_lowercase())
}

/// Runs the loops until the store closes.
pub async fn run(registry: Registry, settings: Settings) {
    let catalog = registry.catalog();
    let (Some(leases), Some(config_maps)) = (
        catalog.get("coordination.k8s.io", "v1", "leases"),
        catalog.get("", "v1", "configmaps"),
    ) else {
        return;
    };
    let mut identity = IdentityLease::new(&settings.hostname);
    let mut tracking = TokenTracking::default();
    loop {
        let prefix = config_maps.namespace_prefix(Some(NAMESPACE));
        let watch = registry
            .store()
            .watch(WatchRequest::new(KeyRange::prefix(Bytes::from(
                prefix.clone(),
            ))))
            .await;
        let mut watch = match watch {
            Ok(watch) => watch,
            Err(konverge_store::Error::Closed) => return,
            Err(err) => {
                tracing::warn!(error = %err, "watching kube-system's ConfigMaps failed");
                tokio::time::sleep(Duration::from_secs(1)).await;
                continue;
            }
        };
        sync_authentication(&registry, &config_maps, &settings).await;
        tracking.sync(&registry, &config_maps).await;
        let mut renew = tokio::time::interval(RENEW_INTERVAL);
        let mut collect = tokio::time::interval(LEASE_GC_PERIOD);
        loop {
            let retry = tracking.retry_at;
            tokio::select! {
                message = watch.recv() => match message {
                    Some(Ok(WatchResponse::Events(events))) => {
                        for event in events {
                            let name = event.kv.key.strip_prefix(prefix.as_bytes()).unwrap_or_default();
                            if name == AUTHENTICATION_CONFIG_MAP.as_bytes() {
                                sync_authentication(&registry, &config_maps, &settings).await;
                            } else if name == TOKEN_TRACKING_CONFIG_MAP.as_bytes() {

                                tracking.sync(&registry, &config_maps).await;
                            }
                        }
                    }
                    Some(Ok(WatchResponse::Progress(_))) => {}
                    Some(Err(konverge_store::Error::Closed)) | None => return,
                    Some(Err(err)) => {
                        tracing::warn!(error = %err, "kube-system's ConfigMap watch ended");
                        break;
                    }
                },
                _ = renew.tick() => identity.renew(&registry, &leases).await,
                _ = collect.tick() => collect_expired(&registry, &leases).await,
                () = tokio::time::sleep_until(retry.unwrap_or_else(tokio::time::Instant::now)), if retry.is_some() => {
                    tracking.sync(&registry, &config_maps).await;
                }
            }
        }
    }
}

/// The identity Lease of this server, renewed as kube's lease controller renews it: from
/// the copy it last wrote, falling back to a read (and a create) when that fails.
struct IdentityLease {
    hostname: String,
    name: String,
    holder: String,
    latest: Option<Value>,
}

impl IdentityLease {
    fn new(hostname: &str) -> Self {
        let name = server_id(hostname);
        IdentityLease {
            hostname: hostname.to_string(),
            holder: format!("{name}_{}", uuid::Uuid::new_v4()),
            name,
            latest: None,
        }
    }

    /// The Lease as it is to be written: `base` (or a new one) renewed now, labelled.
    fn renewed(&self, base: Option<&Value>) -> Value {
        let mut lease = base.cloned().unwrap_or_else(|| {
            json!({
                "metadata": {"name": self.name, "namespace": NAMESPACE},
                "spec": {
                    "holderIdentity": self.holder,
                    "leaseDurationSeconds": LEASE_DURATION_SECONDS,
                },
            })
        });
        lease["spec"]["renewTime"] = json!(crate::audit::micro_time(jiff::Timestamp::now()));
        let metadata = &mut lease["metadata"];
        if !metadata["labels"].is_object() {
            metadata["labels"] = json!({});
        }
        metadata["labels"][IDENTITY_LABEL] = json!(KUBE_APISERVER);
        metadata["labels"]["kubernetes.io/hostname"] = json!(self.hostname);
        lease
    }

    async fn renew(&mut self, registry: &Registry, leases: &ResourceType) {
        if let Some(latest) = self.latest.take() {
            match self.update(registry, leases, &latest).await {
                Ok(()) => return,
                Err(e) => {
                    tracing::debug!(error = %e, "renewing the identity Lease from its last copy failed")
                }
            }
        }
        match registry
            .get(leases, Some(NAMESPACE), &self.name, None)
            .await
        {
            Ok(current) => {
                if let Err(e) = self.update(registry, leases, &current).await {
                    tracing::warn!(error = %e, lease = %self.name, "renewing the identity Lease failed");
                }
            }
            Err(e) if e.reason == Reason::NotFound => {
                let created = registry
                    .create(
                        leases,
                        Some(NAMESPACE),
                        self.renewed(None),
                        &WriteOptions::default(),
                    )
                    .await;
                match created {
                    Ok(written) => self.latest = Some(written.object),
                    Err(e) => {
                        tracing::warn!(error = %e, lease = %self.name, "creating the identity Lease failed")
                    }
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, lease = %self.name, "reading the identity Lease failed")
            }
        }
    }

    async fn update(
        &mut self,
        registry: &Registry,
        leases: &ResourceType,
        base: &Value,
    ) -> Result<(), ApiError> {
        let written = registry
            .update(
                leases,
                Some(NAMESPACE),
                &self.name,
                self.renewed(Some(base)),
                None,
                &WriteOptions::default(),
            )
            .await?;
        self.latest = Some(written.object);
        Ok(())
    }
}

/// Whether an identity Lease has expired at `now` (seconds since the Unix epoch): renewed
/// longer ago than it lasts, or missing its renew time or duration.
fn expired(lease: &Value, now: i64) -> bool {
    let renewed = lease
        .pointer("/spec/renewTime")
        .and_then(Value::as_str)
        .and_then(|t| t.parse::<jiff::Timestamp>().ok());
    let duration = lease
        .pointer("/spec/leaseDurationSeconds")
        .and_then(Value::as_i64);
    match (renewed, duration) {
        (Some(renewed), Some(duration)) => renewed.as_second() + duration < now,
        _ => true,
    }
}

/// Deletes every kube-apiserver identity Lease that expired (a server that stopped).
async fn collect_expired(registry: &Registry, leases: &ResourceType) {
    let selector = match LabelSelector::parse(&format!("{IDENTITY_LABEL}={KUBE_APISERVER}")) {
        Ok(selector) => selector,
        Err(e) => {
            tracing::warn!(error = %e, "the identity Lease selector does not parse");
            return;
        }
    };
    let options = ListOptions {
        label_selector: Some(selector),
        ..ListOptions::default()
    };
    let listed = match registry.list(leases, Some(NAMESPACE), &options).await {
        Ok(listed) => listed,
        Err(e) => {
            tracing::warn!(error = %e, "listing identity Leases failed");
            return;
        }
    };
    let now = jiff::Timestamp::now().as_second();
    for lease in listed.items.iter().filter(|l| expired(l, now)) {
        let name = lease
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or_default();
        // Read again before deleting: another server may have renewed or removed it.
        match registry.get(leases, Some(NAMESPACE), name, None).await {
            Ok(current) if expired(&current, now) => {}
            Ok(_) => continue,
            Err(e) if e.reason == Reason::NotFound => continue,
            Err(e) => {
                tracing::warn!(error = %e, lease = name, "reading an identity Lease failed");
                continue;
            }
        }
        match registry
            .delete(leases, Some(NAMESPACE), name, &DeleteOptions::default())
            .await
        {
            Ok(_) => {}
            Err(e) if e.reason == Reason::NotFound => {}
            Err(e) => tracing::warn!(error = %e, lease = name, "deleting an identity Lease failed"),
        }
    }
}

/// The certificates of a PEM bundle, in order, or `None` when a block does not parse (kube's
/// controller then leaves the ConfigMap as it is).
fn certificates(bundle: &str) -> Option<Vec<CertificateDer<'static>>> {
    CertificateDer::pem_slice_iter(bundle.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .ok()
}

/// `existing` and `required` combined as kube's controller combines them: every certificate
/// of both, in order, without those that expired more than five minutes ago and without
/// repeats, as a PEM bundle (`None` when none is left).
fn combined_bundle(existing: &str, required: &str, now: i64) -> Option<Option<String>> {
    let mut certs = certificates(existing)?;
    certs.extend(certificates(required)?);
    let mut kept: Vec<CertificateDer<'static>> = Vec::new();
    for cert in certs {
        let current = crate::auth::x509::usage(&cert).is_ok_and(|u| u.not_after > now - 300);
        if current && !kept.contains(&cert) {
            kept.push(cert);
        }
    }
    if kept.is_empty() {
        return Some(None);
    }
    Some(Some(
        kept.iter()
            .map(|c| crate::auth::x509::pem("CERTIFICATE", c))
            .collect(),
    ))
}

/// The `requestheader-*` values published: the CAs already there and the front proxy's (as
/// for `client-ca-file`), and each list (allowed names, headers) those already there, then
/// the front proxy's that are missing, as kube's cluster authentication trust controller
/// combines them. `None` when the CA bundle there holds something else than certificates.
fn combined_request_header(existing: Option<&Value>, own: &Value, now: i64) -> Option<Value> {
    let existing_text = |key: &str| {
        existing
            .and_then(|d| d.get(key))
            .and_then(Value::as_str)
            .unwrap_or_default()
    };
    let mut combined = serde_json::Map::new();
    let ca_key = "requestheader-client-ca-file";
    if let Some(bundle) = combined_bundle(
        existing_text(ca_key),
        own[ca_key].as_str().unwrap_or_default(),
        now,
    )? {
        combined.insert(ca_key.into(), Value::from(bundle));
    }
    for (key, value) in own.as_object()? {
        if key == ca_key {
            continue;
        }
        let mut list: Vec<String> = serde_json::from_str(existing_text(key)).unwrap_or_default();
        let wanted: Vec<String> = serde_json::from_str(value.as_str()?).ok()?;
        for item in wanted {
            if !list.contains(&item) {
                list.push(item);
            }
        }
        combined.insert(key.clone(), Value::from(serde_json::to_string(&list).ok()?));
    }
    Some(Value::Object(combined))
}

/// Writes `extension-apiserver-authentication` if its data is not what the cluster's
/// authentication combined with what it publishes now says.
async fn sync_authentication(registry: &Registry, config_maps: &ResourceType, settings: &Settings) {
    let client_ca = settings.client_ca.as_deref();
    let current = match registry
        .get(
            config_maps,
            Some(NAMESPACE),
            AUTHENTICATION_CONFIG_MAP,
            None,
        )
        .await
    {
        Ok(current) => Some(current),
        Err(e) if e.reason == Reason::NotFound => None,
        Err(e) => {
            tracing::warn!(error = %e, "reading {AUTHENTICATION_CONFIG_MAP} failed");
            return;
        }
    };
    let existing = current
        .as_ref()
        .and_then(|c| c.pointer("/data/client-ca-file"))
        .and_then(Value::as_str)
        .unwrap_or_default();
    let now = jiff::Timestamp::now().as_second();
    let Some(bundle) = combined_bundle(existing, client_ca.unwrap_or_default(), now) else {
        tracing::warn!(
            "{AUTHENTICATION_CONFIG_MAP}: client-ca-file holds a block that is not a certificate"
        );
        return;
    };
    let mut data = match bundle {
        Some(bundle) => json!({"client-ca-file": bundle}),
        None => json!({}),
    };
    if let Some(front_proxy) = &settings.front_proxy {
        let existing = current.as_ref().and_then(|c| c.get("data"));
        let Some(request_header) =
            combined_request_header(existing, &front_proxy.request_header_data(), now)
        else {
            tracing::warn!(
                "{AUTHENTICATION_CONFIG_MAP}: requestheader-client-ca-file holds a block that is not a certificate"
            );
            return;
        };
        if let (Some(data), Some(request_header)) =
            (data.as_object_mut(), request_header.as_object())
        {
            data.extend(request_header.clone());
        }
    }
    let written = match current {
        // Nil and empty data are the same to kube's comparison: nothing to publish, nothing
        // created.
        Some(current) if current.get("data").unwrap_or(&json!({})) == &data => return,
        None if data == json!({}) => return,
        Some(mut current) => {
            current["data"] = data;
            registry
                .update(
                    config_maps,
                    Some(NAMESPACE),
                    AUTHENTICATION_CONFIG_MAP,
                    current,
                    None,
                    &WriteOptions::default(),
                )
                .await
                .map(|_| ())
        }
        None => registry
            .create(
                config_maps,
                Some(NAMESPACE),
                json!({"metadata": {"name": AUTHENTICATION_CONFIG_MAP}, "data": data}),
                &WriteOptions::default(),
            )
            .await
            .map(|_| ()),
    };
    super::report_write(written, AUTHENTICATION_CONFIG_MAP);
}

/// The legacy token tracking ConfigMap's controller: creates it with today's date (at most
/// once per half hour, as kube's rate limiter allows), and puts today's date back when its
/// `since` is not a date.
#[derive(Debug, Default)]
struct TokenTracking {
    /// When the ConfigMap was last created by this server.
    created: Option<tokio::time::Instant>,
    /// A create put off by the rate limit, and until when.
    retry_at: Option<tokio::time::Instant>,
}

impl TokenTracking {
    async fn sync(&mut self, registry: &Registry, config_maps: &ResourceType) {
        self.retry_at = None;
        let today = jiff::Timestamp::now().strftime("%Y-%m-%d").to_string();
        let written = match registry
            .get(
                config_maps,
                Some(NAMESPACE),
                TOKEN_TRACKING_CONFIG_MAP,
                None,
            )
            .await
        {
            Ok(mut current) => {
                let since = current.pointer("/data/since").and_then(Value::as_str);
                if since.is_some_and(is_date) {
                    return;
                }
                if !current["data"].is_object() {
                    current["data"] = json!({});
                }
                current["data"]["since"] = json!(today);
                registry
                    .update(
                        config_maps,
                        Some(NAMESPACE),
                        TOKEN_TRACKING_CONFIG_MAP,
                        current,
                        None,
                        &WriteOptions::default(),
                    )
                    .await
                    .map(|_| ())
            }
            Err(e) if e.reason == Reason::NotFound => {
                let now = tokio::time::Instant::now();
                if let Some(created) = self.created
                    && now < created + TOKEN_TRACKING_CREATE_EVERY
                {
                    self.retry_at = Some(created + TOKEN_TRACKING_CREATE_EVERY);
                    return;
                }
                let created = registry
                    .create(
                        config_maps,
                        Some(NAMESPACE),
                        json!({"metadata": {"name": TOKEN_TRACKING_CONFIG_MAP}, "data": {"since": today}}),
                        &WriteOptions::default(),
                    )
                    .await;
                if created.is_ok() {
                    self.created = Some(now);
                }
                created.map(|_| ())
            }
            Err(e) => Err(e),
        };
        super::report_write(written, TOKEN_TRACKING_CONFIG_MAP);
    }
}

/// Whether `text` is a date as Go's `time.Parse("2006-01-02", text)` reads one.
fn is_date(text: &str) -> bool {
    let bytes = text.as_bytes();
    bytes.len() == 10
        && bytes[4] == b'-'
        && bytes[7] == b'-'
        && text.parse::<jiff::civil::Date>().is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_header_lists_are_combined_as_kubes_trust_controller_combines_them() {
        let own = json!({
            "requestheader-allowed-names": "[\"front-proxy-client\"]",
            "requestheader-username-headers": "[\"X-Remote-User\"]",
        });
        let existing = json!({
            "requestheader-allowed-names": "[\"aggregator\",\"front-proxy-client\"]",
            "requestheader-username-headers": "[\"X-Other-User\"]",
        });
        let combined = combined_request_header(Some(&existing), &own, 0).expect("combined");
        assert_eq!(
            combined,
            json!({
                "requestheader-allowed-names": "[\"aggregator\",\"front-proxy-client\"]",
                "requestheader-username-headers": "[\"X-Other-User\",\"X-Remote-User\"]",
            })
        );
        assert_eq!(
            combined_request_header(None, &own, 0).expect("own"),
            own,
            "nothing there: the front proxy's alone"
        );
    }

    #[test]
    fn the_server_id_is_kube_apiservers_for_the_host() {
        // Computed apart (Python's hashlib and base32) as kube's generic server config
        // computes it: SHA-256 over the two length-prefixed fields, 16 bytes of it in
        // lower-case base32 without padding.
        assert_eq!(
            server_id("kube-master"),
            "apiserver-gn2rtupxup3wa7rcxq7td2q43u"
        );
        assert_eq!(
            server_id("kind-control-plane"),
            "apiserver-c7uylvfxlbqccnk6myfkwetzze"
        );
    }

    #[test]
    fn leases_expire_after_their_duration_or_without_renew_time() {
        let lease = |renew: Option<&str>, duration: Option<i64>| json!({"spec": {"renewTime": renew, "leaseDurationSeconds": duration}});
        let renewed = "2026-11-28T10:00:00.000000Z";
        let at = renewed.parse::<jiff::Timestamp>().unwrap().as_second();
        assert!(!expired(&lease(Some(renewed), Some(3600)), at + 3600));
        assert!(expired(&lease(Some(renewed), Some(3600)), at + 3601));
        assert!(expired(&lease(None, Some(3600)), at));
        assert!(expired(&lease(Some(renewed), None), at));
    }

    #[test]
    fn dates_are_read_as_go_reads_2006_01_02() {
        assert!(is_date("2026-11-28"));
        assert!(!is_date("2026-11-31"));
        assert!(!is_date("2026-1-28"));
        assert!(!is_date("yesterday"));
        assert!(!is_date(""));
    }
}

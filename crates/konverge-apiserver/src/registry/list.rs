//! List: resourceVersion semantics, selectors, and paging with continue tokens.

use std::sync::Arc;

use bytes::Bytes;
use konverge_apimachinery::selector::{FieldSelector, LabelSelector};
use konverge_store::{KeyRange, RangeRequest, Revision};
use serde_json::{Value, json};

use super::cache::{self, CachedObject};
use super::{Registry, conversion, decode, parse_rv, target};
use crate::error::{ApiError, Result};
use crate::resources::crd::ConversionWebhook;
use crate::resources::meta;
use crate::resources::{FieldValue, ResourceType};

/// `resourceVersionMatch`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResourceVersionMatch {
    /// The list must be at least as new as `resourceVersion`.
    NotOlderThan,
    /// The list must be exactly at `resourceVersion`.
    Exact,
}

/// The options of a list (and of a watch's selectors).
#[derive(Debug, Clone, Default)]
pub struct ListOptions {
    /// `labelSelector`.
    pub label_selector: Option<LabelSelector>,
    /// `fieldSelector`.
    pub field_selector: Option<FieldSelector>,
    /// `limit`.
    pub limit: Option<u64>,
    /// `continue`.
    pub continue_token: Option<String>,
    /// `resourceVersion`.
    pub resource_version: Option<String>,
    /// `resourceVersionMatch`.
    pub resource_version_match: Option<ResourceVersionMatch>,
}

/// What a list answers.
#[derive(Debug, Clone)]
pub struct ListResult {
    /// The objects, in key order (namespace, then name); shared with the watch cache.
    pub items: Vec<Arc<Value>>,
    /// The revision the list was read at.
    pub resource_version: Revision,
    /// Where the next page starts, if there is one.
    pub continue_token: Option<String>,
    /// How many more objects the next pages hold (only without selectors).
    pub remaining: Option<u64>,
}

/// One object of a list page: the watch cache's (its JSON shared with every reader), or
/// decoded (read from the store, converted).
#[derive(Debug, Clone)]
pub(crate) enum Item {
    /// Straight from the watch cache, in its stored form.
    Cached(Arc<CachedObject>),
    /// Decoded.
    Decoded(Arc<Value>),
}

impl Item {
    /// The object, decoded.
    pub(crate) fn value(&self) -> Result<Value> {
        match self {
            Item::Cached(cached) => cached.decode(),
            Item::Decoded(value) => Ok(Value::clone(value)),
        }
    }

    /// The object as shared decoded form.
    fn into_shared(self) -> Result<Arc<Value>> {
        match self {
            Item::Cached(cached) => cached.decode().map(Arc::new),
            Item::Decoded(value) => Ok(value),
        }
    }

    /// The object's JSON, if it is already written (cached objects).
    #[cfg(test)]
    pub(crate) fn json(&self) -> Option<&[u8]> {
        match self {
            Item::Cached(cached) => Some(cached.json()),
            Item::Decoded(_) => None,
        }
    }
}

/// A list as the HTTP layer writes it: a [`ListResult`] whose items may still be the
/// watch cache's bytes.
#[derive(Debug, Clone)]
pub(crate) struct Page {
    /// The objects, in key order.
    pub(crate) items: Vec<Item>,
    /// The revision the list was read at.
    pub(crate) resource_version: Revision,
    /// Where the next page starts, if there is one.
    pub(crate) continue_token: Option<String>,
    /// How many more objects the next pages hold (only without selectors).
    pub(crate) remaining: Option<u64>,
}

impl Page {
    /// The page with every item decoded.
    fn decoded(self) -> Result<ListResult> {
        Ok(ListResult {
            items: self
                .items
                .into_iter()
                .map(Item::into_shared)
                .collect::<Result<_>>()?,
            resource_version: self.resource_version,
            continue_token: self.continue_token,
            remaining: self.remaining,
        })
    }
}

impl From<ListResult> for Page {
    fn from(listed: ListResult) -> Page {
        Page {
            items: listed.items.into_iter().map(Item::Decoded).collect(),
            resource_version: listed.resource_version,
            continue_token: listed.continue_token,
            remaining: listed.remaining,
        }
    }
}

/// A continue token: base64 of `{"v":"meta.k8s.io/v1","rv":N,"start":"key"}` as
/// kube-apiserver writes it, `start` relative to the list's storage prefix.
/// What an expired continue token is answered with (kube-apiserver's words), with a token
/// that goes on at the latest state.
const INCONSISTENT_CONTINUE: &str = "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter, or use the continue token in this response to retrieve the remainder of the results. Continuing with the provided token results in an inconsistent list - objects that were created, modified, or deleted between the time the first chunk was returned and now may show up in the list.";

/// The revision of a continue token that goes on at the latest state.
const LATEST: Revision = -1;

fn encode_continue(rv: Revision, start: &str) -> String {
    let token = json!({"v": "meta.k8s.io/v1", "rv": rv, "start": start});
    base64_encode(token.to_string().as_bytes())
}

fn decode_continue(token: &str) -> Result<(Revision, String)> {
    let bad = || ApiError::bad_request(format!("continue key is not valid: {token:?}"));
    let raw = base64_decode(token).ok_or_else(bad)?;
    let value: Value = serde_json::from_slice(&raw).map_err(|_| bad())?;
    if value["v"] != "meta.k8s.io/v1" {
        return Err(bad());
    }
    // -1: the token an expired continue answered with, which goes on at the latest state.
    let rv = value["rv"]
        .as_i64()
        .filter(|rv| *rv > 0 || *rv == LATEST)
        .ok_or_else(bad)?;
    let start = value["start"].as_str().ok_or_else(bad)?;
    if start.contains("..") || start.starts_with('/') {
        return Err(bad());
    }
    Ok((rv, start.to_string()))
}

fn base64_encode(data: &[u8]) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(data)
}

fn base64_decode(text: &str) -> Option<Vec<u8>> {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.decode(text).ok()
}

/// Whether an object passes a list's selectors.
pub(crate) fn selected(rt: &ResourceType, opts: &ListOptions, obj: &Value) -> bool {
    if let Some(labels) = &opts.label_selector
        && !labels.matches(&meta::labels(obj))
    {
        return false;
    }
    if let Some(fields) = &opts.field_selector {
        let lookup = |field: &str| field_value(rt, obj, field);
        if !fields.matches(&lookup) {
            return false;
        }
    }
    true
}

/// Whether a cached object passes a list's selectors: on the name, namespace, labels and
/// fields the cache keeps, decoding the object only for fields it does not keep.
pub(crate) fn selected_cached(rt: &ResourceType, opts: &ListOptions, obj: &CachedObject) -> bool {
    if let Some(labels) = &opts.label_selector
        && !labels.matches(obj.labels())
    {
        return false;
    }
    if let Some(fields) = &opts.field_selector {
        let decoded = std::cell::OnceCell::new();
        let lookup = |field: &str| match field {
            "metadata.name" => Some(obj.name().to_string()),
            "metadata.namespace" => Some(obj.namespace().to_string()),
            f => {
                let selectable = rt.selectable_fields.iter().find(|s| s.label == f)?;
                if let FieldValue::Fn(value) = selectable.value
                    && let Some(kept) = obj.field(f, value)
                {
                    return Some(kept.to_string());
                }
                let decoded = decoded.get_or_init(|| obj.decode().ok()).as_ref()?;
                Some(selectable.value_of(decoded))
            }
        };
        if !fields.matches(&lookup) {
            return false;
        }
    }
    true
}

/// The value of a selectable field of `obj` (stored objects: resources served converted
/// select on their stored form, as kube-apiserver selects on its internal one).
fn field_value(rt: &ResourceType, obj: &Value, field: &str) -> Option<String> {
    match field {
        "metadata.name" => Some(meta::meta_str(obj, "name").unwrap_or("").to_string()),
        "metadata.namespace" => Some(meta::meta_str(obj, "namespace").unwrap_or("").to_string()),
        f => rt
            .selectable_fields
            .iter()
            .find(|s| s.label == f)
            .map(|s| s.value_of(obj)),
    }
}

/// Whether a list's selectors look at more than an object's name and namespace (which no
/// conversion changes): labels, or other fields.
pub(crate) fn selects_on_content(opts: &ListOptions) -> bool {
    opts.label_selector.is_some()
        || opts.field_selector.as_ref().is_some_and(|fields| {
            fields
                .fields()
                .any(|f| !matches!(f, "metadata.name" | "metadata.namespace"))
        })
}

/// Where an object's key goes on after the prefix of a list of namespace `ns`
/// (`namespace/name` across namespaces, `name` otherwise).
fn relative_key(rt: &ResourceType, ns: Option<&str>, obj: &Value) -> String {
    let name = meta::meta_str(obj, "name").unwrap_or("");
    match (rt.namespaced, ns) {
        (true, None) => format!("{}/{name}", meta::meta_str(obj, "namespace").unwrap_or("")),
        _ => name.to_string(),
    }
}

/// Rejects field selectors on labels the resource does not accept, with kube-apiserver's
/// words for it (they differ between resources with a field label conversion function and
/// those without).
pub(crate) fn check_field_selector(rt: &ResourceType, selector: &FieldSelector) -> Result<()> {
    use crate::resources::FieldLabels;
    let mut fields: Vec<&str> = selector.fields().collect();
    // kube-apiserver sorts the terms and reports the first refused one.
    fields.sort_unstable();
    for field in fields {
        let known = match rt.field_labels {
            FieldLabels::MetadataOnly => {
                matches!(field, "metadata.name" | "metadata.namespace")
                    || rt.selectable_fields.iter().any(|s| s.label == field)
            }
            FieldLabels::Converted | FieldLabels::Job => {
                field == "metadata.name"
                    || (field == "metadata.namespace" && rt.namespaced)
                    || rt.selectable_fields.iter().any(|s| s.label == field)
            }
        };
        if known {
            continue;
        }
        return Err(ApiError::bad_request(match rt.field_labels {
            FieldLabels::MetadataOnly => format!(
                "{field:?} is not a known field selector: only \"metadata.name\", \"metadata.namespace\""
            ),
            FieldLabels::Converted => format!("field label not supported: {field}"),
            FieldLabels::Job => format!("field label {field:?} not supported for batchv1.Job"),
        }));
    }
    Ok(())
}

/// How many raw objects one store read fetches while filtering pages.
const SCAN_CHUNK: u64 = 500;

/// Which state a list reads, from `resourceVersion`, `resourceVersionMatch` and `continue`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum ReadAt {
    /// `resourceVersion` unset: the latest state (a consistent read).
    Latest,
    /// `resourceVersion="0"`: any state (the cache's, as it is).
    Any,
    /// `resourceVersion=N`: a state at least as new as N.
    NotOlderThan(Revision),
    /// `resourceVersion=N&resourceVersionMatch=Exact`: the state at N.
    Exact(Revision),
    /// A continue token: the list's revision and where the page starts (relative to the
    /// list's prefix).
    Continue(Revision, String),
}

fn read_at(opts: &ListOptions) -> Result<ReadAt> {
    let rv = opts.resource_version.as_deref().filter(|rv| !rv.is_empty());
    if let Some(token) = &opts.continue_token {
        if rv.is_some() {
            return Err(ApiError::bad_request(
                "specifying resource version is not allowed when using continue",
            ));
        }
        let (rv, start) = decode_continue(token)?;
        return Ok(ReadAt::Continue(rv, start));
    }
    match (rv, opts.resource_version_match) {
        (Some(rv), Some(ResourceVersionMatch::Exact)) => {
            let rv = parse_rv(rv)?;
            if rv == 0 {
                return Err(ApiError::bad_request(
                    "resourceVersionMatch \"Exact\" is forbidden for resourceVersion \"0\"",
                ));
            }
            Ok(ReadAt::Exact(rv))
        }
        (Some(rv), _) => Ok(match parse_rv(rv)? {
            0 => ReadAt::Any,
            rv => ReadAt::NotOlderThan(rv),
        }),
        (None, Some(_)) => Err(ApiError::bad_request(
            "resourceVersionMatch is forbidden unless resourceVersion is provided",
        )),
        (None, None) => Ok(ReadAt::Latest),
    }
}

impl Registry {
    /// Lists objects of a resource in one namespace or all of them.
    ///
    /// Served from the resource's watch cache unless the list needs history: a consistent
    /// list (`resourceVersion` unset) waits until the cache has applied the store's current
    /// revision, `"0"` takes the cache as it is, `N` waits (boundedly) until the cache has
    /// applied N. `resourceVersionMatch=Exact` and continue tokens read the store at their
    /// revision; a first page from the cache hands out a token for the store at the cache's
    /// revision, so later pages are consistent with it.
    pub async fn list(
        &self,
        rt: &ResourceType,
        ns: Option<&str>,
        opts: &ListOptions,
    ) -> Result<ListResult> {
        if let Some(fields) = &opts.field_selector {
            check_field_selector(rt, fields)?;
        }
        if let Some(hook) = conversion::webhook(rt) {
            return self.list_converted(rt, hook, ns, opts).await;
        }
        let mut listed = self.list_stored(rt, ns, opts).await?.decoded()?;
        // Selection and paging work on the stored form (shared with every version's readers
        // through the cache); what is answered is the served form.
        if rt.changes_on_read() {
            for item in &mut listed.items {
                rt.to_served(Arc::make_mut(item));
            }
        }
        Ok(listed)
    }

    /// [`Registry::list`] for the HTTP layer: the watch cache's objects stay as the JSON it
    /// keeps, unless the resource serves them otherwise than stored (converted, defaulted).
    pub(crate) async fn list_page(
        &self,
        rt: &ResourceType,
        ns: Option<&str>,
        opts: &ListOptions,
    ) -> Result<Page> {
        if conversion::webhook(rt).is_some() || rt.changes_on_read() {
            return self.list(rt, ns, opts).await.map(Page::from);
        }
        if let Some(fields) = &opts.field_selector {
            check_field_selector(rt, fields)?;
        }
        self.list_stored(rt, ns, opts).await
    }

    /// A list of a resource whose definition converts it with a webhook: each page is
    /// converted in one review. Selectors that look at more than names (labels, fields of the
    /// version's schema) select on the converted objects, as kube-apiserver selects on what
    /// it serves: the stored objects are read in chunks, converted, then selected until the
    /// page is full.
    async fn list_converted(
        &self,
        rt: &ResourceType,
        hook: &ConversionWebhook,
        ns: Option<&str>,
        opts: &ListOptions,
    ) -> Result<ListResult> {
        if !selects_on_content(opts) {
            let mut listed = self.list_stored(rt, ns, opts).await?.decoded()?;
            self.served_many(rt, hook, &mut listed.items).await?;
            return Ok(listed);
        }
        let limit = opts.limit.filter(|l| *l > 0);
        let mut chunk = ListOptions {
            label_selector: None,
            field_selector: None,
            limit: limit.map(|l| l.max(SCAN_CHUNK)),
            ..opts.clone()
        };
        let mut items = Vec::new();
        let mut revision = None;
        loop {
            let mut read = self.list_stored(rt, ns, &chunk).await?.decoded()?;
            let revision = *revision.get_or_insert(read.resource_version);
            self.served_many(rt, hook, &mut read.items).await?;
            let fetched = read.items.len();
            for (i, obj) in read.items.into_iter().enumerate() {
                if !selected(rt, opts, &obj) {
                    continue;
                }
                let key = relative_key(rt, ns, &obj);
                items.push(obj);
                if limit.is_some_and(|l| items.len() as u64 >= l) {
                    // A full page: the next one starts after this object, if anything is
                    // left to look at.
                    let more = i + 1 < fetched || read.continue_token.is_some();
                    return Ok(ListResult {
                        items,
                        resource_version: revision,
                        continue_token: more
                            .then(|| encode_continue(revision, &format!("{key}\u{0}"))),
                        remaining: None,
                    });
                }
            }
            match read.continue_token {
                Some(token) => {
                    chunk = ListOptions {
                        continue_token: Some(token),
                        resource_version: None,
                        resource_version_match: None,
                        ..chunk
                    };
                }
                None => {
                    return Ok(ListResult {
                        items,
                        resource_version: revision,
                        continue_token: None,
                        remaining: None,
                    });
                }
            }
        }
    }

    /// A list of stored objects, selected and paged on their stored form.
    async fn list_stored(
        &self,
        rt: &ResourceType,
        ns: Option<&str>,
        opts: &ListOptions,
    ) -> Result<Page> {
        let at = read_at(opts)?;
        let cached = if self.caches.config().enabled
            && matches!(at, ReadAt::Latest | ReadAt::Any | ReadAt::NotOlderThan(_))
        {
            self.list_cached(rt, ns, opts, &at).await?
        } else {
            None
        };
        match cached {
            Some(listed) => Ok(listed),
            None => self.list_store(rt, ns, opts, at).await.map(Page::from),
        }
    }

    /// A list from the watch cache, or `None` when the cache cannot answer in time (then the
    /// store does).
    async fn list_cached(
        &self,
        rt: &ResourceType,
        ns: Option<&str>,
        opts: &ListOptions,
        at: &ReadAt,
    ) -> Result<Option<Page>> {
        let cache = self.caches.get(rt);
        let timeout = self.caches.config().wait_timeout;
        match *at {
            ReadAt::Latest => {
                let current = self.current_revision(rt).await?;
                if let Err(err) = cache.wait_until(Some(current), timeout).await {
                    tracing::debug!(?err, resource = %rt.plural, "watch cache not fresh; listing from the store");
                    return Ok(None);
                }
            }
            ReadAt::Any => {
                if cache.wait_until(None, timeout).await.is_err() {
                    return Ok(None);
                }
            }
            ReadAt::NotOlderThan(rv) => {
                let applied = cache.applied();
                if !(applied.ready && applied.revision >= rv) {
                    let current = self.current_revision(rt).await?;
                    if rv > current {
                        return Err(too_large(rt, rv, current));
                    }
                    match cache.wait_until(Some(rv), timeout).await {
                        Ok(_) => {}
                        Err(cache::WaitError::Timeout(at)) => return Err(too_large(rt, rv, at)),
                        Err(cache::WaitError::Closed) => return Ok(None),
                    }
                }
            }
            ReadAt::Exact(_) | ReadAt::Continue(..) => return Ok(None),
        }
        let prefix = rt.namespace_prefix(ns);
        let limit = opts.limit.filter(|l| *l > 0);
        let filtering = opts.label_selector.is_some() || opts.field_selector.is_some();
        let max = match limit {
            Some(l) if !filtering => Some(usize::try_from(l).unwrap_or(usize::MAX)),
            _ => None,
        };
        let snapshot = cache.snapshot(prefix.as_bytes(), max);
        let mut items = Vec::new();
        let mut continue_from = None;
        let mut remaining = None;
        for (i, (key, obj)) in snapshot.items.iter().enumerate() {
            if !filtering || selected_cached(rt, opts, obj) {
                items.push(Item::Cached(obj.clone()));
            }
            if limit.is_some_and(|l| items.len() as u64 >= l) {
                // A full page: the next one starts after the last key looked at, if the range
                // holds anything after it.
                let left = snapshot.total - (i + 1);
                if left > 0 {
                    let relative = String::from_utf8_lossy(&key[prefix.len()..]).into_owned();
                    continue_from = Some(format!("{relative}\u{0}"));
                    if !filtering {
                        remaining = Some(left as u64);
                    }
                }
                break;
            }
        }
        Ok(Some(Page {
            items,
            resource_version: snapshot.revision,
            continue_token: continue_from.map(|start| encode_continue(snapshot.revision, &start)),
            remaining,
        }))
    }

    pub(super) async fn current_revision(&self, rt: &ResourceType) -> Result<Revision> {
        self.store
            .current_revision()
            .await
            .map_err(|e| ApiError::from_store(e, target(rt, "")))
    }

    /// A list read from the store.
    pub(super) async fn list_store(
        &self,
        rt: &ResourceType,
        ns: Option<&str>,
        opts: &ListOptions,
        at: ReadAt,
    ) -> Result<ListResult> {
        let prefix = rt.namespace_prefix(ns);
        let end = konverge_store::prefix_end(prefix.as_bytes());
        let current = self.current_revision(rt).await?;
        let continued = matches!(at, ReadAt::Continue(..));
        let (revision, start) = match at {
            ReadAt::Continue(LATEST, start) => (current, format!("{prefix}{start}")),
            ReadAt::Continue(rv, start) => (rv, format!("{prefix}{start}")),
            ReadAt::Exact(rv) => (rv, prefix.clone()),
            ReadAt::NotOlderThan(rv) if rv > current => return Err(too_large(rt, rv, current)),
            ReadAt::Latest | ReadAt::Any | ReadAt::NotOlderThan(_) => (current, prefix.clone()),
        };
        let limit = opts.limit.filter(|l| *l > 0);
        let filtering = opts.label_selector.is_some() || opts.field_selector.is_some();

        let mut items = Vec::new();
        let mut cursor = Bytes::from(start);
        let mut continue_from: Option<String> = None;
        let mut remaining = None;
        'pages: loop {
            let range = match &end {
                Some(end) => KeyRange::range(cursor.clone(), end.clone()),
                None => KeyRange::From(cursor.clone()),
            };
            let mut req = RangeRequest::new(range).at_revision(revision);
            req.limit = match limit {
                Some(l) if filtering => Some(SCAN_CHUNK.max(l)),
                other => other,
            };
            let resp = self
                .timed("list", rt, self.store.range(req))
                .await
                .map_err(|e| match e {
                konverge_store::Error::Compacted { .. } if continued => {
                    // Where the list stood, offered again at the latest state.
                    let start = cursor.get(prefix.len()..).unwrap_or_default();
                    let start = String::from_utf8_lossy(start).into_owned();
                    let mut expired = ApiError::expired(INCONSISTENT_CONTINUE);
                    expired.details = Some(Box::new(crate::error::Details {
                        list_continue: Some(encode_continue(LATEST, &start)),
                        ..Default::default()
                    }));
                    expired
                }
                konverge_store::Error::Compacted { compact_revision } => ApiError::expired(format!(
                    "The resourceVersion for the provided list is too old (compacted at {compact_revision})."
                )),
                other => ApiError::from_store(other, target(rt, "")),
            })?;
            let fetched = resp.kvs.len();
            for (i, kv) in resp.kvs.iter().enumerate() {
                let obj = decode(kv)?;
                if selected(rt, opts, &obj) {
                    items.push(Arc::new(obj));
                }
                if limit.is_some_and(|l| items.len() as u64 >= l) {
                    // A full page: the next one starts after the last key looked at, if the
                    // range holds anything after it.
                    if i + 1 < fetched || resp.more {
                        let relative =
                            String::from_utf8_lossy(&kv.key[prefix.len()..]).into_owned();
                        continue_from = Some(format!("{relative}\u{0}"));
                        if !filtering {
                            remaining = Some(resp.count.saturating_sub(i as u64 + 1));
                        }
                    }
                    break 'pages;
                }
            }
            match resp.kvs.last() {
                Some(last) if resp.more => {
                    let mut next = last.key.to_vec();
                    next.push(0);
                    cursor = Bytes::from(next);
                }
                _ => break,
            }
        }
        let continue_token = continue_from.map(|start| encode_continue(revision, &start));
        Ok(ListResult {
            items,
            resource_version: revision,
            continue_token,
            remaining: remaining.filter(|r| *r > 0),
        })
    }
}

/// 504 Timeout "Too large resource version", as kube-apiserver answers a resourceVersion
/// that neither the store nor the cache has reached.
pub(super) fn too_large(rt: &ResourceType, requested: Revision, current: Revision) -> ApiError {
    ApiError::from_store(
        konverge_store::Error::FutureRevision { requested, current },
        target(rt, ""),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn continue_tokens_round_trip_and_reject_tampering() {
        let token = encode_continue(42, "default/b\u{0}");
        assert_eq!(
            decode_continue(&token).expect("decodes"),
            (42, "default/b\u{0}".to_string())
        );
        assert!(decode_continue("not base64 !").is_err());
        assert!(decode_continue(&base64_encode(br#"{"v":"x","rv":1,"start":""}"#)).is_err());
        assert!(
            decode_continue(&base64_encode(
                br#"{"v":"meta.k8s.io/v1","rv":1,"start":"../x"}"#
            ))
            .is_err()
        );
    }

    #[test]
    fn base64_matches_the_standard_alphabet() {
        assert_eq!(base64_encode(b"hello"), "aGVsbG8=");
        assert_eq!(base64_encode(b"hi"), "aGk=");
        assert_eq!(base64_decode("aGVsbG8=").expect("decodes"), b"hello");
    }
}

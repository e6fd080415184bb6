//! Predicates: which changes to an object are worth a reconcile.
//!
//! A predicate sees the cached object before a change (`None` on create) and after. Deletions
//! are never filtered: a controller must always learn that its object is gone.
//!
//! The primary resource of a controller is filtered by [`generation_changed`] unless told
//! otherwise. That is what breaks the classic status loop: a reconciler's own status write
//! does not change `metadata.generation`, so it does not trigger the next reconcile.
//!
//! Predicates combine with [`PredicateExt::and`], [`PredicateExt::or`] and [`not`].

use std::sync::Arc;

use kube::Resource;

/// Decides whether a change from `old` to `new` should trigger a reconcile.
pub trait Predicate<K>: Send + Sync {
    /// `old` is `None` when the object was just created (or first seen).
    fn allows(&self, old: Option<&K>, new: &K) -> bool;
}

impl<K, F> Predicate<K> for F
where
    F: Fn(Option<&K>, &K) -> bool + Send + Sync,
{
    fn allows(&self, old: Option<&K>, new: &K) -> bool {
        self(old, new)
    }
}

impl<K> Predicate<K> for Arc<dyn Predicate<K>> {
    fn allows(&self, old: Option<&K>, new: &K) -> bool {
        (**self).allows(old, new)
    }
}

/// Every change passes.
pub fn always<K>() -> impl Predicate<K> {
    |_: Option<&K>, _: &K| true
}

/// Passes creates, `metadata.generation` changes and the start of deletion. For a type without
/// a generation (ConfigMaps, Secrets), every change passes — there is nothing else to tell
/// spec from status by.
pub fn generation_changed<K: Resource>() -> impl Predicate<K> {
    |old: Option<&K>, new: &K| {
        let Some(old) = old else {
            return true;
        };
        let (old, new) = (old.meta(), new.meta());
        match (old.generation, new.generation) {
            (Some(a), Some(b)) => {
                a != b || (old.deletion_timestamp.is_none() && new.deletion_timestamp.is_some())
            }
            _ => old.resource_version != new.resource_version || old.resource_version.is_none(),
        }
    }
}

/// Passes creates and changes to `metadata.labels`.
pub fn labels_changed<K: Resource>() -> impl Predicate<K> {
    |old: Option<&K>, new: &K| old.is_none_or(|old| old.meta().labels != new.meta().labels)
}

/// Passes creates and changes to `metadata.annotations`.
pub fn annotations_changed<K: Resource>() -> impl Predicate<K> {
    |old: Option<&K>, new: &K| {
        old.is_none_or(|old| old.meta().annotations != new.meta().annotations)
    }
}

/// Passes creates and any change at all (the resourceVersion moved).
pub fn resource_version_changed<K: Resource>() -> impl Predicate<K> {
    |old: Option<&K>, new: &K| {
        old.is_none_or(|old| {
            old.meta().resource_version != new.meta().resource_version
                || new.meta().resource_version.is_none()
        })
    }
}

/// Passes what `p` rejects (creates included: `not(p)` of a create is `!p(None, new)`).
pub fn not<K, P: Predicate<K>>(p: P) -> impl Predicate<K> {
    move |old: Option<&K>, new: &K| !p.allows(old, new)
}

/// Combinators on any predicate.
pub trait PredicateExt<K>: Predicate<K> + Sized {
    /// Passes only what both pass.
    fn and<P: Predicate<K>>(self, other: P) -> impl Predicate<K> {
        move |old: Option<&K>, new: &K| self.allows(old, new) && other.allows(old, new)
    }

    /// Passes what either passes.
    fn or<P: Predicate<K>>(self, other: P) -> impl Predicate<K> {
        move |old: Option<&K>, new: &K| self.allows(old, new) || other.allows(old, new)
    }
}

impl<K, P: Predicate<K>> PredicateExt<K> for P {}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::apps::v1::Deployment;
    use k8s_openapi::api::core::v1::ConfigMap;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    fn deploy(generation: i64, rv: &str) -> Deployment {
        let mut d = Deployment::default();
        d.metadata.generation = Some(generation);
        d.metadata.resource_version = Some(rv.into());
        d
    }

    #[test]
    fn generation_filters_status_only_changes() {
        let p = generation_changed::<Deployment>();
        assert!(p.allows(None, &deploy(1, "1")), "create");
        assert!(
            !p.allows(Some(&deploy(1, "1")), &deploy(1, "2")),
            "status write"
        );
        assert!(
            p.allows(Some(&deploy(1, "2")), &deploy(2, "3")),
            "spec change"
        );
        let mut deleting = deploy(1, "4");
        deleting.metadata.deletion_timestamp = Some(Time(jiff::Timestamp::now()));
        assert!(
            p.allows(Some(&deploy(1, "3")), &deleting),
            "deletion starts"
        );
    }

    #[test]
    fn generation_passes_every_change_of_a_type_without_one() {
        let p = generation_changed::<ConfigMap>();
        let mut a = ConfigMap::default();
        a.metadata.resource_version = Some("1".into());
        let mut b = a.clone();
        assert!(!p.allows(Some(&a), &b));
        b.metadata.resource_version = Some("2".into());
        assert!(p.allows(Some(&a), &b));
    }

    #[test]
    fn combinators() {
        let mut a = Deployment::default();
        a.metadata.labels = Some([("x".to_string(), "1".to_string())].into());
        let mut b = a.clone();
        b.metadata.annotations = Some([("y".to_string(), "2".to_string())].into());
        let labels = labels_changed::<Deployment>();
        let annotations = annotations_changed::<Deployment>();
        assert!(!labels.allows(Some(&a), &b));
        assert!(annotations.allows(Some(&a), &b));
        let either = labels_changed::<Deployment>().or(annotations_changed());
        assert!(either.allows(Some(&a), &b));
        let both = labels_changed::<Deployment>().and(annotations_changed());
        assert!(!both.allows(Some(&a), &b));
        assert!(not(labels_changed::<Deployment>()).allows(Some(&a), &b));
        let custom = |_: Option<&Deployment>, new: &Deployment| new.metadata.annotations.is_some();
        assert!(custom.and(always()).allows(None, &b));
    }
}

//! The deprecated rollback API (kcm's `deployment/rollback.go`): a Deployment annotated
//! `deprecated.deployment.rollback.to: <revision>` (`0`: the previous one) gets that
//! revision's template back, and the annotation is removed. (`kubectl rollout undo` does not
//! use it: it patches the template itself, and the rollout then finds the old ReplicaSet as
//! the new one.)

use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use kube::ResourceExt;
use kube::api::PostParams;

use super::Rollout;
use super::util::{self, reason};
use crate::error::Result;

/// The revision the rollback annotation asks for; `None` without one or when it is not a
/// number (kcm ignores those).
pub(super) fn rollback_to(d: &Deployment) -> Option<i64> {
    d.annotations().get(util::ROLLBACK_TO)?.parse().ok()
}

impl Rollout<'_> {
    /// Rolls back to the revision asked for (kcm's `rollback`).
    pub(super) async fn rollback(&mut self) -> Result<()> {
        let (new, old) = self.new_and_old(true).await?;
        let all: Vec<ReplicaSet> = old.into_iter().chain(new).collect();
        let mut revision = rollback_to(&self.d).unwrap_or(0);
        if revision == 0 {
            revision = util::last_revision(&all);
            if revision == 0 {
                self.ctx.events.warning(
                    &self.d,
                    reason::ROLLBACK_REVISION_NOT_FOUND,
                    "Unable to find last revision.".into(),
                );
                return self.clear_rollback_to().await;
            }
        }
        let Some(target) = all.iter().find(|rs| util::revision(rs) == revision) else {
            self.ctx.events.warning(
                &self.d,
                reason::ROLLBACK_REVISION_NOT_FOUND,
                "Unable to find the revision to rollback to.".into(),
            );
            return self.clear_rollback_to().await;
        };
        let template = util::template(target);
        if util::equal_ignore_hash(&util::deployment_template(&self.d), &template) {
            self.ctx.events.warning(
                &self.d,
                reason::ROLLBACK_TEMPLATE_UNCHANGED,
                format!(
                    "The rollback revision contains the same template as current deployment {:?}",
                    self.d.name_any()
                ),
            );
            return self.clear_rollback_to().await;
        }
        self.set_template_from(target);
        self.clear_rollback_to().await?;
        self.ctx.events.normal(
            &self.d,
            reason::ROLLBACK_DONE,
            format!(
                "Rolled back deployment {:?} to revision {revision}",
                self.d.name_any()
            ),
        );
        Ok(())
    }

    /// The ReplicaSet's template, without the hash label, and its annotations (but the
    /// Deployment's own) become the Deployment's (kcm's `SetFromReplicaSetTemplate` and
    /// `SetDeploymentAnnotationsTo`).
    fn set_template_from(&mut self, rs: &ReplicaSet) {
        let mut template = util::template(rs);
        if let Some(labels) = template.metadata.as_mut().and_then(|m| m.labels.as_mut()) {
            labels.remove(util::POD_TEMPLATE_HASH);
        }
        if let Some(spec) = self.d.spec.as_mut() {
            spec.template = template;
        }
        let mut annotations = self.d.metadata.annotations.take().unwrap_or_default();
        annotations.retain(|key, _| util::not_copied(key));
        for (key, value) in rs.annotations() {
            if !util::not_copied(key) {
                annotations.insert(key.clone(), value.clone());
            }
        }
        self.d.metadata.annotations = Some(annotations);
    }

    /// Removes the rollback annotation, writing the Deployment (kcm's
    /// `updateDeploymentAndClearRollbackTo`).
    async fn clear_rollback_to(&mut self) -> Result<()> {
        if let Some(annotations) = self.d.metadata.annotations.as_mut() {
            annotations.remove(util::ROLLBACK_TO);
        }
        let written = self
            .deployments()
            .replace(&self.d.name_any(), &PostParams::default(), &self.d)
            .await?;
        konverge_runtime::reconcile::wrote(&written);
        self.d = written;
        Ok(())
    }
}

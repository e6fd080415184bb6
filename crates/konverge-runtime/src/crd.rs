//! Installing an operator's own CustomResourceDefinition when it starts: applied with
//! server-side apply (so a newer operator updates the definition an older one installed),
//! then waited on until the server establishes it and serves its resources.

use std::time::Duration;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Client;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::wait::{await_condition, conditions};

/// Why a definition could not be installed.
#[derive(Debug, thiserror::Error)]
pub enum CrdError {
    /// The definition has no `metadata.name`.
    #[error("the CustomResourceDefinition has no metadata.name")]
    Unnamed,
    /// The server refused the definition.
    #[error("applying CustomResourceDefinition {name}: {source}")]
    Apply {
        /// The definition's name.
        name: String,
        /// The server's answer.
        #[source]
        source: kube::Error,
    },
    /// Waiting for the definition failed.
    #[error("waiting for CustomResourceDefinition {name} to be established: {source}")]
    Wait {
        /// The definition's name.
        name: String,
        /// What went wrong.
        #[source]
        source: kube::runtime::wait::Error,
    },
    /// The server did not establish the definition in time.
    #[error("CustomResourceDefinition {name} was not established within {timeout:?}")]
    Timeout {
        /// The definition's name.
        name: String,
        /// How long was waited.
        timeout: Duration,
    },
}

/// Applies `crd` as `field_manager` (forcing ownership of its fields) and waits, `timeout`
/// at most, until its `Established` condition is true.
pub async fn install(
    client: &Client,
    crd: &CustomResourceDefinition,
    field_manager: &str,
    timeout: Duration,
) -> Result<(), CrdError> {
    let name = crd.metadata.name.clone().ok_or(CrdError::Unnamed)?;
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    api.patch(
        &name,
        &PatchParams::apply(field_manager).force(),
        &Patch::Apply(crd),
    )
    .await
    .map_err(|source| CrdError::Apply {
        name: name.clone(),
        source,
    })?;
    let established = await_condition(api, &name, conditions::is_crd_established());
    match tokio::time::timeout(timeout, established).await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(source)) => Err(CrdError::Wait { name, source }),
        Err(_) => Err(CrdError::Timeout { name, timeout }),
    }
}

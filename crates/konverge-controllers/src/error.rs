//! What a controller of this crate fails with.

/// A controller's error. The runtime's error policy classifies it by its `source()` chain
/// (see `konverge_runtime::reconcile`): a `kube::Error` answer of 404 ends the reconcile, a
/// 409 Conflict requeues at once, anything else backs off.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A request to the API server failed.
    #[error("{0}")]
    Kube(#[source] kube::Error),
    /// An object holds what kcm refuses to act on (an invalid selector, a template it cannot
    /// turn into a pod); kcm logs these and does not retry until the object changes.
    #[error("{0}")]
    Invalid(#[source] konverge_runtime::TerminalError),
    /// What the controller read does not add up yet (a status behind its spec, a node not
    /// in the cache yet): kcm returns an error and retries with backoff, and so does this.
    #[error("{0}")]
    Unsettled(String),
    /// `--controllers` names a controller kcm does not have.
    #[error("{0:?} is not in the list of known controllers")]
    UnknownController(String),
    /// A controller's ServiceAccount credentials could not be had.
    #[error("credentials for the {account} ServiceAccount: {source}")]
    Credentials {
        /// The ServiceAccount in kube-system.
        account: String,
        /// Why not.
        #[source]
        source: kube::Error,
    },
    /// No client was given for a controller's ServiceAccount.
    #[error("no credentials for the {0} ServiceAccount")]
    NoCredentials(String),
    /// The manager running the controllers failed.
    #[error("the controller manager: {0}")]
    Manager(#[source] konverge_runtime::manager::Error),
}

impl From<kube::Error> for Error {
    fn from(error: kube::Error) -> Self {
        Error::Kube(error)
    }
}

impl Error {
    /// An object the controller will not act on until it changes (not retried).
    pub fn invalid(message: impl Into<String>) -> Error {
        Error::Invalid(konverge_runtime::TerminalError::new(message.into()))
    }

    /// Whether the server answered with `code`.
    pub fn is_status(&self, code: u16) -> bool {
        matches!(self, Error::Kube(kube::Error::Api(status)) if status.code == code)
    }
}

/// This crate's `Result`.
pub type Result<T, E = Error> = std::result::Result<T, E>;

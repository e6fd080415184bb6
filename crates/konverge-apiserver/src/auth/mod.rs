//! Who is asking, and whether they may.
//!
//! - [`authn`]: credentials to a [`user::UserInfo`] — the server's bearer token, ServiceAccount
//!   tokens, client certificates, anonymous requests — and impersonation.
//! - [`authz`]: the [`authz::Authorizer`] seam ([`authz::AlwaysAllow`], [`rbac::Rbac`]),
//!   `system:masters`, and kube-apiserver's 403 wording.
//! - [`rbac`]: Roles, ClusterRoles and bindings, matched as kube-apiserver matches them.
//! - [`tokens`]: the signed JWTs of the TokenRequest API.
//! - [`user`]: user information and the well-known user and group names.

pub mod authn;
pub mod authz;
pub mod rbac;
pub mod tokens;
pub mod user;

//! Who is asking, and whether they may.
//!
//! - [`authn`]: credentials to a [`user::UserInfo`] — the server's bearer token, ServiceAccount
//!   tokens, client certificates, anonymous requests — and impersonation.
//! - [`authz`]: the [`authz::Authorizer`] seam ([`authz::AlwaysAllow`], [`rbac::Rbac`]),
//!   `system:masters`, and kube-apiserver's 403 wording.
//! - [`rbac`]: Roles, ClusterRoles and bindings, matched as kube-apiserver matches them.
//! - [`tokens`]: the signed JWTs of the TokenRequest API.
//! - [`user`]: user information and the well-known user and group names.
//! - [`x509`]: what a client certificate's subject says (user, groups, uid), and issuing
//!   client certificates signed by a CA.

pub mod authn;
pub mod authz;
pub mod rbac;
pub mod tokens;
pub mod user;
pub mod x509;

//! Who is asking: ServiceAccount tokens ([`tokens`]) today; authentication and
//! authorization come next.

pub mod tokens;

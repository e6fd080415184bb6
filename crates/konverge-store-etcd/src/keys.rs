//! [`Keyspace`]: the store's key prefix, and how keys and [`KeyRange`]s map onto etcd's
//! `key` / `range_end` pairs.

use bytes::Bytes;
use konverge_store::{Error, KeyRange, KeyValue, Result, prefix_end};

/// etcd's "no upper bound" range end (and, as a key, the smallest key there is).
const NUL: &[u8] = b"\0";

/// The part of etcd's keyspace one [`EtcdStore`](crate::EtcdStore) sees: every key under a
/// prefix (possibly empty), with the prefix added on the way in and removed on the way out.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Keyspace {
    prefix: Bytes,
}

impl Keyspace {
    /// The keys under `prefix`.
    pub(crate) fn new(prefix: Bytes) -> Self {
        Keyspace { prefix }
    }

    /// The prefix (empty for the whole of etcd).
    pub(crate) fn prefix(&self) -> &Bytes {
        &self.prefix
    }

    /// The etcd key of a store key.
    pub(crate) fn key(&self, key: &[u8]) -> Vec<u8> {
        let mut full = Vec::with_capacity(self.prefix.len() + key.len());
        full.extend_from_slice(&self.prefix);
        full.extend_from_slice(key);
        full
    }

    /// The etcd range end that closes the keyspace: the end of the prefix, or `"\0"` (no
    /// bound) without one.
    fn end(&self) -> Vec<u8> {
        prefix_end(&self.prefix).map_or_else(|| NUL.to_vec(), |end| end.to_vec())
    }

    /// etcd's `(key, range_end)` for a range of store keys; an empty `range_end` means the
    /// single key. The range must have been validated.
    pub(crate) fn range(&self, range: &KeyRange) -> (Vec<u8>, Vec<u8>) {
        match range {
            KeyRange::Key(key) => (self.key(key), Vec::new()),
            KeyRange::Prefix(prefix) if prefix.is_empty() => {
                // Every store key: from the smallest one, `prefix + "\0"` (the prefix alone is
                // no store key), to the end of the prefix. Without a prefix that is all of
                // etcd, which etcd spells key "\0", range_end "\0".
                (self.key(NUL), self.end())
            }
            KeyRange::Prefix(prefix) => {
                let start = self.key(prefix);
                let end = prefix_end(&start).map_or_else(|| NUL.to_vec(), |end| end.to_vec());
                (start, end)
            }
            KeyRange::Range { start, end } => (self.key(start), self.key(end)),
            KeyRange::From(start) => (self.key(start), self.end()),
        }
    }

    /// The store key of an etcd key etcd returned for a request inside the keyspace.
    pub(crate) fn strip(&self, key: &[u8]) -> Result<Bytes> {
        match key.strip_prefix(&self.prefix[..]) {
            Some(rest) if !rest.is_empty() => Ok(Bytes::copy_from_slice(rest)),
            _ => Err(Error::Backend {
                message: format!(
                    "etcd returned key {:?} outside the store's prefix {:?}",
                    Bytes::copy_from_slice(key),
                    self.prefix
                ),
                source: None,
            }),
        }
    }

    /// Whether an etcd key is a store key inside `range`.
    pub(crate) fn contains(&self, range: &KeyRange, key: &[u8]) -> bool {
        match key.strip_prefix(&self.prefix[..]) {
            Some(rest) => !rest.is_empty() && range.contains(rest),
            None => false,
        }
    }

    /// An etcd key-value as the store's [`KeyValue`].
    pub(crate) fn kv(&self, kv: &etcd_client::KeyValue) -> Result<KeyValue> {
        Ok(KeyValue {
            key: self.strip(kv.key())?,
            value: Bytes::copy_from_slice(kv.value()),
            create_revision: kv.create_revision(),
            mod_revision: kv.mod_revision(),
            version: kv.version(),
        })
    }

    /// Every key-value of an etcd answer.
    pub(crate) fn kvs(&self, kvs: &[etcd_client::KeyValue]) -> Result<Vec<KeyValue>> {
        kvs.iter().map(|kv| self.kv(kv)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ks(prefix: &'static [u8]) -> Keyspace {
        Keyspace::new(Bytes::from_static(prefix))
    }

    #[test]
    fn without_a_prefix_ranges_are_etcds_own() {
        let k = ks(b"");
        assert_eq!(k.range(&KeyRange::key("a")), (b"a".to_vec(), vec![]));
        assert_eq!(
            k.range(&KeyRange::prefix("")),
            (b"\0".to_vec(), b"\0".to_vec())
        );
        assert_eq!(
            k.range(&KeyRange::prefix("a/")),
            (b"a/".to_vec(), b"a0".to_vec())
        );
        assert_eq!(
            k.range(&KeyRange::prefix(&b"\xff\xff"[..])),
            (b"\xff\xff".to_vec(), b"\0".to_vec())
        );
        assert_eq!(
            k.range(&KeyRange::range("a", "c")),
            (b"a".to_vec(), b"c".to_vec())
        );
        assert_eq!(
            k.range(&KeyRange::From("m".into())),
            (b"m".to_vec(), b"\0".to_vec())
        );
    }

    #[test]
    fn a_prefix_confines_every_range() {
        let k = ks(b"ns/");
        assert_eq!(k.range(&KeyRange::key("a")), (b"ns/a".to_vec(), vec![]));
        assert_eq!(
            k.range(&KeyRange::prefix("")),
            (b"ns/\0".to_vec(), b"ns0".to_vec())
        );
        assert_eq!(
            k.range(&KeyRange::prefix("a/")),
            (b"ns/a/".to_vec(), b"ns/a0".to_vec())
        );
        assert_eq!(
            k.range(&KeyRange::prefix(&b"\xff"[..])),
            (b"ns/\xff".to_vec(), b"ns0".to_vec())
        );
        assert_eq!(
            k.range(&KeyRange::range("a", "c")),
            (b"ns/a".to_vec(), b"ns/c".to_vec())
        );
        assert_eq!(
            k.range(&KeyRange::From("m".into())),
            (b"ns/m".to_vec(), b"ns0".to_vec())
        );
        let k = ks(b"\xff");
        assert_eq!(
            k.range(&KeyRange::From("m".into())),
            (b"\xffm".to_vec(), b"\0".to_vec())
        );
    }

    #[test]
    fn strip_removes_the_prefix_and_rejects_foreign_keys() {
        let k = ks(b"ns/");
        assert_eq!(k.strip(b"ns/a").ok(), Some(Bytes::from_static(b"a")));
        assert!(k.strip(b"other/a").is_err());
        assert!(k.strip(b"ns/").is_err());
        assert!(k.contains(&KeyRange::prefix("a"), b"ns/ab"));
        assert!(!k.contains(&KeyRange::prefix("a"), b"other/ab"));
        assert!(!k.contains(&KeyRange::prefix(""), b"ns/"));
    }
}

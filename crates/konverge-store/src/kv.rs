//! Keys, values, revisions and key ranges.

use std::ops::Bound;

use bytes::Bytes;

use crate::{Error, Result};

/// A store revision.
///
/// The store has one global revision that starts at 1 on an empty store (so that 0 can mean
/// "never existed" in compares) and grows by exactly one per committed transaction that changes
/// at least one key, however many keys it changes. Revisions are never reused, so a revision
/// names one immutable state of the whole store. Encoded as a signed 64-bit integer, like etcd's;
/// on disk and in resourceVersions it is written in decimal (text) or 8 bytes big-endian (keys).
pub type Revision = i64;

/// A key with its value and its per-key bookkeeping.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyValue {
    /// The key.
    pub key: Bytes,
    /// The value (empty for a key in a delete event, and when a read asked for keys only).
    pub value: Bytes,
    /// The revision of the transaction that created the key, since its last deletion.
    pub create_revision: Revision,
    /// The revision of the transaction that last changed the key.
    pub mod_revision: Revision,
    /// How many times the key has been written since it was created: 1 on create, +1 per
    /// put. A delete resets it: the next put creates the key again at version 1.
    pub version: i64,
}

/// Which keys a read, delete or watch covers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyRange {
    /// Exactly one key.
    Key(Bytes),
    /// Every key that starts with the bytes given; an empty prefix is the whole keyspace.
    Prefix(Bytes),
    /// Keys from `start` (inclusive) to `end` (exclusive); `end` must sort after `start`.
    Range {
        /// First key of the range.
        start: Bytes,
        /// First key after the range.
        end: Bytes,
    },
    /// Every key from `start` (inclusive) to the end of the keyspace.
    From(Bytes),
}

impl KeyRange {
    /// One key.
    pub fn key(key: impl Into<Bytes>) -> Self {
        KeyRange::Key(key.into())
    }

    /// All keys with a prefix.
    pub fn prefix(prefix: impl Into<Bytes>) -> Self {
        KeyRange::Prefix(prefix.into())
    }

    /// `[start, end)`.
    pub fn range(start: impl Into<Bytes>, end: impl Into<Bytes>) -> Self {
        KeyRange::Range {
            start: start.into(),
            end: end.into(),
        }
    }

    /// Checks that keys are non-empty and ranges are not inverted.
    pub fn validate(&self) -> Result<()> {
        match self {
            KeyRange::Key(k) | KeyRange::From(k) if k.is_empty() => Err(Error::EmptyKey),
            KeyRange::Range { start, .. } if start.is_empty() => Err(Error::EmptyKey),
            KeyRange::Range { start, end } if end <= start => Err(Error::InvalidRange {
                start: start.clone(),
                end: end.clone(),
            }),
            _ => Ok(()),
        }
    }

    /// The first key of the range (inclusive).
    pub fn start(&self) -> &[u8] {
        match self {
            KeyRange::Key(k) | KeyRange::Prefix(k) | KeyRange::From(k) => k,
            KeyRange::Range { start, .. } => start,
        }
    }

    /// The first key after the range, or `None` when the range runs to the end of the keyspace.
    pub fn end(&self) -> Option<Bytes> {
        match self {
            KeyRange::Key(k) => {
                let mut end = Vec::with_capacity(k.len() + 1);
                end.extend_from_slice(k);
                end.push(0);
                Some(end.into())
            }
            KeyRange::Prefix(p) => prefix_end(p),
            KeyRange::Range { end, .. } => Some(end.clone()),
            KeyRange::From(_) => None,
        }
    }

    /// The range as bounds for a `BTreeMap::range` over keys.
    pub fn bounds(&self) -> (Bound<Bytes>, Bound<Bytes>) {
        let start = Bound::Included(Bytes::copy_from_slice(self.start()));
        let end = match self.end() {
            Some(end) => Bound::Excluded(end),
            None => Bound::Unbounded,
        };
        (start, end)
    }

    /// Whether `key` falls inside the range.
    pub fn contains(&self, key: &[u8]) -> bool {
        match self {
            KeyRange::Key(k) => key == &k[..],
            KeyRange::Prefix(p) => key.starts_with(p),
            KeyRange::Range { start, end } => key >= &start[..] && key < &end[..],
            KeyRange::From(start) => key >= &start[..],
        }
    }
}

/// The smallest key greater than every key with `prefix`, or `None` when there is none (an
/// empty prefix, or one made only of 0xff bytes).
pub fn prefix_end(prefix: &[u8]) -> Option<Bytes> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return Some(end.into());
        }
    }
    None
}

/// What happened to a key in an [`Event`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EventKind {
    /// The key was created or updated.
    Put,
    /// The key was deleted.
    Delete,
}

/// One change to one key, as a watch delivers it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    /// Put or delete.
    pub kind: EventKind,
    /// The key after the change. For a delete: the key, an empty value, `mod_revision` the
    /// revision of the delete, and `create_revision` and `version` 0.
    pub kv: KeyValue,
    /// The key before the change, when the watch asked for previous values and the key existed.
    pub prev_kv: Option<KeyValue>,
}

impl Event {
    /// The revision of the transaction that made this change.
    pub fn revision(&self) -> Revision {
        self.kv.mod_revision
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_end_increments_last_byte_below_ff() {
        assert_eq!(prefix_end(b"/a/"), Some(Bytes::from_static(b"/a0")));
        assert_eq!(prefix_end(b"a\xff"), Some(Bytes::from_static(b"b")));
        assert_eq!(prefix_end(b"\xff\xff"), None);
        assert_eq!(prefix_end(b""), None);
    }

    #[test]
    fn validate_rejects_empty_keys_and_inverted_ranges() {
        assert!(matches!(KeyRange::key("").validate(), Err(Error::EmptyKey)));
        assert!(matches!(
            KeyRange::range("b", "a").validate(),
            Err(Error::InvalidRange { .. })
        ));
        assert!(matches!(
            KeyRange::range("a", "a").validate(),
            Err(Error::InvalidRange { .. })
        ));
        assert!(KeyRange::prefix("").validate().is_ok());
        assert!(KeyRange::range("a", "b").validate().is_ok());
    }

    #[test]
    fn contains_matches_bounds() {
        let r = KeyRange::prefix("/registry/pods/");
        assert!(r.contains(b"/registry/pods/default/a"));
        assert!(!r.contains(b"/registry/pods"));
        assert!(!r.contains(b"/registry/podsx"));
        assert!(KeyRange::key("a").contains(b"a"));
        assert!(!KeyRange::key("a").contains(b"a\0"));
        assert!(KeyRange::From("m".into()).contains(b"z"));
    }
}

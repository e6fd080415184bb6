//! Requests and responses: ranges, transactions and watches.

use std::collections::BTreeSet;

use bytes::Bytes;

use crate::{Error, KeyRange, KeyValue, Result, Revision};

/// A read of one key or a range of keys.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RangeRequest {
    /// The keys to read.
    pub range: KeyRange,
    /// Read the store as it was at this revision; `None` reads the latest state.
    pub revision: Option<Revision>,
    /// Return at most this many keys (in key order); `None` or `Some(0)` means no limit.
    pub limit: Option<u64>,
    /// Return only the count, no keys.
    pub count_only: bool,
    /// Return keys and their revisions but empty values.
    pub keys_only: bool,
}

impl RangeRequest {
    /// A read of `range` at the latest revision with no limit.
    pub fn new(range: KeyRange) -> Self {
        RangeRequest {
            range,
            revision: None,
            limit: None,
            count_only: false,
            keys_only: false,
        }
    }

    /// Reads at a past revision.
    pub fn at_revision(mut self, revision: Revision) -> Self {
        self.revision = Some(revision);
        self
    }

    /// Limits the number of keys returned.
    pub fn with_limit(mut self, limit: u64) -> Self {
        self.limit = Some(limit);
        self
    }

    /// Returns only the count.
    pub fn count_only(mut self) -> Self {
        self.count_only = true;
        self
    }

    /// Returns keys without values.
    pub fn keys_only(mut self) -> Self {
        self.keys_only = true;
        self
    }

    /// Checks the range and the revision.
    pub fn validate(&self) -> Result<()> {
        self.range.validate()?;
        if let Some(rev) = self.revision
            && rev < 0
        {
            return Err(Error::InvalidRequest(format!(
                "revision must not be negative, got {rev}"
            )));
        }
        Ok(())
    }

    /// The limit as a count of keys, `usize::MAX` for none.
    pub fn effective_limit(&self) -> usize {
        match self.limit {
            None | Some(0) => usize::MAX,
            Some(n) => usize::try_from(n).unwrap_or(usize::MAX),
        }
    }
}

/// The answer to a [`RangeRequest`].
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RangeResponse {
    /// The revision the read was served at: the requested one, or the store's current
    /// revision for a read at the latest state.
    pub revision: Revision,
    /// The keys, in key order (none for a count-only read).
    pub kvs: Vec<KeyValue>,
    /// How many keys the whole range holds, regardless of the limit.
    pub count: u64,
    /// Whether keys beyond the limit were left out.
    pub more: bool,
}

/// What a [`Compare`] looks at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CompareTarget {
    /// The key's mod_revision (0 when the key does not exist: `== 0` means "absent").
    ModRevision(Revision),
    /// The key's create_revision (0 when the key does not exist).
    CreateRevision(Revision),
    /// The key's version (0 when the key does not exist).
    Version(i64),
    /// The key's value. A value compare against a key that does not exist is false, whatever
    /// the operator.
    Value(Bytes),
}

/// How a [`Compare`] relates the key's field to the target.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CompareOp {
    /// Equal to the target.
    Equal,
    /// Not equal to the target.
    NotEqual,
    /// Less than the target.
    Less,
    /// Greater than the target.
    Greater,
}

/// One condition of a transaction, evaluated against the latest state before any of the
/// transaction's operations run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Compare {
    /// The key compared (must not be empty).
    pub key: Bytes,
    /// The field and the value to compare it with.
    pub target: CompareTarget,
    /// The relation that must hold.
    pub op: CompareOp,
}

impl Compare {
    /// `mod_revision(key) <op> rev`.
    pub fn mod_revision(key: impl Into<Bytes>, op: CompareOp, rev: Revision) -> Self {
        Compare {
            key: key.into(),
            target: CompareTarget::ModRevision(rev),
            op,
        }
    }

    /// `create_revision(key) <op> rev`.
    pub fn create_revision(key: impl Into<Bytes>, op: CompareOp, rev: Revision) -> Self {
        Compare {
            key: key.into(),
            target: CompareTarget::CreateRevision(rev),
            op,
        }
    }

    /// `version(key) <op> version`.
    pub fn version(key: impl Into<Bytes>, op: CompareOp, version: i64) -> Self {
        Compare {
            key: key.into(),
            target: CompareTarget::Version(version),
            op,
        }
    }

    /// `value(key) <op> value`.
    pub fn value(key: impl Into<Bytes>, op: CompareOp, value: impl Into<Bytes>) -> Self {
        Compare {
            key: key.into(),
            target: CompareTarget::Value(value.into()),
            op,
        }
    }

    /// The key is absent (`mod_revision == 0`).
    pub fn absent(key: impl Into<Bytes>) -> Self {
        Self::mod_revision(key, CompareOp::Equal, 0)
    }

    /// Evaluates the compare against the key's current state (`None` if absent).
    pub fn evaluate(&self, current: Option<&KeyValue>) -> bool {
        use std::cmp::Ordering;
        let ordering: Ordering = match (&self.target, current) {
            (CompareTarget::Value(_), None) => return false,
            (CompareTarget::Value(v), Some(kv)) => kv.value[..].cmp(&v[..]),
            (CompareTarget::ModRevision(r), kv) => kv.map_or(0, |kv| kv.mod_revision).cmp(r),
            (CompareTarget::CreateRevision(r), kv) => kv.map_or(0, |kv| kv.create_revision).cmp(r),
            (CompareTarget::Version(v), kv) => kv.map_or(0, |kv| kv.version).cmp(v),
        };
        match self.op {
            CompareOp::Equal => ordering == Ordering::Equal,
            CompareOp::NotEqual => ordering != Ordering::Equal,
            CompareOp::Less => ordering == Ordering::Less,
            CompareOp::Greater => ordering == Ordering::Greater,
        }
    }
}

/// One operation of a transaction branch. Operations run in order; a read sees the writes
/// before it in the same branch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TxnOp {
    /// Create or replace a key.
    Put {
        /// The key (must not be empty).
        key: Bytes,
        /// The new value.
        value: Bytes,
        /// Return the key as it was before the put.
        prev_kv: bool,
    },
    /// Delete every key in a range.
    Delete {
        /// The keys to delete.
        range: KeyRange,
        /// Return the deleted keys.
        prev_kv: bool,
    },
    /// Read a range at the transaction's revision (the request's `revision` must be `None`).
    Range(RangeRequest),
}

impl TxnOp {
    /// A put that does not ask for the previous value.
    pub fn put(key: impl Into<Bytes>, value: impl Into<Bytes>) -> Self {
        TxnOp::Put {
            key: key.into(),
            value: value.into(),
            prev_kv: false,
        }
    }

    /// A delete of one key that returns the deleted key.
    pub fn delete(key: impl Into<Bytes>) -> Self {
        TxnOp::Delete {
            range: KeyRange::Key(key.into()),
            prev_kv: true,
        }
    }

    /// A read of one key.
    pub fn get(key: impl Into<Bytes>) -> Self {
        TxnOp::Range(RangeRequest::new(KeyRange::Key(key.into())))
    }

    /// Whether the operation can change the store.
    pub fn is_write(&self) -> bool {
        !matches!(self, TxnOp::Range(_))
    }
}

/// An atomic transaction: if every compare holds, run `success`, else run `failure`.
///
/// A transaction that changes at least one key commits as exactly one new revision. A
/// transaction that changes nothing (reads only, or deletes of absent keys) leaves the revision
/// as it is.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Txn {
    /// Conditions, all of which must hold for `success` to run.
    pub compares: Vec<Compare>,
    /// Operations run when every compare holds.
    pub success: Vec<TxnOp>,
    /// Operations run otherwise.
    pub failure: Vec<TxnOp>,
}

impl Txn {
    /// An empty transaction.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds conditions.
    pub fn when(mut self, compares: impl IntoIterator<Item = Compare>) -> Self {
        self.compares.extend(compares);
        self
    }

    /// Sets the operations run when every compare holds.
    pub fn and_then(mut self, ops: impl IntoIterator<Item = TxnOp>) -> Self {
        self.success.extend(ops);
        self
    }

    /// Sets the operations run when a compare fails.
    pub fn or_else(mut self, ops: impl IntoIterator<Item = TxnOp>) -> Self {
        self.failure.extend(ops);
        self
    }

    /// Checks keys, ranges, and that neither branch writes one key twice (two puts of one
    /// key, or a put of a key the same branch deletes), as etcd does.
    pub fn validate(&self) -> Result<()> {
        for c in &self.compares {
            if c.key.is_empty() {
                return Err(Error::EmptyKey);
            }
        }
        for branch in [&self.success, &self.failure] {
            let mut puts = BTreeSet::new();
            for op in branch {
                match op {
                    TxnOp::Put { key, .. } => {
                        if key.is_empty() {
                            return Err(Error::EmptyKey);
                        }
                        if !puts.insert(key.clone()) {
                            return Err(Error::DuplicateKey(key.clone()));
                        }
                    }
                    TxnOp::Delete { range, .. } => range.validate()?,
                    TxnOp::Range(r) => {
                        r.validate()?;
                        if r.revision.is_some() {
                            return Err(Error::InvalidRequest(
                                "a range inside a transaction reads at the transaction's \
                                 revision and must not name one"
                                    .into(),
                            ));
                        }
                    }
                }
            }
            for op in branch {
                if let TxnOp::Delete { range, .. } = op
                    && let Some(key) = puts.iter().find(|k| range.contains(k))
                {
                    return Err(Error::DuplicateKey(key.clone()));
                }
            }
        }
        Ok(())
    }
}

/// The result of one [`TxnOp`], in the order of the branch that ran.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TxnOpResponse {
    /// A put ran.
    Put {
        /// The key before the put, when asked for and present.
        prev_kv: Option<KeyValue>,
    },
    /// A delete ran.
    Delete {
        /// How many keys were deleted.
        deleted: u64,
        /// The deleted keys, when asked for.
        prev_kvs: Vec<KeyValue>,
    },
    /// A read ran.
    Range(RangeResponse),
}

/// The answer to a [`Txn`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxnResponse {
    /// The store's revision after the transaction: the new revision if it changed anything.
    pub revision: Revision,
    /// Whether every compare held (and so `success` ran).
    pub succeeded: bool,
    /// One response per operation of the branch that ran.
    pub responses: Vec<TxnOpResponse>,
}

/// A request to watch a range of keys.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WatchRequest {
    /// The keys watched.
    pub range: KeyRange,
    /// Deliver every change with a revision at or after this one; `None` watches from the next
    /// revision (changes after the watch is created).
    pub start_revision: Option<Revision>,
    /// Include each key's previous value in events.
    pub prev_kv: bool,
}

impl WatchRequest {
    /// Watch `range` from the next revision, without previous values.
    pub fn new(range: KeyRange) -> Self {
        WatchRequest {
            range,
            start_revision: None,
            prev_kv: false,
        }
    }

    /// Start at a revision (replays history from there).
    pub fn from_revision(mut self, revision: Revision) -> Self {
        self.start_revision = Some(revision);
        self
    }

    /// Ask for previous values.
    pub fn with_prev_kv(mut self) -> Self {
        self.prev_kv = true;
        self
    }

    /// Checks the range and the start revision.
    pub fn validate(&self) -> Result<()> {
        self.range.validate()?;
        if let Some(rev) = self.start_revision
            && rev < 0
        {
            return Err(Error::InvalidRequest(format!(
                "start revision must not be negative, got {rev}"
            )));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kv(value: &'static str, mod_revision: Revision) -> KeyValue {
        KeyValue {
            key: Bytes::from_static(b"k"),
            value: Bytes::from_static(value.as_bytes()),
            create_revision: 1,
            mod_revision,
            version: 1,
        }
    }

    #[test]
    fn compares_on_missing_keys_follow_etcd() {
        assert!(Compare::absent("k").evaluate(None));
        assert!(!Compare::absent("k").evaluate(Some(&kv("v", 3))));
        assert!(Compare::version("k", CompareOp::Less, 1).evaluate(None));
        assert!(!Compare::value("k", CompareOp::NotEqual, "x").evaluate(None));
        assert!(Compare::value("k", CompareOp::Greater, "a").evaluate(Some(&kv("b", 2))));
    }

    #[test]
    fn validate_rejects_duplicate_writes_in_a_branch() {
        let txn = Txn::new().and_then([TxnOp::put("a", "1"), TxnOp::put("a", "2")]);
        assert!(matches!(txn.validate(), Err(Error::DuplicateKey(_))));
        let txn = Txn::new().and_then([
            TxnOp::put("a/1", "1"),
            TxnOp::Delete {
                range: KeyRange::prefix("a/"),
                prev_kv: false,
            },
        ]);
        assert!(matches!(txn.validate(), Err(Error::DuplicateKey(_))));
        // The same key in different branches is fine: only one branch runs.
        let txn = Txn::new()
            .and_then([TxnOp::put("a", "1")])
            .or_else([TxnOp::put("a", "2")]);
        assert!(txn.validate().is_ok());
    }

    #[test]
    fn validate_rejects_revisions_inside_transactions() {
        let txn = Txn::new().and_then([TxnOp::Range(
            RangeRequest::new(KeyRange::key("a")).at_revision(3),
        )]);
        assert!(matches!(txn.validate(), Err(Error::InvalidRequest(_))));
    }
}

//! The on-disk encoding of keys, versions and the change log.
//!
//! - `history`: `escape(key) ‖ revision (8 bytes, big-endian)` → a version record. All versions
//!   of one key sort together in revision order, and keys sort in their own byte order, so a
//!   range of keys is a range of the keyspace. `escape` writes 0x00 as 0x00 0xff and ends the
//!   key with 0x00 0x01: order-preserving and prefix-free, so no key's versions can be mistaken
//!   for another's (`a` ends `00 01`, `a\0…` continues `00 ff`).
//! - version record: `1 ‖ create_revision ‖ version ‖ value` for a put, `0` for a delete.
//! - `changes`: `revision (8 bytes, big-endian)` → the keys that revision changed, in order,
//!   each as `length (4 bytes, big-endian) ‖ key`.
//! - `meta`: `revision` and `compact_revision`, each 8 bytes big-endian.

use bytes::Bytes;
use konverge_store::{KeyValue, Revision};

/// A record on disk could not be decoded: the data directory is damaged or not konverge's.
#[derive(Debug, thiserror::Error)]
#[error("corrupt {what} record on disk")]
pub(crate) struct CorruptRecord {
    what: &'static str,
}

pub(crate) const REV_LEN: usize = 8;

pub(crate) fn escape_key(key: &[u8], out: &mut Vec<u8>) {
    for &b in key {
        out.push(b);
        if b == 0 {
            out.push(0xff);
        }
    }
    out.extend_from_slice(&[0x00, 0x01]);
}

pub(crate) fn unescape_key(escaped: &[u8]) -> Result<Bytes, CorruptRecord> {
    let corrupt = CorruptRecord { what: "key" };
    let body = escaped.strip_suffix(&[0x00, 0x01]).ok_or(corrupt)?;
    let mut out = Vec::with_capacity(body.len());
    let mut bytes = body.iter();
    while let Some(&b) = bytes.next() {
        out.push(b);
        if b == 0 && bytes.next() != Some(&0xff) {
            return Err(CorruptRecord { what: "key" });
        }
    }
    Ok(out.into())
}

/// `escape(key)`: the start of every history entry of `key`.
pub(crate) fn key_prefix(key: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(key.len() + 2 + REV_LEN);
    escape_key(key, &mut out);
    out
}

/// `escape(key) ‖ revision`.
pub(crate) fn history_key(key: &[u8], revision: Revision) -> Vec<u8> {
    let mut out = key_prefix(key);
    out.extend_from_slice(&revision.to_be_bytes());
    out
}

/// Splits a history key into `escape(key)` and the revision.
pub(crate) fn split_history_key(raw: &[u8]) -> Result<(&[u8], Revision), CorruptRecord> {
    if raw.len() < REV_LEN + 2 {
        return Err(CorruptRecord {
            what: "history key",
        });
    }
    let (escaped, rev) = raw.split_at(raw.len() - REV_LEN);
    Ok((escaped, decode_revision(rev)?))
}

pub(crate) fn decode_revision(raw: &[u8]) -> Result<Revision, CorruptRecord> {
    let bytes: [u8; REV_LEN] = raw
        .try_into()
        .map_err(|_| CorruptRecord { what: "revision" })?;
    Ok(Revision::from_be_bytes(bytes))
}

/// A version of a key: `None` for a delete.
pub(crate) fn encode_version(kv: Option<&KeyValue>) -> Vec<u8> {
    match kv {
        None => vec![0],
        Some(kv) => {
            let mut out = Vec::with_capacity(1 + 16 + kv.value.len());
            out.push(1);
            out.extend_from_slice(&kv.create_revision.to_be_bytes());
            out.extend_from_slice(&kv.version.to_be_bytes());
            out.extend_from_slice(&kv.value);
            out
        }
    }
}

/// Decodes a version record of `key` written at `mod_revision`.
pub(crate) fn decode_version(
    key: Bytes,
    mod_revision: Revision,
    raw: &[u8],
) -> Result<Option<KeyValue>, CorruptRecord> {
    match raw.first() {
        Some(0) if raw.len() == 1 => Ok(None),
        Some(1) if raw.len() > 2 * REV_LEN => Ok(Some(KeyValue {
            key,
            create_revision: decode_revision(&raw[1..1 + REV_LEN])?,
            version: decode_revision(&raw[1 + REV_LEN..1 + 2 * REV_LEN])?,
            mod_revision,
            value: Bytes::copy_from_slice(&raw[1 + 2 * REV_LEN..]),
        })),
        _ => Err(CorruptRecord { what: "version" }),
    }
}

pub(crate) fn encode_key_list<'a>(keys: impl Iterator<Item = &'a [u8]>) -> Vec<u8> {
    let mut out = Vec::new();
    for key in keys {
        out.extend_from_slice(&(key.len() as u32).to_be_bytes());
        out.extend_from_slice(key);
    }
    out
}

pub(crate) fn decode_key_list(mut raw: &[u8]) -> Result<Vec<Bytes>, CorruptRecord> {
    let mut keys = Vec::new();
    while !raw.is_empty() {
        let corrupt = || CorruptRecord {
            what: "change list",
        };
        let len_bytes: [u8; 4] = raw
            .get(..4)
            .ok_or_else(corrupt)?
            .try_into()
            .map_err(|_| corrupt())?;
        let len = u32::from_be_bytes(len_bytes) as usize;
        let key = raw.get(4..4 + len).ok_or_else(corrupt)?;
        keys.push(Bytes::copy_from_slice(key));
        raw = &raw[4 + len..];
    }
    Ok(keys)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escaping_preserves_order_and_is_prefix_free() {
        let mut keys: Vec<&[u8]> = vec![
            b"a", b"a\0", b"a\0\0", b"a\x01", b"ab", b"\0", b"b", b"\xff",
        ];
        keys.sort();
        let encoded: Vec<_> = keys.iter().map(|k| history_key(k, 7)).collect();
        let mut sorted = encoded.clone();
        sorted.sort();
        assert_eq!(encoded, sorted, "encoding keeps key order");
        for (i, a) in keys.iter().enumerate() {
            for b in keys.iter().skip(i + 1) {
                assert!(!key_prefix(b).starts_with(&key_prefix(a)), "{a:?} vs {b:?}");
            }
        }
        for k in keys {
            let raw = history_key(k, 42);
            let (escaped, rev) = split_history_key(&raw).expect("split");
            assert_eq!(rev, 42);
            assert_eq!(&unescape_key(escaped).expect("unescape")[..], k);
        }
    }

    #[test]
    fn versions_round_trip() {
        let kv = KeyValue {
            key: Bytes::from_static(b"k"),
            value: Bytes::from_static(b"value"),
            create_revision: 3,
            mod_revision: 9,
            version: 4,
        };
        let raw = encode_version(Some(&kv));
        assert_eq!(
            decode_version(kv.key.clone(), 9, &raw).expect("decode"),
            Some(kv.clone())
        );
        assert_eq!(
            decode_version(kv.key.clone(), 9, &encode_version(None)).expect("decode"),
            None
        );
        assert!(decode_version(kv.key.clone(), 9, &[1, 2]).is_err());
        assert!(decode_version(kv.key, 9, &[]).is_err());
    }

    #[test]
    fn key_lists_round_trip_and_reject_truncation() {
        let raw = encode_key_list([&b"a"[..], b"", b"long/key"].into_iter());
        let keys = decode_key_list(&raw).expect("decode");
        assert_eq!(
            keys,
            vec![
                Bytes::from_static(b"a"),
                Bytes::new(),
                Bytes::from_static(b"long/key")
            ]
        );
        assert!(decode_key_list(&raw[..raw.len() - 1]).is_err());
        assert!(unescape_key(b"a\0\x02\0\x01").is_err());
    }
}

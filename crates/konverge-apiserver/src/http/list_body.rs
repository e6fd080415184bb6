//! A list's body, written as the client reads it.
//!
//! A list of 50,000 objects is 70 MiB of JSON. Built whole, it is a second copy of every
//! object next to the watch cache's, held until the last byte is sent, and the allocator
//! keeps the pages after. Here a list is a sequence of pieces — the items' bytes, shared
//! with the watch cache, and the few bytes around them — copied into chunks of
//! [`CHUNK`] bytes only as the connection takes them. The body's exact length is known
//! from the start, so it is sent with a `Content-Length` and counted by the metrics as
//! any other answer.

use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::{Bytes, BytesMut};
use http_body::{Body, Frame, SizeHint};
use serde_json::Value;

use crate::error::{ApiError, Result};
use crate::json::write_object_json;
use crate::registry::Item;

/// How many bytes each chunk holds, at most (save pieces larger than this, sent alone).
const CHUNK: usize = 64 * 1024;

/// A body made of pieces, sent in chunks.
pub(super) struct ListBody {
    pieces: std::vec::IntoIter<Bytes>,
    remaining: u64,
}

impl ListBody {
    fn new(pieces: Vec<Bytes>) -> ListBody {
        let remaining = pieces.iter().map(|p| p.len() as u64).sum();
        ListBody {
            pieces: pieces.into_iter(),
            remaining,
        }
    }

    /// The whole body at once (tests and callers that need it whole).
    #[cfg(test)]
    pub(super) fn concat(self) -> Vec<u8> {
        self.pieces.flat_map(|p| p.to_vec()).collect()
    }
}

impl Body for ListBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<std::result::Result<Frame<Bytes>, Infallible>>> {
        let this = &mut *self;
        let Some(first) = this.pieces.next() else {
            return Poll::Ready(None);
        };
        let chunk = if first.len() >= CHUNK {
            first
        } else {
            let mut chunk = BytesMut::with_capacity(CHUNK);
            chunk.extend_from_slice(&first);
            while let Some(next) = this.pieces.as_slice().first() {
                if chunk.len() + next.len() > CHUNK {
                    break;
                }
                chunk.extend_from_slice(next);
                this.pieces.next();
            }
            chunk.freeze()
        };
        this.remaining -= chunk.len() as u64;
        Poll::Ready(Some(Ok(Frame::data(chunk))))
    }

    fn is_end_stream(&self) -> bool {
        self.remaining == 0
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(self.remaining)
    }
}

/// A list as JSON: `kind`, `apiVersion`, `metadata`, then the items, each as the watch
/// cache keeps it (shared with every list and watch) or encoded now.
///
/// Items of built-in kinds (`typed` false) go without their `kind` and `apiVersion`, as
/// kube-apiserver writes them: it decodes stored objects into its internal types, which
/// carry no type, and only the list's own type is set when it is encoded (kubernetes#3030).
/// Custom resources (`typed`) keep theirs, as unstructured objects do there.
pub(super) fn json(
    kind: &str,
    api_version: &str,
    metadata: &Value,
    items: &[Item],
    typed: bool,
) -> Result<ListBody> {
    let failed = |e: serde_json::Error| ApiError::internal(format!("encoding a list: {e}"));
    let mut head = Vec::with_capacity(128);
    head.extend_from_slice(b"{\"kind\":");
    serde_json::to_writer(&mut head, kind).map_err(failed)?;
    head.extend_from_slice(b",\"apiVersion\":");
    serde_json::to_writer(&mut head, api_version).map_err(failed)?;
    head.extend_from_slice(b",\"metadata\":");
    write_object_json(&mut head, metadata).map_err(failed)?;
    head.extend_from_slice(b",\"items\":[");
    // What a cached item of this list starts with, up to its metadata: its type, written as
    // the cache writes objects.
    let type_prefix = if typed {
        None
    } else {
        let mut prefix = b"{\"kind\":".to_vec();
        let item_kind = kind.strip_suffix("List").unwrap_or(kind);
        serde_json::to_writer(&mut prefix, item_kind).map_err(failed)?;
        prefix.extend_from_slice(b",\"apiVersion\":");
        serde_json::to_writer(&mut prefix, api_version).map_err(failed)?;
        prefix.push(b',');
        Some(prefix)
    };
    let mut pieces = Vec::with_capacity(items.len() * 3 + 2);
    pieces.push(Bytes::from(head));
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            pieces.push(Bytes::from_static(b","));
        }
        match (item, &type_prefix) {
            (Item::Cached(cached), None) => pieces.push(cached.json().clone()),
            (Item::Cached(cached), Some(prefix)) if cached.json().starts_with(prefix) => {
                pieces.push(Bytes::from_static(b"{"));
                pieces.push(cached.json().slice(prefix.len()..));
            }
            (Item::Cached(cached), Some(_)) => {
                pieces.push(untyped(&cached.decode()?).map_err(failed)?);
            }
            (Item::Decoded(value), None) => {
                let mut out = Vec::new();
                write_object_json(&mut out, value).map_err(failed)?;
                pieces.push(Bytes::from(out));
            }
            (Item::Decoded(value), Some(_)) => pieces.push(untyped(value).map_err(failed)?),
        }
    }
    pieces.push(Bytes::from_static(b"]}\n"));
    Ok(ListBody::new(pieces))
}

/// `object`'s JSON without its `kind` and `apiVersion`.
fn untyped(object: &Value) -> serde_json::Result<Bytes> {
    let mut object = object.clone();
    if let Some(fields) = object.as_object_mut() {
        fields.remove("kind");
        fields.remove("apiVersion");
    }
    let mut out = Vec::new();
    write_object_json(&mut out, &object)?;
    Ok(Bytes::from(out))
}

/// A list as Kubernetes protobuf, each cached item's message encoded once and kept by the
/// watch cache for the next lists; an error if an item's kind has no encoding.
pub(super) fn protobuf(
    api_version: &str,
    list_kind: &str,
    metadata: &Value,
    items: &[Item],
) -> Result<ListBody> {
    let messages = items
        .iter()
        .map(|item| match item {
            Item::Cached(cached) => cached.protobuf_item().cloned(),
            Item::Decoded(value) => konverge_protobuf::encode_item(value)
                .map(Bytes::from)
                .map_err(|e| ApiError::internal(format!("encoding as protobuf: {e}"))),
        })
        .collect::<Result<Vec<Bytes>>>()?;
    let mut pieces = Vec::with_capacity(messages.len() * 2 + 2);
    pieces.push(Bytes::from(konverge_protobuf::list_head(
        api_version,
        list_kind,
        metadata,
        messages.iter().map(Bytes::len),
    )));
    for message in messages {
        let mut prefix = Vec::with_capacity(6);
        konverge_protobuf::list_item_prefix(message.len(), &mut prefix);
        pieces.push(Bytes::from(prefix));
        pieces.push(message);
    }
    pieces.push(Bytes::from_static(&konverge_protobuf::LIST_TAIL));
    Ok(ListBody::new(pieces))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(sizes: &[usize]) -> ListBody {
        ListBody::new(
            sizes
                .iter()
                .enumerate()
                .map(|(i, n)| Bytes::from(vec![b'a' + i as u8; *n]))
                .collect(),
        )
    }

    #[test]
    fn chunks_hold_whole_pieces_up_to_the_chunk_size_and_say_what_is_left() {
        let sizes = [10, CHUNK - 10, 1, CHUNK * 2, 5, 6];
        let whole = body(&sizes).concat();
        let mut b = body(&sizes);
        let mut sent = Vec::new();
        let mut chunks = Vec::new();
        let waker = futures::task::noop_waker();
        let mut cx = Context::from_waker(&waker);
        loop {
            assert_eq!(
                b.size_hint().exact(),
                Some((whole.len() - sent.len()) as u64)
            );
            match Pin::new(&mut b).poll_frame(&mut cx) {
                Poll::Ready(Some(Ok(frame))) => {
                    let data = frame.into_data().expect("data");
                    chunks.push(data.len());
                    sent.extend_from_slice(&data);
                }
                Poll::Ready(None) => break,
                other => panic!("unexpected {other:?}"),
            }
        }
        assert!(b.is_end_stream());
        assert_eq!(sent, whole);
        // The first two fill a chunk exactly; the one byte cannot join the large piece,
        // which goes alone; the last two share one.
        assert_eq!(chunks, [CHUNK, 1, CHUNK * 2, 11]);
    }
}

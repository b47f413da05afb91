//! Forwarding misses to a full node (`--fallback`) instead of answering
//! 421: the missed elements of a batch go in one batch, answers matched by id.

use bytes::Bytes;
use neve_upstream::RpcClient;
use serde_json::value::RawValue;

/// Sends the missed elements of a batch to the fallback and returns their
/// answers in the same order, matched by id; `None` when that fails.
pub(crate) async fn forward_misses(
    fallback: &RpcClient,
    elements: &[&RawValue],
    misses: &[usize],
) -> Option<Vec<Bytes>> {
    let mut body = Vec::from(&b"["[..]);
    for (i, index) in misses.iter().enumerate() {
        if i > 0 {
            body.push(b',');
        }
        body.extend_from_slice(elements[*index].get().as_bytes());
    }
    body.push(b']');
    let (_, answer) = fallback.post(Bytes::from(body)).await.ok()?;
    let answers: Vec<&RawValue> = serde_json::from_slice(&answer).ok()?;
    #[derive(serde::Deserialize)]
    struct Id<'a> {
        #[serde(borrow)]
        id: Option<&'a RawValue>,
    }
    let id_of = |raw: &RawValue| {
        serde_json::from_str::<Id<'_>>(raw.get())
            .ok()?
            .id
            .map(|id| id.get().to_string())
    };
    // Each answer is used once, so repeated ids get their own answers.
    let mut unused: Vec<Option<&RawValue>> = answers.into_iter().map(Some).collect();
    misses
        .iter()
        .map(|index| {
            let wanted = id_of(elements[*index])?;
            let slot = unused
                .iter_mut()
                .find(|a| a.is_some_and(|a| id_of(a).as_deref() == Some(wanted.as_str())))?;
            slot.take()
                .map(|a| Bytes::copy_from_slice(a.get().as_bytes()))
        })
        .collect()
}

//! The errors of the patch functions.

/// Why a patch could not be applied.
///
/// The messages (`Display`) are those kube-apiserver sends back for the same patch; the
/// location inside the object, which Kubernetes' strategic merge messages leave out, is
/// available from [`PatchError::path`]. [`PatchError::kubernetes_status_code`] gives the
/// HTTP status kube-apiserver answers with.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PatchError {
    // ---- JSON patch (RFC 6902) ----
    /// The JSON patch is not a list of operation objects.
    #[error("{message}")]
    JsonPatchDecode {
        /// The decoding error, worded as Go's `encoding/json`.
        message: String,
    },
    /// The JSON patch has more operations than kube-apiserver accepts.
    #[error("The allowed maximum operations in a JSON patch is {max}, got {count}")]
    TooManyJsonPatchOperations {
        /// The limit.
        max: usize,
        /// The number of operations in the patch.
        count: usize,
    },
    /// An operation of the JSON patch failed (including a `test` that did not hold).
    #[error("{message}")]
    JsonPatchOperation {
        /// The index of the failing operation in the patch.
        index: usize,
        /// The failing operation (`add`, `remove`, `replace`, `move`, `copy`, `test`, or what
        /// the patch named).
        op: String,
        /// The operation's `path` (or `from`, when that is what failed).
        path: String,
        /// The message, worded as evanphx/json-patch (which kube-apiserver uses).
        message: String,
    },

    // ---- JSON merge patch (RFC 7386) ----
    /// The merge patch is `null` or a JSON scalar.
    #[error("Invalid JSON Patch")]
    MergePatchInvalidPatch,
    /// The document a merge patch applies to is `null`.
    #[error("Invalid JSON Document")]
    MergePatchInvalidDocument,

    // ---- strategic merge patch ----
    /// The type has no strategic merge description (a custom resource): kube-apiserver
    /// refuses the patch type with 415 Unsupported Media Type.
    #[error("strategic merge patch format is not supported")]
    StrategicMergePatchUnsupported,
    /// The strategic merge patch is not a JSON object.
    #[error("{message}")]
    StrategicPatchDecode {
        /// The decoding error, worded as Go's `encoding/json`.
        message: String,
    },
    /// The document a strategic merge patch applies to is not a JSON object.
    #[error("invalid JSON document")]
    InvalidDocument,
    /// A `$deleteFromPrimitiveList` directive is malformed.
    #[error("invalid patch format of primitive list")]
    BadPatchFormatForPrimitiveList {
        /// Where in the object.
        path: String,
    },
    /// A `$retainKeys` directive is not a list, or the patch sets a field it does not list.
    #[error("invalid patch format of retainKeys")]
    BadPatchFormatForRetainKeys {
        /// Where in the object.
        path: String,
    },
    /// A `$setElementOrder` directive is malformed.
    #[error("invalid patch format of setElementOrder list")]
    BadPatchFormatForSetElementOrderList {
        /// Where in the object.
        path: String,
    },
    /// A merged list holds lists.
    #[error("lists of lists are not supported")]
    NoListOfLists {
        /// Where in the object.
        path: String,
    },
    /// An element of a list merged by key lacks the key.
    #[error("map: {map} does not contain declared merge key: {merge_key}")]
    MissingMergeKey {
        /// Where in the object.
        path: String,
        /// The merge key (for example `name`).
        merge_key: String,
        /// The element, printed as Go prints a map.
        map: String,
    },
    /// A `$patch` directive has a value other than `replace` or `delete` (or `merge`, in a
    /// list).
    #[error("unknown patch type: {directive} in map: {map}")]
    UnknownPatchType {
        /// Where in the object.
        path: String,
        /// The directive's value.
        directive: String,
        /// The map holding the directive, printed as Go prints a map.
        map: String,
    },
    /// A list element carries `$patch: merge`, which Kubernetes does not implement.
    #[error("merging lists cannot yet be specified in the patch")]
    MergeDirectiveInList {
        /// Where in the object.
        path: String,
    },
    /// A list of objects is merged (by strategy or by `$deleteFromPrimitiveList`) but the
    /// field has no merge key.
    #[error("cannot merge lists without merge key for {type_name}")]
    MergeKeyRequired {
        /// Where in the object.
        path: String,
        /// Go's kind name of the list elements' type (`struct`, `string`).
        type_name: String,
    },
    /// A value has the wrong JSON type for what the patch does with it.
    #[error("expected a {expected}, but received a {actual}")]
    InvalidType {
        /// Where in the object.
        path: String,
        /// The Go type expected (`map[string]interface {}`, `[]interface {}`).
        expected: String,
        /// The Go type found.
        actual: String,
    },
    /// The elements of lists merged together do not all have the same type.
    #[error("list element types are not identical: {lists}")]
    ListElementTypesDiffer {
        /// Where in the object.
        path: String,
        /// The lists, printed as Go prints them.
        lists: String,
    },
    /// A `$setElementOrder` list and its field are both empty.
    #[error("no elements in any of the given slices")]
    NoElements {
        /// Where in the object.
        path: String,
    },
    /// An element of a list merged by key is not an object.
    #[error("value for key {index} is not a map")]
    ListElementNotAMap {
        /// Where in the object.
        path: String,
        /// The index of the element.
        index: usize,
    },
    /// A list's elements are not in the order its `$setElementOrder` directive gives.
    #[error(
        "The order in patch list:\n{patch_list}\n doesn't match $setElementOrder list:\n{order_list}\n"
    )]
    SetElementOrderMismatch {
        /// Where in the object.
        path: String,
        /// The patch list, printed as Go prints it.
        patch_list: String,
        /// The order list, printed as Go prints it.
        order_list: String,
    },
    /// A key starting with `$` is not a strategic merge directive (`$patch`, `$retainKeys`,
    /// `$setElementOrder/…`, `$deleteFromPrimitiveList/…`). Kubernetes would drop it as an
    /// unknown field, or reject it under `fieldValidation=Strict`, which this mirrors.
    #[error("strict decoding error: unknown field {}", crate::gofmt::quote(.path))]
    UnknownDirective {
        /// Where in the object, ending with the key.
        path: String,
    },
}

impl PatchError {
    /// Where in the object the problem is (dotted path with `[i]` indexes; empty for the
    /// top level), for the strategic merge errors that have a location, or the operation's
    /// path for a failing JSON patch operation.
    pub fn path(&self) -> Option<&str> {
        match self {
            PatchError::BadPatchFormatForPrimitiveList { path }
            | PatchError::BadPatchFormatForRetainKeys { path }
            | PatchError::BadPatchFormatForSetElementOrderList { path }
            | PatchError::NoListOfLists { path }
            | PatchError::MissingMergeKey { path, .. }
            | PatchError::UnknownPatchType { path, .. }
            | PatchError::MergeDirectiveInList { path }
            | PatchError::MergeKeyRequired { path, .. }
            | PatchError::InvalidType { path, .. }
            | PatchError::ListElementTypesDiffer { path, .. }
            | PatchError::NoElements { path }
            | PatchError::ListElementNotAMap { path, .. }
            | PatchError::SetElementOrderMismatch { path, .. }
            | PatchError::UnknownDirective { path }
            | PatchError::JsonPatchOperation { path, .. } => Some(path),
            _ => None,
        }
    }

    /// The HTTP status kube-apiserver answers this error with: 400 for undecodable patches
    /// and malformed directives, 413 for too many JSON patch operations, 415 for a strategic
    /// merge patch on a type without a description, 422 for failed JSON patch operations,
    /// lists of lists and unknown directives, and 500 for the other strategic merge errors
    /// (kube-apiserver passes those through as internal errors; a server may prefer 422).
    pub fn kubernetes_status_code(&self) -> u16 {
        match self {
            PatchError::JsonPatchDecode { .. }
            | PatchError::MergePatchInvalidPatch
            | PatchError::StrategicPatchDecode { .. }
            | PatchError::InvalidDocument
            | PatchError::BadPatchFormatForPrimitiveList { .. }
            | PatchError::BadPatchFormatForRetainKeys { .. }
            | PatchError::BadPatchFormatForSetElementOrderList { .. } => 400,
            PatchError::TooManyJsonPatchOperations { .. } => 413,
            PatchError::StrategicMergePatchUnsupported => 415,
            PatchError::JsonPatchOperation { .. }
            | PatchError::NoListOfLists { .. }
            | PatchError::UnknownDirective { .. } => 422,
            _ => 500,
        }
    }
}

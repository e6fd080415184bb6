//! Label and field selectors, as `?labelSelector=` and `?fieldSelector=` carry them and as
//! controllers hold them (`metav1.LabelSelector`).
//!
//! The grammar, the matching rules and the error messages are those of Kubernetes 1.33's
//! `k8s.io/apimachinery/pkg/labels` and `pkg/fields`:
//!
//! - [`LabelSelector::parse`] reads `k=v`, `k==v`, `k!=v`, `k in (a,b)`, `k notin (a,b)`, `k`,
//!   `!k`, `k>1`, `k<1`, joined by `,` (AND); [`LabelSelector::from_json`] converts the
//!   structured form; [`LabelSelector::matches`] tests a label map.
//! - [`FieldSelector::parse`] reads `f=v`, `f==v`, `f!=v` joined by `,`, with `\` escapes in
//!   values; [`FieldSelector::matches`] asks a closure for each field's value, and
//!   [`field_value`] resolves a dotted path in an object for such a closure.
//! - [`validate_label_key`] and [`validate_label_value`] check labels with the same wording.

mod field;
mod label;
mod validation;

pub use field::{
    FieldOperator, FieldRequirement, FieldSelector, escape_value, field_value, unescape_value,
};
pub use label::{LabelSelector, Operator, Requirement};
pub use validation::{
    label_key_errors, label_value_errors, validate_label_key, validate_label_value,
};

use crate::gofmt;

/// Why a selector could not be parsed or built. The messages are kube-apiserver's; the
/// server answers all of them with 400 Bad Request.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SelectorError {
    /// A label selector string does not follow the grammar, or one of its requirements is
    /// invalid (for example `unable to parse requirement: found '', expected: identifier`).
    #[error("{message}")]
    InvalidLabelSelector {
        /// The message, as Kubernetes words it.
        message: String,
    },
    /// A requirement built directly or from a structured selector is invalid (for example
    /// `values: Invalid value: []string(nil): for 'in', 'notin' operators, values set can't
    /// be empty`).
    #[error("{message}")]
    InvalidRequirement {
        /// The message, as Kubernetes words it.
        message: String,
    },
    /// A `matchExpressions` operator is not `In`, `NotIn`, `Exists` or `DoesNotExist`.
    #[error("{} is not a valid label selector operator", gofmt::quote(.0))]
    InvalidOperator(String),
    /// A structured label selector does not have the shape of `metav1.LabelSelector`.
    #[error("{0}")]
    MalformedLabelSelector(String),
    /// A field selector term has no `=`, `==` or `!=`.
    #[error("invalid selector: '{selector}'; can't understand '{term}'")]
    InvalidFieldSelectorTerm {
        /// The whole selector.
        selector: String,
        /// The term that could not be read.
        term: String,
    },
    /// A field selector value has a `\` escape other than `\\`, `\,` and `\=`, or ends in `\`.
    #[error("invalid field selector: invalid escape sequence: {sequence}")]
    InvalidEscapeSequence {
        /// The offending sequence.
        sequence: String,
    },
    /// A field selector value has an unescaped `=` (Kubernetes prints the character's code
    /// point).
    #[error("invalid field selector: unescaped character in value: {}", u32::from(*.character))]
    UnescapedCharacter {
        /// The character.
        character: char,
    },
}

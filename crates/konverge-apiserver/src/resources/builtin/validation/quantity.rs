//! Quantities in validation: a quantity may come as a JSON string or number; its value and
//! canonical form are konverge-apimachinery's.

use serde_json::Value;

pub(super) use konverge_apimachinery::quantity::Quantity;

/// Parses a quantity given as a string or a JSON number; `None` when it is none.
pub(super) fn parse(q: &Value) -> Option<Quantity> {
    match q {
        Value::Number(n) => konverge_apimachinery::quantity::value(&n.to_string()),
        Value::String(s) => konverge_apimachinery::quantity::value(s),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    #[test]
    fn numbers_are_quantities_too() {
        assert_eq!(
            super::parse(&json!(0.5)).map(|q| q.canonical).as_deref(),
            Some("500m")
        );
        assert_eq!(super::parse(&json!(true)), None);
    }
}

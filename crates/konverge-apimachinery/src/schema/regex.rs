//! Regular expressions for `pattern` and the string formats, on the `regex` crate (whose
//! syntax is RE2's, as Go's `regexp` is), with compiled expressions cached: a schema's
//! patterns and the formats' expressions are compiled once, not per validated value.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex};

/// A compiled regular expression.
#[derive(Debug, Clone)]
pub(crate) struct Regex(Arc<regex::Regex>);

/// A parse failure, worded as Go's `regexp` words its errors (`error parsing regexp: ...`).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct RegexError(pub(crate) String);

/// How many distinct expressions the cache keeps before starting over (schemas have few).
const CACHED: usize = 1024;

static CACHE: LazyLock<Mutex<HashMap<String, Regex>>> =
    LazyLock::new(|| Mutex::new(HashMap::new()));

impl Regex {
    /// Compiles `src` (or takes it from the cache).
    pub(crate) fn new(src: &str) -> Result<Regex, RegexError> {
        let mut cache = CACHE.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(re) = cache.get(src) {
            return Ok(re.clone());
        }
        let compiled = regex::Regex::new(src).map_err(|e| {
            let detail = match &e {
                regex::Error::Syntax(text) => text
                    .lines()
                    .rev()
                    .find(|l| l.starts_with("error: "))
                    .map(|l| l.trim_start_matches("error: ").to_string())
                    .unwrap_or_else(|| text.clone()),
                other => other.to_string(),
            };
            RegexError(format!("error parsing regexp: {detail}: `{src}`"))
        })?;
        if cache.len() >= CACHED {
            cache.clear();
        }
        let re = Regex(Arc::new(compiled));
        cache.insert(src.to_string(), re.clone());
        Ok(re)
    }

    /// Whether the expression matches anywhere in `text` (Go's `MatchString`).
    pub(crate) fn is_match(&self, text: &str) -> bool {
        self.0.is_match(text)
    }
}

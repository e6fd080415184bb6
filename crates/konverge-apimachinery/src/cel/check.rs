//! How cel-go renders the issues of an expression: `ERROR: <input>:L:C: message`, the source
//! line, and a caret under the column.

use super::checker::Issue;

/// Every issue, rendered and joined by line breaks, in source order (at most 100, as cel-go
/// renders them).
pub(crate) fn issues(source: &str, issues: &[Issue]) -> String {
    let mut shown: Vec<String> = issues
        .iter()
        .take(100)
        .map(|i| issue(source, i.offset, &i.message))
        .collect();
    if issues.len() > 100 {
        shown.push(format!("{} more errors were truncated", issues.len() - 100));
    }
    shown.join("\n")
}

/// cel-go's rendering of one issue: `ERROR: <input>:L:C: message` and the source line with a
/// caret under the column.
pub(crate) fn issue(source: &str, offset: usize, message: &str) -> String {
    let mut line_no = 1;
    let mut line_start = 0;
    for (i, c) in source.char_indices() {
        if i >= offset {
            break;
        }
        if c == '\n' {
            line_no += 1;
            line_start = i + 1;
        }
    }
    let line = source[line_start..].lines().next().unwrap_or("");
    let column = source
        .get(line_start..offset.max(line_start))
        .map_or(0, |s| s.chars().count());
    let mut out = format!("ERROR: <input>:{line_no}:{}: {message}", column + 1);
    out.push_str("\n | ");
    out.push_str(line);
    out.push_str("\n | ");
    out.push_str(&".".repeat(column));
    out.push('^');
    out
}

/// A parse failure of the cel crate worded as cel-go words it (` | ` before source lines).
pub(crate) fn parse_errors(errors: &cel::ParseErrors) -> String {
    errors.to_string().replace("\n| ", "\n | ")
}

//! The README and docs/ read as the tests need them: tables, code spans, links.

/// The rows (cells trimmed) of every markdown table in `text` whose header starts with `header`.
pub fn table_rows(text: &str, header: &str) -> Vec<Vec<String>> {
    let mut rows = Vec::new();
    let mut inside = false;
    for line in text.lines() {
        if line.starts_with(header) {
            inside = true;
            continue;
        }
        if !line.starts_with('|') {
            inside = false;
            continue;
        }
        if inside && !line.starts_with("|---") {
            rows.push(line.trim_matches('|').split(" | ").map(|c| c.trim().to_string()).collect());
        }
    }
    rows
}

/// The `code` spans of a cell.
pub fn code_spans(cell: &str) -> Vec<String> {
    cell.split('`').skip(1).step_by(2).map(str::to_string).collect()
}

/// The targets of the links (and images) in `text`, as written.
pub fn links(text: &str) -> Vec<&str> {
    text.split("](").skip(1).filter_map(|rest| rest.split(')').next()).collect()
}

//! The two list options RequestInfo reads from a collection GET's query:
//! `watch` (the verb becomes watch) and a `fieldSelector` naming one object
//! (`metadata.name`), as kube decodes them into `metainternalversion.ListOptions`.
//! Routing never reads them; the full classification does.

use std::borrow::Cow;

use crate::urlpath::query_pairs;

/// The two list options RequestInfo reads from the query.
pub struct ListOptions<'q> {
    pub watch: bool,
    pub name_from_field_selector: Option<Cow<'q, [u8]>>,
}

impl<'q> ListOptions<'q> {
    pub fn parse(query: &'q [u8]) -> ListOptions<'q> {
        let mut watch = None;
        let mut name = None;
        for (k, v) in query_pairs(query) {
            match &*k {
                // First value wins, as with Go's url.Values; any value but
                // "0"/"false" (case-insensitive) means watch, even an empty one.
                b"watch" if watch.is_none() => {
                    watch = Some(!(&*v == b"0" || v.eq_ignore_ascii_case(b"false")));
                }
                b"fieldSelector" if name.is_none() => {
                    name = exact_name(v);
                }
                _ => {}
            }
        }
        ListOptions { watch: watch.unwrap_or(false), name_from_field_selector: name }
    }
}

/// `metadata.name=X` / `metadata.name==X` from a decoded field selector, if X
/// is a valid path segment name (`fields.RequiresExactMatch` +
/// `path.IsValidPathSegmentName`). Selectors with `\\` escapes are left alone:
/// the name is informational and never affects routing.
pub fn exact_name(selector: Cow<'_, [u8]>) -> Option<Cow<'_, [u8]>> {
    let (start, end) = {
        let s: &[u8] = &selector;
        let mut offset = 0;
        let mut found = None;
        for term in s.split(|b| *b == b',') {
            let here = offset;
            offset += term.len() + 1;
            let Some(rest) = term.strip_prefix(b"metadata.name") else {
                continue;
            };
            let op = if rest.starts_with(b"==") {
                2
            } else if rest.starts_with(b"=") {
                1
            } else {
                continue;
            };
            let value = rest.get(op..).unwrap_or(b"");
            let valid = !value.is_empty()
                && value != b"."
                && value != b".."
                && !value.iter().any(|b| matches!(b, b'/' | b'%' | b'\\'));
            if valid {
                let start = here + b"metadata.name".len() + op;
                found = Some((start, start + value.len()));
            }
            break;
        }
        found?
    };
    match selector {
        Cow::Borrowed(b) => b.get(start..end).map(Cow::Borrowed),
        Cow::Owned(o) => o.get(start..end).map(|v| Cow::Owned(v.to_vec())),
    }
}

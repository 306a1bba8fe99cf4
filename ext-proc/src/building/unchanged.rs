//! "Unchanged" is pointer equality: a view or document is replaced only
//! when its content differs, so holding the same `Arc` means nothing
//! changed and nothing downstream is rebuilt or compared.

use std::sync::Arc;

/// Both absent, or the very same value.
pub fn same<T>(a: &Option<Arc<T>>, b: &Option<Arc<T>>) -> bool {
    match (a, b) {
        (Some(a), Some(b)) => Arc::ptr_eq(a, b),
        (None, None) => true,
        _ => false,
    }
}

/// The same members, in the same order, each with the very same value.
pub fn same_named<T>(a: &[(String, Arc<T>)], b: &[(String, Arc<T>)]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(a, b)| a.0 == b.0 && Arc::ptr_eq(&a.1, &b.1))
}

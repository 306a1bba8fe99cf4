//! `MergePreservingRelativeOrder` from
//! `k8s.io/apimachinery/pkg/util/sort/sort.go`: one order for items from
//! several lists that keeps every list's relative order.

use std::cmp::Reverse;
use std::collections::{BTreeSet, BinaryHeap, HashMap, HashSet};

/// - Edges come from adjacent pairs of each list.
/// - Shortcut: the first list (in the given order) that holds every distinct
///   item exactly once is returned as it is.
/// - Otherwise Kahn's topological sort, taking the lexicographically smallest
///   free item first.
/// - On a cycle (lists that disagree), a plain lexicographic sort of all items.
pub fn merge_preserving_relative_order(lists: &[Vec<String>]) -> Vec<String> {
    if lists.is_empty() {
        return vec![];
    }
    let mut out_edges: HashMap<&str, HashSet<&str>> = HashMap::new();
    let mut in_degree: HashMap<&str, usize> = HashMap::new();
    for list in lists {
        for (i, item) in list.iter().enumerate() {
            in_degree.entry(item).or_insert(0);
            out_edges.entry(item).or_default();
            if let Some(next) = list.get(i + 1) {
                in_degree.entry(next).or_insert(0);
                if out_edges.entry(item).or_default().insert(next) {
                    *in_degree.entry(next).or_insert(0) += 1;
                }
            }
        }
    }
    let distinct = in_degree.len();
    for list in lists {
        if list.len() == distinct && list.iter().collect::<HashSet<_>>().len() == distinct {
            return list.clone();
        }
    }
    let mut heap: BinaryHeap<Reverse<&str>> = in_degree.iter().filter(|(_, d)| **d == 0).map(|(k, _)| Reverse(*k)).collect();
    let mut result: Vec<String> = Vec::with_capacity(distinct);
    while let Some(Reverse(current)) = heap.pop() {
        result.push(current.to_string());
        for next in out_edges.get(current).into_iter().flatten() {
            if let Some(d) = in_degree.get_mut(next) {
                *d -= 1;
                if *d == 0 {
                    heap.push(Reverse(next));
                }
            }
        }
    }
    if result.len() != distinct {
        return in_degree.keys().map(|s| s.to_string()).collect::<BTreeSet<_>>().into_iter().collect();
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    fn l(items: &[&str]) -> Vec<String> {
        items.iter().map(|s| s.to_string()).collect()
    }

    // Cases from sort_test.go and the function's documentation.
    #[test]
    fn table() {
        let cases: &[(&[&[&str]], &[&str])] = &[
            (&[], &[]),
            (&[&["a", "b", "c"], &["b", "c"]], &["a", "b", "c"]),
            (&[&["a", "c"], &["b", "c"]], &["a", "b", "c"]),
            // a cycle: lexicographic fallback
            (&[&["a", "b", "c"], &["c", "b"]], &["a", "b", "c"]),
            (&[&["b", "a"], &["a", "b"]], &["b", "a"]), // shortcut: first complete list wins
            (&[&["x", "b"], &["a", "y"]], &["a", "x", "b", "y"]),
            (&[&["g1", "g3"], &["g2", "g3"], &["g1", "g2"]], &["g1", "g2", "g3"]),
            (&[&["z"], &["y"], &["x"]], &["x", "y", "z"]),
            // duplicates in a list disqualify it from the shortcut
            (&[&["a", "b", "a"], &["b"]], &["a", "b"]),
        ];
        for (input, want) in cases {
            let lists: Vec<Vec<String>> = input.iter().map(|x| l(x)).collect();
            assert_eq!(merge_preserving_relative_order(&lists), l(want), "{input:?}");
        }
    }
}

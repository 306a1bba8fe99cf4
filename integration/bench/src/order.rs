//! The order variants run in within each round: a Williams design (a
//! balanced Latin square). Every variant takes every position once, and
//! every variant runs right after every other equally often, so whatever a
//! run leaves behind for the next one on a shared core (closing connections,
//! caches, a burst it was caught in) falls on all variants alike. A plain
//! rotation would keep the cyclic order fixed: the same variant would always
//! follow the same one.

/// Round `round`'s order of `n` variants. Even `n`: the classic design,
/// balanced over `n` rounds. Odd `n`: each row then its reverse, balanced
/// over `2n` rounds. Later rounds repeat the cycle.
pub fn round_order(n: usize, round: usize) -> Vec<usize> {
    if n == 0 {
        return vec![];
    }
    // 0, 1, n−1, 2, n−2, … : consecutive differences 1, −2, 3, −4, … are all
    // distinct mod n, which is what balances first-order carry-over.
    let base = (0..n).map(|j| if j % 2 == 1 { j.div_ceil(2) } else { (n - j / 2) % n });
    let (shift, reverse) = if n.is_multiple_of(2) { (round % n, false) } else { ((round / 2) % n, !round.is_multiple_of(2)) };
    let mut row: Vec<usize> = base.map(|v| (v + shift) % n).collect();
    if reverse {
        row.reverse();
    }
    row
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    /// Over one full cycle: each row is a permutation, each variant holds
    /// each position equally often, and each ordered pair (a then b) is
    /// adjacent equally often.
    #[test]
    fn every_variant_follows_every_other_equally_often() {
        for (n, cycle) in [(2, 2), (3, 6), (4, 4), (5, 10), (6, 6), (7, 14)] {
            let rows: Vec<Vec<usize>> = (0..cycle).map(|r| round_order(n, r)).collect();
            let mut positions = BTreeMap::new();
            let mut pairs = BTreeMap::new();
            for row in &rows {
                let mut sorted = row.clone();
                sorted.sort();
                assert_eq!(sorted, (0..n).collect::<Vec<_>>(), "n={n}: {row:?}");
                for (pos, v) in row.iter().enumerate() {
                    *positions.entry((pos, *v)).or_insert(0) += 1;
                }
                for w in row.windows(2) {
                    *pairs.entry((w[0], w[1])).or_insert(0) += 1;
                }
            }
            let each = cycle / n;
            assert!(positions.len() == n * n && positions.values().all(|c| *c == each), "n={n}: {positions:?}");
            let each = cycle * (n - 1) / (n * (n - 1));
            assert!(pairs.len() == n * (n - 1) && pairs.values().all(|c| *c == each), "n={n}: {pairs:?}");
        }
    }

    #[test]
    fn six_variants_start_like_the_textbook_square() {
        assert_eq!(round_order(6, 0), [0, 1, 5, 2, 4, 3]);
        assert_eq!(round_order(6, 1), [1, 2, 0, 3, 5, 4]);
        assert!(round_order(0, 3).is_empty());
    }
}

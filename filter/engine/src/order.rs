//! One stable sort for the lists the engine orders when it compiles a bundle (and the few JWT
//! claims of a decision record).
//!
//! The standard library's sort is generic: every element type and comparison sorted with it
//! brings its own copy of the sort into the `.wasm` (4-5 KB each after wasm-opt). Here only
//! indices are sorted, by one non-generic function; the elements are then moved into place.
//! For load-time lists: the index vector and the dynamic calls cost a little per element.

use std::cmp::Ordering;

/// Sorts `v` by `cmp`, stably (equal elements keep their order), as `slice::sort_by` does.
pub(crate) fn sort_by<T>(v: &mut Vec<T>, mut cmp: impl FnMut(&T, &T) -> Ordering) {
    let order = {
        let items: &[T] = v;
        permutation(
            items.len(),
            &mut |a, b| match (items.get(a), items.get(b)) {
                (Some(x), Some(y)) => cmp(x, y),
                _ => Ordering::Equal,
            },
        )
    };
    let mut slots: Vec<Option<T>> = v.drain(..).map(Some).collect();
    v.extend(
        order
            .into_iter()
            .filter_map(|i| slots.get_mut(i).and_then(Option::take)),
    );
}

/// Sorts `v` in ascending order, stably.
pub(crate) fn sort<T: Ord>(v: &mut Vec<T>) {
    sort_by(v, T::cmp);
}

/// The indices `0..n` in the order `cmp` (of two indices) puts them, stably.
fn permutation(n: usize, cmp: &mut dyn FnMut(usize, usize) -> Ordering) -> Vec<usize> {
    let mut indices: Vec<usize> = (0..n).collect();
    indices.sort_by(|&a, &b| cmp(a, b));
    indices
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sorts_as_the_standard_library_does_and_stably() {
        let mut words: Vec<String> = ["pear", "fig", "apple", "fig", "kiwi", ""]
            .map(String::from)
            .to_vec();
        let mut expected = words.clone();
        expected.sort();
        sort(&mut words);
        assert_eq!(words, expected);

        // Stable: by length only, equal lengths keep their first order.
        let mut pairs = vec![(3, 'a'), (1, 'b'), (3, 'c'), (0, 'd'), (1, 'e')];
        sort_by(&mut pairs, |x, y| x.0.cmp(&y.0));
        assert_eq!(pairs, [(0, 'd'), (1, 'b'), (1, 'e'), (3, 'a'), (3, 'c')]);

        let mut empty: Vec<u8> = Vec::new();
        sort(&mut empty);
        assert!(empty.is_empty());
    }
}

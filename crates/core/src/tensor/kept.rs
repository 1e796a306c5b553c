//! Buffers a thread keeps between calls, so that the many short products of a network neither
//! allocate nor clear their working memory afresh.

use std::cell::Cell;
use std::thread::LocalKey;

/// A value taken from the thread's spare (`home`), given back to it when dropped unless it grew
/// past what `keep` says is worth holding. A call nested inside another on the same thread finds
/// the spare empty and starts from `T::default()`.
pub(super) struct Kept<T: Default + 'static> {
    value: T,
    home: &'static LocalKey<Cell<T>>,
    keep: fn(&T) -> bool,
}

impl<T: Default + 'static> Kept<T> {
    /// The thread's spare value from `home`.
    pub(super) fn take(home: &'static LocalKey<Cell<T>>, keep: fn(&T) -> bool) -> Self {
        Kept { value: home.with(Cell::take), home, keep }
    }
}

impl<T: Default + 'static> std::ops::Deref for Kept<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.value
    }
}

impl<T: Default + 'static> std::ops::DerefMut for Kept<T> {
    fn deref_mut(&mut self) -> &mut T {
        &mut self.value
    }
}

impl<T: Default + 'static> Drop for Kept<T> {
    fn drop(&mut self) {
        if (self.keep)(&self.value) {
            let value = std::mem::take(&mut self.value);
            // During the thread's exit the spare may be gone: then the value is dropped.
            let _ = self.home.try_with(|spare| spare.set(value));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    thread_local! {
        static SPARE: Cell<Vec<u8>> = const { Cell::new(Vec::new()) };
    }

    #[test]
    fn a_kept_value_comes_back_and_an_oversized_or_nested_one_does_not() {
        let small = |v: &Vec<u8>| v.capacity() <= 64;
        {
            let mut outer = Kept::take(&SPARE, small);
            outer.extend([1, 2, 3]);
            // Nested: the spare is out, so this one starts empty.
            assert!(Kept::take(&SPARE, small).is_empty());
        }
        assert_eq!(*Kept::take(&SPARE, small), [1, 2, 3]);
        Kept::take(&SPARE, small).resize(1000, 0);
        assert!(Kept::take(&SPARE, small).is_empty(), "a buffer past the bound is not kept");
    }
}

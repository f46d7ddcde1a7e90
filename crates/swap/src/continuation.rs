//! Count-continuation storage supplied by the caller (spec 05 §6): a pool
//! of pages, each holding one digit per slot of a cluster. A cluster takes
//! pages from the pool as its counts overflow and returns them when it
//! becomes free. Without storage (or with the pool empty) an overflowing
//! duplicate is refused with [`crate::SwapError::CountOverflow`].

/// The free continuation pages. Its lock is a leaf: it is taken with a
/// cluster lock held and never the other way round.
pub(crate) struct ContPool<'a> {
    free: &'a mut [Option<&'a mut [u8]>],
    top: usize,
    total: usize,
}

impl<'a> ContPool<'a> {
    pub fn empty() -> Self {
        ContPool {
            free: &mut [],
            top: 0,
            total: 0,
        }
    }

    /// A pool over `stack` (one entry per page) filled with `pages`.
    pub fn new(stack: &'a mut [Option<&'a mut [u8]>]) -> Self {
        let top = stack.iter().filter(|p| p.is_some()).count();
        ContPool {
            total: top,
            free: stack,
            top,
        }
    }

    pub fn available(&self) -> usize {
        self.top
    }

    pub fn total(&self) -> usize {
        self.total
    }

    pub fn take(&mut self) -> Option<&'a mut [u8]> {
        if self.top == 0 {
            return None;
        }
        self.top -= 1;
        self.free[self.top].take()
    }

    /// Returns a page; its digits must be all zero again.
    pub fn give(&mut self, page: &'a mut [u8]) {
        debug_assert!(page.iter().all(|&d| d == 0));
        self.free[self.top] = Some(page);
        self.top += 1;
    }
}

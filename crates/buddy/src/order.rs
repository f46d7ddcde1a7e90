//! Block orders: a block of order `n` is `2^n` naturally aligned frames.

use core::fmt;

/// Largest order this crate can be configured for (arrays are sized by it).
pub const ORDER_LIMIT: u8 = 15;
/// Default largest order of a buddy block, as Linux's `MAX_PAGE_ORDER` (spec 01 §2):
/// `2^10` frames = 4 MiB.
pub const DEFAULT_MAX_ORDER: u8 = 10;
/// Orders above this are "costly" (spec 01 §2, `PAGE_ALLOC_COSTLY_ORDER`).
pub const COSTLY_ORDER: u8 = 3;

/// The order of a block: `2^order` frames. Always `<= ORDER_LIMIT`; a zone
/// further limits it to its configured maximum.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
#[repr(transparent)]
pub struct Order(u8);

impl Order {
    /// Order 0: a single frame.
    pub const ZERO: Order = Order(0);
    /// The default maximum order (10).
    pub const DEFAULT_MAX: Order = Order(DEFAULT_MAX_ORDER);
    /// The order of a 2 MiB huge page with 4 KiB frames.
    pub const HUGE_2M: Order = Order(9);

    /// `Some(order)` if `n <= ORDER_LIMIT`.
    #[inline]
    pub const fn new(n: u8) -> Option<Order> {
        if n <= ORDER_LIMIT {
            Some(Order(n))
        } else {
            None
        }
    }

    #[inline]
    pub(crate) const fn new_unchecked(n: u8) -> Order {
        debug_assert!(n <= ORDER_LIMIT);
        Order(n)
    }

    /// The raw order.
    #[inline]
    pub const fn get(self) -> u8 {
        self.0
    }

    /// Number of frames in a block of this order.
    #[inline]
    pub const fn pages(self) -> u64 {
        1 << self.0
    }

    /// Whether this order is costly (`> 3`, spec 01 §2).
    #[inline]
    pub const fn is_costly(self) -> bool {
        self.0 > COSTLY_ORDER
    }

    /// The smallest order whose block holds at least `pages` frames, if any.
    pub const fn for_pages(pages: u64) -> Option<Order> {
        if pages <= 1 {
            return Some(Order(0));
        }
        let o = 64 - (pages - 1).leading_zeros();
        if o <= ORDER_LIMIT as u32 {
            Some(Order(o as u8))
        } else {
            None
        }
    }
}

impl fmt::Debug for Order {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Order({})", self.0)
    }
}

impl fmt::Display for Order {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

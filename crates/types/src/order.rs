//! Block orders: a block of order `n` is `2^n` naturally aligned frames.

use core::fmt;

/// Largest order this crate can be configured for (arrays are sized by it).
pub const ORDER_LIMIT: u8 = 15;
// `new_truncated` masks with ORDER_LIMIT: every masked value must be valid.
const _: () = assert!((ORDER_LIMIT as u32 + 1).is_power_of_two());
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

    /// `Some(order)` if `n <= ORDER_LIMIT`. Orders above the default
    /// maximum (10) are real: a zone's maximum order is its configuration's
    /// (Linux's `CONFIG_ARCH_FORCE_MAX_ORDER`), up to [`ORDER_LIMIT`], and
    /// a zone refuses only the orders above its own maximum (in
    /// `pageframe`, `AllocError::OrderTooLarge`).
    #[inline]
    pub const fn new(n: u8) -> Option<Order> {
        if n <= ORDER_LIMIT {
            Some(Order(n))
        } else {
            None
        }
    }

    /// The order `n` for a caller that knows `n <= ORDER_LIMIT` (frame
    /// metadata, loop counters); larger values are masked into range rather
    /// than trusted, so this never produces an invalid order.
    #[inline]
    pub const fn new_truncated(n: u8) -> Order {
        debug_assert!(n <= ORDER_LIMIT);
        Order(n & ORDER_LIMIT)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn orders_are_bounded() {
        assert_eq!(Order::new(ORDER_LIMIT).map(Order::get), Some(15));
        assert_eq!(Order::new(16), None);
        assert_eq!(Order::new(255), None);
        assert_eq!(Order::for_pages(0), Some(Order::ZERO));
        assert_eq!(Order::for_pages(513), Some(Order::new_truncated(10)));
        assert_eq!(Order::for_pages(u64::MAX), None);
        assert_eq!(Order::new_truncated(ORDER_LIMIT).pages(), 1 << 15);
    }
}

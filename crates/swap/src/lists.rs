//! The device's cluster lists (spec 05 §3.2): free, nonfull[order],
//! frag[order], full and discard, as doubly linked lists of cluster indices.
//! They sit behind one lock that is taken only when a cluster changes list.

use crate::cluster::ClusterFlag;
use crate::slot::MAX_ORDERS;

pub(crate) const NIL: u32 = u32::MAX;

/// Which list a cluster is on.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) struct ListId(u8);

impl ListId {
    pub const OFF: ListId = ListId(u8::MAX);
    pub const FREE: ListId = ListId(0);
    pub const FULL: ListId = ListId(1);
    pub const DISCARD: ListId = ListId(2);
    pub const COUNT: usize = 3 + 2 * MAX_ORDERS;

    pub const fn nonfull(order: u8) -> ListId {
        ListId(3 + order)
    }

    pub const fn frag(order: u8) -> ListId {
        ListId(3 + MAX_ORDERS as u8 + order)
    }

    /// The list a cluster in state `flag` of `order` belongs on.
    pub const fn for_flag(flag: ClusterFlag, order: u8) -> ListId {
        match flag {
            ClusterFlag::None => ListId::OFF,
            ClusterFlag::Free => ListId::FREE,
            ClusterFlag::Nonfull => ListId::nonfull(order),
            ClusterFlag::Frag => ListId::frag(order),
            ClusterFlag::Full => ListId::FULL,
            ClusterFlag::Discard => ListId::DISCARD,
        }
    }

    fn index(self) -> usize {
        self.0 as usize
    }
}

/// Links of one cluster, owned by the list lock.
#[derive(Clone, Copy)]
pub(crate) struct Link {
    prev: u32,
    next: u32,
    list: ListId,
}

impl Link {
    pub const OFF: Link = Link {
        prev: NIL,
        next: NIL,
        list: ListId::OFF,
    };
}

#[derive(Clone, Copy)]
struct Head {
    first: u32,
    last: u32,
    len: u32,
}

const EMPTY: Head = Head {
    first: NIL,
    last: NIL,
    len: 0,
};

/// Everything the list lock protects.
pub(crate) struct Lists<'a> {
    links: &'a mut [Link],
    heads: [Head; ListId::COUNT],
    /// Clusters taken off the discard list whose discard is running.
    pub discarding: u32,
    /// Times the lock was taken (a plain counter: it is under the lock).
    pub acquisitions: u64,
}

impl<'a> Lists<'a> {
    pub fn new(links: &'a mut [Link]) -> Self {
        Lists {
            links,
            heads: [EMPTY; ListId::COUNT],
            discarding: 0,
            acquisitions: 0,
        }
    }

    pub fn len(&self, list: ListId) -> u32 {
        self.heads[list.index()].len
    }

    pub fn first(&self, list: ListId) -> Option<u32> {
        let f = self.heads[list.index()].first;
        (f != NIL).then_some(f)
    }

    pub fn next(&self, idx: u32) -> Option<u32> {
        let n = self.links[idx as usize].next;
        (n != NIL).then_some(n)
    }

    pub fn list_of(&self, idx: u32) -> ListId {
        self.links[idx as usize].list
    }

    pub fn unlink(&mut self, idx: u32) {
        let Link { prev, next, list } = self.links[idx as usize];
        if list == ListId::OFF {
            return;
        }
        let head = &mut self.heads[list.index()];
        if prev == NIL {
            head.first = next;
        } else {
            self.links[prev as usize].next = next;
        }
        if next == NIL {
            head.last = prev;
        } else {
            self.links[next as usize].prev = prev;
        }
        head.len -= 1;
        self.links[idx as usize] = Link::OFF;
    }

    /// Moves `idx` to the tail of `list` (or off every list).
    pub fn move_to(&mut self, idx: u32, list: ListId) {
        self.unlink(idx);
        if list == ListId::OFF {
            return;
        }
        let head = &mut self.heads[list.index()];
        let last = head.last;
        self.links[idx as usize] = Link {
            prev: last,
            next: NIL,
            list,
        };
        if last == NIL {
            head.first = idx;
        } else {
            self.links[last as usize].next = idx;
        }
        head.last = idx;
        head.len += 1;
    }

    /// Walks every list and checks links and lengths; returns false on the
    /// first inconsistency.
    pub fn check(&self) -> bool {
        let mut seen: u64 = 0;
        for l in 0..ListId::COUNT {
            let head = self.heads[l];
            let mut prev = NIL;
            let mut cur = head.first;
            let mut n = 0u32;
            while cur != NIL {
                let Some(link) = self.links.get(cur as usize) else {
                    return false;
                };
                if link.prev != prev || link.list.index() != l || n > self.links.len() as u32 {
                    return false;
                }
                n += 1;
                prev = cur;
                cur = link.next;
            }
            if prev != head.last || n != head.len {
                return false;
            }
            seen += n as u64;
        }
        let on_lists = self.links.iter().filter(|l| l.list != ListId::OFF).count() as u64;
        seen == on_lists
    }
}

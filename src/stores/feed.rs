//! The in-process [`ChangeFeed`]: a bounded tokio broadcast channel.
//!
//! A subscriber that falls more than [`CHANGE_FEED_CAPACITY`] changes behind loses the overflow; it is then
//! told that every list changed, which is always a correct (if redundant) thing to tell a client: a
//! list-changed notification only asks it to fetch the list again.

use crate::framework::ports::{ChangeFeed, ChangeSubscription, ListChanged};
use async_trait::async_trait;
use tokio::sync::broadcast;

/// Changes buffered per subscriber before the oldest are dropped.
pub const CHANGE_FEED_CAPACITY: usize = 64;

#[derive(Debug, Clone)]
pub struct MemoryChangeFeed {
    sender: broadcast::Sender<ListChanged>,
}

impl Default for MemoryChangeFeed {
    fn default() -> Self {
        MemoryChangeFeed { sender: broadcast::channel(CHANGE_FEED_CAPACITY).0 }
    }
}

impl MemoryChangeFeed {
    pub fn new() -> Self {
        Self::default()
    }

    /// How many subscriptions are open right now.
    pub fn subscriber_count(&self) -> usize {
        self.sender.receiver_count()
    }
}

impl ChangeFeed for MemoryChangeFeed {
    fn publish(&self, change: ListChanged) {
        // No subscriber is not an error: nobody is listening.
        let _ = self.sender.send(change);
    }

    fn subscribe(&self) -> Box<dyn ChangeSubscription> {
        Box::new(MemorySubscription { receiver: self.sender.subscribe(), missed: Vec::new() })
    }
}

struct MemorySubscription {
    receiver: broadcast::Receiver<ListChanged>,
    /// Changes owed after an overflow, delivered before anything newer.
    missed: Vec<ListChanged>,
}

#[async_trait]
impl ChangeSubscription for MemorySubscription {
    async fn next_change(&mut self) -> Option<ListChanged> {
        if let Some(change) = self.missed.pop() {
            return Some(change);
        }
        match self.receiver.recv().await {
            Ok(change) => Some(change),
            Err(broadcast::error::RecvError::Lagged(_)) => {
                self.missed = ListChanged::ALL.iter().rev().copied().collect();
                self.missed.pop()
            }
            Err(broadcast::error::RecvError::Closed) => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn subscribers_see_changes_published_after_they_subscribe() {
        let feed = MemoryChangeFeed::new();
        feed.publish(ListChanged::Prompts);
        let mut first = feed.subscribe();
        let mut second = feed.subscribe();
        assert_eq!(feed.subscriber_count(), 2);
        feed.publish(ListChanged::Tools);
        assert_eq!(first.next_change().await, Some(ListChanged::Tools));
        assert_eq!(second.next_change().await, Some(ListChanged::Tools));
        drop(first);
        assert_eq!(feed.subscriber_count(), 1);
    }

    #[tokio::test]
    async fn an_overflowed_subscriber_is_told_everything_changed() {
        let feed = MemoryChangeFeed::new();
        let mut slow = feed.subscribe();
        for _ in 0..CHANGE_FEED_CAPACITY + 5 {
            feed.publish(ListChanged::Tools);
        }
        let mut seen = Vec::new();
        for _ in 0..3 {
            seen.push(slow.next_change().await.unwrap());
        }
        assert_eq!(seen, ListChanged::ALL);
    }

    #[tokio::test]
    async fn a_dropped_feed_ends_subscriptions() {
        let feed = MemoryChangeFeed::new();
        let mut subscription = feed.subscribe();
        drop(feed);
        assert_eq!(subscription.next_change().await, None);
    }
}

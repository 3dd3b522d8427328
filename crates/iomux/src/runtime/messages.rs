//! Messages to a loop from other loops or any thread: a queue per loop,
//! delivered through the loop's waker to [`Handler::on_message`](super::Handler::on_message).

use crate::error::{Error, Result};
use crate::poller::Waker;
use std::collections::VecDeque;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};

/// A loop's queue of messages. The waker lives under the same lock as the
/// queue, so a message sent before the loop set up its waker is found by
/// the loop's first look, and one sent after wakes it.
pub(crate) struct Inbox<M> {
    state: Mutex<InboxState<M>>,
}

struct InboxState<M> {
    queue: VecDeque<M>,
    waker: Option<Waker>,
    /// The loop has ended: sends fail, handing the message back.
    closed: bool,
}

impl<M> Inbox<M> {
    pub(crate) fn new() -> Arc<Inbox<M>> {
        Arc::new(Inbox { state: Mutex::new(InboxState { queue: VecDeque::new(), waker: None, closed: false }) })
    }

    /// The state, even after a panic elsewhere held the lock: the queue
    /// is consistent after every operation on it.
    fn lock(&self) -> MutexGuard<'_, InboxState<M>> {
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The loop's waker is ready: later sends wake the loop.
    pub(crate) fn set_waker(&self, waker: Waker) {
        self.lock().waker = Some(waker);
    }

    /// Every message queued so far, oldest first (those sent while the
    /// loop handles them wait for the next wake).
    pub(crate) fn take_all(&self) -> VecDeque<M> {
        std::mem::take(&mut self.lock().queue)
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.lock().queue.is_empty()
    }

    /// The loop ended: messages still queued are dropped, later sends fail.
    pub(crate) fn close(&self) {
        let mut state = self.lock();
        state.closed = true;
        state.waker = None;
        state.queue.clear();
    }
}

/// Sends messages to one loop, from any thread (another loop's handler,
/// a worker, `main`); the loop hands each to
/// [`Handler::on_message`](super::Handler::on_message), in the order sent.
/// Cheap to clone. Made by [`Runtime::senders`](super::Runtime::senders).
///
/// ```
/// use iomux::runtime::{Config, Runtime};
///
/// let runtime = Runtime::new(Config::default(), 2)?;
/// let senders = runtime.senders::<String>()?;
/// assert_eq!(senders.iter().map(|s| s.loop_index()).collect::<Vec<_>>(), [0, 1]);
/// // Queued until loop 1 runs (a handler with `type Message = String` gets it).
/// senders[1].send("hello".to_string()).expect("loop 1 has not ended");
/// # Ok::<(), iomux::Error>(())
/// ```
pub struct Sender<M> {
    inbox: Arc<Inbox<M>>,
    loop_index: usize,
}

impl<M> Sender<M> {
    pub(crate) fn new(inbox: Arc<Inbox<M>>, loop_index: usize) -> Sender<M> {
        Sender { inbox, loop_index }
    }

    /// Queues `msg` for the loop and wakes it if it was not already due to
    /// wake. Never blocks on the loop (only on the queue's lock, held
    /// briefly). Fails with [`Error::LoopEnded`] once the loop has ended
    /// (`msg` is dropped); a message queued just before it ended is
    /// dropped unhandled.
    pub fn send(&self, msg: M) -> Result<()> {
        let waker = {
            let mut state = self.inbox.lock();
            if state.closed {
                return Err(Error::LoopEnded { loop_index: self.loop_index });
            }
            state.queue.push_back(msg);
            // A non-empty queue already has a wake on its way.
            if state.queue.len() == 1 {
                state.waker.clone()
            } else {
                None
            }
        };
        if let Some(waker) = waker {
            // Only an eventfd at its maximum count fails, and then a wake
            // is pending anyway.
            let _ = waker.wake();
        }
        Ok(())
    }

    /// The index of the loop this sends to (as `make_handler` received it).
    pub fn loop_index(&self) -> usize {
        self.loop_index
    }
}

impl<M> Clone for Sender<M> {
    fn clone(&self) -> Self {
        Sender { inbox: self.inbox.clone(), loop_index: self.loop_index }
    }
}

impl<M> fmt::Debug for Sender<M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Sender").field("loop_index", &self.loop_index).finish_non_exhaustive()
    }
}

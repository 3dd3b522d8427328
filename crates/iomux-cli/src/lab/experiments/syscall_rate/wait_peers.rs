//! E1's wait peers, measured beside the library: mio and smol-rs/polling,
//! each with the same fds registered and the same empty wait.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::time::Duration;

pub struct MioPeer {
    poll: mio::Poll,
    events: mio::Events,
}

impl MioPeer {
    pub fn new(fds: &[OwnedFd]) -> io::Result<MioPeer> {
        let poll = mio::Poll::new()?;
        for (i, fd) in fds.iter().enumerate() {
            let raw = fd.as_raw_fd();
            poll.registry().register(&mut mio::unix::SourceFd(&raw), mio::Token(i), mio::Interest::READABLE)?;
        }
        Ok(MioPeer { poll, events: mio::Events::with_capacity(1) })
    }

    #[inline]
    pub fn wait_zero(&mut self) -> io::Result<usize> {
        self.poll.poll(&mut self.events, Some(Duration::ZERO))?;
        Ok(self.events.iter().count())
    }
}

/// polling's registrations must be deleted before their fds close; the
/// owner calls [`PollingPeer::delete_all`] first.
pub struct PollingPeer {
    poller: polling::Poller,
    events: polling::Events,
}

impl PollingPeer {
    pub fn new(fds: &[OwnedFd]) -> io::Result<PollingPeer> {
        let poller = polling::Poller::new()?;
        for (i, fd) in fds.iter().enumerate() {
            // SAFETY: polling requires the source to stay open until it is
            // deleted; the owner of `fds` calls delete_all before dropping them.
            unsafe { poller.add(fd.as_raw_fd(), polling::Event::readable(i))? };
        }
        let events = polling::Events::with_capacity(std::num::NonZeroUsize::MIN);
        Ok(PollingPeer { poller, events })
    }

    #[inline]
    pub fn wait_zero(&mut self) -> io::Result<usize> {
        self.events.clear();
        self.poller.wait(&mut self.events, Some(Duration::ZERO))
    }

    pub fn delete_all(&self, fds: &[OwnedFd]) {
        for fd in fds {
            // A failed delete leaves nothing to undo: the poller closes next.
            let _ = self.poller.delete(fd);
        }
    }
}

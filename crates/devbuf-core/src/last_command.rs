//! [`LastCommand`]: what an in-order queue whose runtime returns an event per command (SYCL,
//! OpenCL) waits on, shared so that every such backend gets its ordering right once.

use std::sync::Arc;

use parking_lot::Mutex;

use crate::Result;

/// The event of the last command enqueued on an in-order queue, until a wait sees it complete.
/// The queue runs commands in order, so that event completes after everything enqueued before it.
#[derive(Debug)]
pub struct LastCommand<E> {
    last: Mutex<Option<Arc<E>>>,
}

impl<E> Default for LastCommand<E> {
    fn default() -> Self {
        LastCommand {
            last: Mutex::new(None),
        }
    }
}

impl<E> LastCommand<E> {
    /// Enqueues a command with `enqueue` (which returns its event) and records it as the last.
    /// The lock is held across the enqueue: were it taken after, two threads could record their
    /// events in the opposite order to the queue's, and a wait on the last event would return
    /// while the other command still ran (a free after that wait corrupted the heap).
    pub fn submit(&self, enqueue: impl FnOnce() -> Result<E>) -> Result<()> {
        let mut last = self.last.lock();
        *last = Some(Arc::new(enqueue()?));
        Ok(())
    }

    /// The last event, while it has not been seen complete.
    pub fn get(&self) -> Option<Arc<E>> {
        self.last.lock().clone()
    }

    /// Whether no command is known to be pending.
    pub fn is_idle(&self) -> bool {
        self.last.lock().is_none()
    }

    /// Blocks with `wait` on the last event, then forgets it, unless another thread enqueued
    /// meanwhile (its command may still run).
    pub fn wait(&self, wait: impl FnOnce(&Arc<E>) -> Result<()>) -> Result<()> {
        let Some(last) = self.get() else {
            return Ok(());
        };
        wait(&last)?;
        let mut current = self.last.lock();
        if current
            .as_ref()
            .is_some_and(|event| Arc::ptr_eq(event, &last))
        {
            *current = None;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Barrier;
    use std::time::Duration;

    #[test]
    fn a_command_enqueued_later_is_never_replaced_by_an_earlier_one() {
        let last = LastCommand::<u32>::default();
        let first_is_enqueuing = Barrier::new(2);
        std::thread::scope(|scope| {
            scope.spawn(|| {
                last.submit(|| {
                    first_is_enqueuing.wait();
                    // The runtime is slow to return the first command's event: the second
                    // thread tries to enqueue meanwhile.
                    std::thread::sleep(Duration::from_millis(50));
                    Ok(1)
                })
                .unwrap();
            });
            first_is_enqueuing.wait();
            last.submit(|| Ok(2)).unwrap();
        });
        assert_eq!(last.get().as_deref(), Some(&2));
    }

    #[test]
    fn a_wait_forgets_only_the_event_it_saw() {
        let last = LastCommand::<u32>::default();
        last.submit(|| Ok(1)).unwrap();
        // A command is enqueued while the wait for 1 blocks (no lock is held): 2 stays pending.
        last.wait(|_| last.submit(|| Ok(2))).unwrap();
        assert_eq!(last.get().as_deref(), Some(&2));
        last.wait(|_| Ok(())).unwrap();
        assert!(last.is_idle());
    }

    #[test]
    fn a_refused_command_leaves_the_last_event_as_it_was() {
        let last = LastCommand::<u32>::default();
        last.submit(|| Ok(1)).unwrap();
        assert!(
            last.submit(|| Err(crate::Error::invalid("test", "refused")))
                .is_err()
        );
        assert_eq!(last.get().as_deref(), Some(&1));
    }
}

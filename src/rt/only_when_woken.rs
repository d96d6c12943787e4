//! A future polled only on its first poll and after its own waker fired, however often the
//! task holding it is woken for other reasons: a connection's task wakes once or twice per
//! request for the connection, and its shutdown signal and idle timer need polling only when
//! they fired.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll, Wake, Waker};

use futures_util::task::AtomicWaker;

/// Polls `inner` on the first poll, after `inner`'s waker fired, and after `change`; any
/// other poll returns `Pending` after one load.
pub(crate) struct OnlyWhenWoken<F> {
    inner: F,
    signal: Arc<WakeSignal>,
    /// The waker the inner future is polled with: it sets the flag, then wakes the task.
    waker: Waker,
    /// The task's waker as last given to `signal`.
    registered: Option<Waker>,
}

struct WakeSignal {
    woken: AtomicBool,
    task: AtomicWaker,
}

impl Wake for WakeSignal {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.woken.store(true, Ordering::Release);
        self.task.wake();
    }
}

impl<F> OnlyWhenWoken<F> {
    pub(crate) fn new(inner: F) -> OnlyWhenWoken<F> {
        let signal = Arc::new(WakeSignal {
            woken: AtomicBool::new(true),
            task: AtomicWaker::new(),
        });
        let waker = Waker::from(signal.clone());
        OnlyWhenWoken {
            inner,
            signal,
            waker,
            registered: None,
        }
    }

    /// The wrapped future, to change; it is polled on the next poll, to see the change.
    pub(crate) fn change(&mut self) -> &mut F {
        self.signal.woken.store(true, Ordering::Release);
        &mut self.inner
    }
}

impl<F: Future + Unpin> Future for OnlyWhenWoken<F> {
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = &mut *self;
        // The usual case, nothing fired and the same task: the signal still holds the task's
        // waker (it gives it away only when it fires, after setting the flag), so this costs
        // one plain load, no atomic read-modify-write.
        let same_task = this
            .registered
            .as_ref()
            .is_some_and(|registered| registered.will_wake(cx.waker()));
        if same_task && !this.signal.woken.load(Ordering::Acquire) {
            return Poll::Pending;
        }
        // Registered again before the flag is cleared: a wake in between is not lost.
        this.signal.task.register(cx.waker());
        if !same_task {
            this.registered = Some(cx.waker().clone());
        }
        if !this.signal.woken.swap(false, Ordering::AcqRel) {
            return Poll::Pending;
        }
        Pin::new(&mut this.inner).poll(&mut Context::from_waker(&this.waker))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    /// What a `Counted` future reports: how often it was polled, and a way to make it ready
    /// and wake whoever polled it last.
    #[derive(Default)]
    struct Probe {
        polls: AtomicUsize,
        ready: AtomicBool,
        waker: std::sync::Mutex<Option<Waker>>,
    }

    impl Probe {
        fn polls(&self) -> usize {
            self.polls.load(Ordering::Relaxed)
        }

        /// Fires the future's last waker, ready or not.
        fn fire(&self, ready: bool) {
            self.ready.store(ready, Ordering::Relaxed);
            let waker = self.waker.lock().unwrap().take();
            waker.expect("the future kept a waker").wake();
        }
    }

    struct Counted(Arc<Probe>);

    impl Future for Counted {
        type Output = ();
        fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
            self.0.polls.fetch_add(1, Ordering::Relaxed);
            *self.0.waker.lock().unwrap() = Some(cx.waker().clone());
            if self.0.ready.load(Ordering::Relaxed) {
                Poll::Ready(())
            } else {
                Poll::Pending
            }
        }
    }

    #[derive(Default)]
    struct WakeCount(AtomicUsize);

    impl WakeCount {
        fn count(&self) -> usize {
            self.0.load(Ordering::Relaxed)
        }
    }

    impl Wake for WakeCount {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }

    #[test]
    fn only_when_woken_polls_the_inner_future_after_its_own_wake_or_a_change() {
        let probe = Arc::new(Probe::default());
        let mut wrapped = OnlyWhenWoken::new(Counted(probe.clone()));
        let task = Arc::new(WakeCount::default());
        let task_waker = Waker::from(task.clone());
        let mut cx = Context::from_waker(&task_waker);
        let mut poll = |cx: &mut Context<'_>| Pin::new(&mut wrapped).poll(cx);

        assert!(poll(&mut cx).is_pending());
        assert_eq!(probe.polls(), 1, "the first poll reaches the inner future");
        for _ in 0..5 {
            assert!(poll(&mut cx).is_pending());
        }
        assert_eq!(
            probe.polls(),
            1,
            "polls for other wakes stop at the wrapper"
        );

        probe.fire(true);
        assert_eq!(task.count(), 1, "the inner wake wakes the task");
        assert!(poll(&mut cx).is_ready());
        assert_eq!(probe.polls(), 2);

        probe.ready.store(false, Ordering::Relaxed);
        assert!(poll(&mut cx).is_pending());
        assert_eq!(probe.polls(), 2);
        wrapped.change();
        let mut poll = |cx: &mut Context<'_>| Pin::new(&mut wrapped).poll(cx);
        assert!(poll(&mut cx).is_pending());
        assert_eq!(probe.polls(), 3, "a changed future is polled again");

        // A second fire on the same task: the waker the first fire used up was given again.
        probe.fire(false);
        assert_eq!(task.count(), 2, "the task is woken again");
        assert!(poll(&mut cx).is_pending());
        assert_eq!(probe.polls(), 4);

        // The future moves to another task: that task is the one woken from then on.
        let other_task = Arc::new(WakeCount::default());
        let other_waker = Waker::from(other_task.clone());
        let mut other_cx = Context::from_waker(&other_waker);
        assert!(poll(&mut other_cx).is_pending());
        probe.fire(true);
        assert_eq!(other_task.count(), 1, "the new task is woken");
        assert_eq!(task.count(), 2, "the old one is not");
        assert!(poll(&mut other_cx).is_ready());
    }
}

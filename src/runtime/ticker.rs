//! A clock of its own for the waits that must notice Ctrl-C.
//!
//! Tokio's timers are driven by the runtime's threads; when every one of them is busy in
//! blocking code (a Python UDF sleeping or computing, on the embedded cluster), no timer
//! fires, and a wait chopped into slices by `tokio::time::timeout` stops checking for Python's
//! exceptions until the query ends. This thread ticks regardless.
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

const TICK: Duration = Duration::from_millis(50);

struct Ticker {
    ticks: AtomicU64,
    waiting: Mutex<Vec<Waker>>,
}

fn ticker() -> &'static Ticker {
    static TICKER: OnceLock<&'static Ticker> = OnceLock::new();
    TICKER.get_or_init(|| {
        let ticker: &'static Ticker = Box::leak(Box::new(Ticker {
            ticks: AtomicU64::new(0),
            waiting: Mutex::default(),
        }));
        std::thread::Builder::new()
            .name("dfd-py-ticker".into())
            .spawn(move || loop {
                std::thread::sleep(TICK);
                ticker.ticks.fetch_add(1, Ordering::Release);
                let woken = std::mem::take(&mut *ticker.waiting.lock().expect("poisoned"));
                woken.into_iter().for_each(Waker::wake);
            })
            .expect("failed to start the ticker thread");
        ticker
    })
}

/// Ready after at least `after` (rounded up to whole ticks), whatever the runtime does.
pub struct Elapsed {
    until: u64,
}

pub fn elapsed(after: Duration) -> Elapsed {
    let t = ticker();
    let ticks = (after.as_millis() / TICK.as_millis()).max(1) as u64;
    // One more: the current tick may be about to end.
    Elapsed {
        until: t.ticks.load(Ordering::Acquire) + ticks + 1,
    }
}

impl Future for Elapsed {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let t = ticker();
        if t.ticks.load(Ordering::Acquire) >= self.until {
            return Poll::Ready(());
        }
        t.waiting.lock().expect("poisoned").push(cx.waker().clone());
        // A tick between the check and the registration would be missed: look again.
        match t.ticks.load(Ordering::Acquire) >= self.until {
            true => Poll::Ready(()),
            false => Poll::Pending,
        }
    }
}

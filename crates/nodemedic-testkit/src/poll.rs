use std::time::{Duration, Instant};

/// How long to wait between two tries: short against a test's deadline, long enough not to
/// keep a core busy.
const PAUSE: Duration = Duration::from_millis(50);

/// Calls `f` until it returns `Ok`, pausing between tries, and returns that value. Once
/// `deadline` has passed, panics with `what` (the condition waited for) and the last `Err`
/// (why it was not true yet).
pub fn poll_until<T>(deadline: Instant, what: &str, mut f: impl FnMut() -> Result<T, String>) -> T {
    let start = Instant::now();
    loop {
        let last = match f() {
            Ok(v) => return v,
            Err(e) => e,
        };
        if Instant::now() >= deadline {
            panic!(
                "timed out after {:.1}s waiting for {what}; last: {last}",
                start.elapsed().as_secs_f64()
            );
        }
        std::thread::sleep(PAUSE.min(deadline.saturating_duration_since(Instant::now())));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn returns_the_first_ok() {
        let mut n = 0;
        let got = poll_until(Instant::now() + Duration::from_secs(5), "n = 3", || {
            n += 1;
            if n == 3 {
                Ok(n)
            } else {
                Err(format!("n = {n}"))
            }
        });
        assert_eq!(got, 3);
    }

    #[test]
    fn fails_at_the_deadline_with_what_and_the_last_reason() {
        let start = Instant::now();
        let caught = std::panic::catch_unwind(|| {
            poll_until::<()>(start + Duration::from_millis(200), "the moon", || {
                Err("still the sun".into())
            })
        });
        let message = caught.expect_err("polled past its deadline");
        let message = message
            .downcast_ref::<String>()
            .expect("a formatted message");
        assert!(
            message.contains("the moon") && message.contains("still the sun"),
            "{message}"
        );
        let waited = start.elapsed();
        assert!(
            waited >= Duration::from_millis(200) && waited < Duration::from_secs(5),
            "{waited:?}"
        );
    }
}

//! Random delays, so that many waiters and a fleet's cron entries do not
//! act in lock-step.

use std::time::Duration;

/// A uniformly random duration in `[low, high)`.
pub fn jitter(low: Duration, high: Duration) -> Duration {
    let span = u64::try_from((high - low).as_micros())
        .unwrap_or(u64::MAX)
        .max(1);
    let random = uuid::Uuid::new_v4().as_u64_pair().0;
    low + Duration::from_micros(random % span)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stays_in_its_range() {
        let (low, high) = (Duration::from_millis(50), Duration::from_millis(250));
        for _ in 0..100 {
            let d = jitter(low, high);
            assert!(low <= d && d < high, "{d:?}");
        }
        assert_eq!(jitter(low, low), low);
    }
}

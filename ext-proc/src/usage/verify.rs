//! Who a bearer token is, as kube-apiserver derives it: the front door does
//! not authenticate tokens (the apiserver does), so the skew log's entry
//! carries the token and mvp-ext-proc asks the cluster once per distinct
//! token (`TokenReview`, with the `--authentication-kubeconfig` credentials
//! the operator endpoints use), caching the answer for [`CACHE_TTL`]. An
//! entry whose token is under review waits for it; one that cannot be
//! reviewed (no cluster to ask, [`MAX_IN_FLIGHT`] reviews already running,
//! a failed review) is counted at once under the claim the filter read,
//! marked unverified.
//!
//! Bounded whatever clients send: at most [`MAX_IN_FLIGHT`] reviews at a
//! time (a flood of made-up tokens costs the cluster no more), at most
//! [`MAX_WAITING`] entries waiting on each, at most [`MAX_CACHED`] answers
//! (past it the least recently used goes), keyed by the token's SHA-256 — the
//! token itself is held only while its review runs, never logged or saved.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use sha2::{Digest, Sha256};
use tokio::sync::Semaphore;

use super::{Usage, Use, Who};
use crate::metrics::Metrics;

/// How long an answer is reused (kube's token webhook cache keeps one 2
/// minutes; a ServiceAccount's identity does not change under its token).
pub const CACHE_TTL: Duration = Duration::from_secs(300);
/// Answers kept at most.
pub const MAX_CACHED: usize = 4096;
/// Reviews running at once at most.
pub const MAX_IN_FLIGHT: usize = 4;
/// Entries waiting on one review at most (more are counted unverified).
pub const MAX_WAITING: usize = 256;

/// A bearer token; its `Debug` does not show it.
#[derive(Clone, PartialEq, Eq)]
pub struct Bearer(String);

impl Bearer {
    /// The token of an `Authorization: Bearer <token>` header value.
    pub fn from_header(value: &str) -> Option<Bearer> {
        crate::bearer_token::bearer_token(value).map(|t| Bearer(t.to_string()))
    }

    fn digest(&self) -> [u8; 32] {
        Sha256::digest(self.0.as_bytes()).into()
    }
}

impl std::fmt::Debug for Bearer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Bearer(…)")
    }
}

/// The cluster's answer for a token.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Review {
    User { user: String, groups: Vec<String> },
    Rejected,
}

/// Who reviews tokens: the cluster ([`KubeReviewer`]), or a test's fake.
pub trait Reviewer: Send + Sync {
    /// The answer, or why none could be had.
    fn review(&self, token: &str) -> BoxFuture<'static, Result<Review, String>>;
}

/// TokenReview against the cluster of `--authentication-kubeconfig`.
pub struct KubeReviewer(pub kube::Client);

impl Reviewer for KubeReviewer {
    fn review(&self, token: &str) -> BoxFuture<'static, Result<Review, String>> {
        let client = self.0.clone();
        let token = token.to_string();
        Box::pin(async move {
            Ok(match crate::operate::delegated::review_token(client, &token).await? {
                Some(u) => Review::User { user: u.username.unwrap_or_default(), groups: u.groups.unwrap_or_default() },
                None => Review::Rejected,
            })
        })
    }
}

/// The cluster's answers by token digest, at most [`MAX_CACHED`]: past it
/// the expired go, then the least recently used — so a flood of junk
/// tokens evicts junk, not the answers real clients keep asking for
/// (clearing the whole cache would make every real client's token be
/// reviewed again, the cluster paying for the flood).
#[derive(Default)]
struct Answers {
    by_token: HashMap<[u8; 32], Cached>,
    clock: u64,
}

struct Cached {
    review: Review,
    at: Instant,
    used: u64,
}

impl Answers {
    /// A fresh answer, marked used.
    fn get(&mut self, key: &[u8; 32]) -> Option<Review> {
        self.clock += 1;
        let c = self.by_token.get_mut(key).filter(|c| c.at.elapsed() < CACHE_TTL)?;
        c.used = self.clock;
        Some(c.review.clone())
    }

    fn insert(&mut self, key: [u8; 32], review: Review) {
        self.clock += 1;
        if self.by_token.len() >= MAX_CACHED && !self.by_token.contains_key(&key) {
            self.by_token.retain(|_, c| c.at.elapsed() < CACHE_TTL);
            if self.by_token.len() >= MAX_CACHED
                && let Some(oldest) = self.by_token.iter().min_by_key(|(_, c)| c.used).map(|(k, _)| *k)
            {
                self.by_token.remove(&oldest);
            }
        }
        self.by_token.insert(key, Cached { review, at: Instant::now(), used: self.clock });
    }
}

#[derive(Default)]
struct State {
    answers: Answers,
    /// Entries waiting on a review running now.
    waiting: HashMap<[u8; 32], Vec<Use>>,
}

/// Counts the skew log's entries, each under the identity its token's
/// review names.
pub struct Verifier {
    usage: Arc<Usage>,
    metrics: Arc<Metrics>,
    reviewer: Option<Arc<dyn Reviewer>>,
    state: Mutex<State>,
    permits: Arc<Semaphore>,
}

/// Who the entry's sender is, given its token's review: the reviewed user,
/// or the claim it made (rejected).
fn reviewed(review: &Review, claimed: Who) -> Who {
    match (review, claimed) {
        (Review::User { user, groups }, _) => Who::Token { user: user.clone(), groups: groups.clone() },
        (Review::Rejected, Who::TokenClaim { subject }) => Who::RejectedToken { subject },
        (Review::Rejected, _) => Who::RejectedToken { subject: String::new() },
    }
}

impl Verifier {
    /// `reviewer`: `None` when no cluster is configured to ask (token
    /// clients then show their unverified claims).
    pub fn new(usage: Arc<Usage>, metrics: Arc<Metrics>, reviewer: Option<Arc<dyn Reviewer>>) -> Arc<Verifier> {
        Arc::new(Verifier { usage, metrics, reviewer, state: Mutex::default(), permits: Arc::new(Semaphore::new(MAX_IN_FLIGHT)) })
    }

    fn record(&self, u: Use) {
        if let Some(api) = self.usage.record(u) {
            self.metrics.skewed_request(&api);
        }
    }

    /// Counts `u`: at once when its sender is known without a review (a
    /// client certificate's user — the identity the door forwards and the
    /// apiserver takes first — or no token), or its token's answer is
    /// cached; once its token's review ends otherwise.
    pub fn count(self: &Arc<Self>, mut u: Use) {
        let token = u.token.take();
        let (Some(token), Some(reviewer)) = (token, self.reviewer.as_ref()) else { return self.record(u) };
        if matches!(u.who, Who::Certificate { .. }) {
            return self.record(u);
        }
        let key = token.digest();
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(review) = state.answers.get(&key) {
            u.who = reviewed(&review, u.who);
            drop(state);
            return self.record(u);
        }
        if let Some(waiting) = state.waiting.get_mut(&key) {
            if waiting.len() < MAX_WAITING {
                waiting.push(u);
                return;
            }
            drop(state);
            return self.record(u);
        }
        let Ok(permit) = self.permits.clone().try_acquire_owned() else {
            drop(state);
            self.metrics.skew_token_review("skipped");
            return self.record(u);
        };
        state.waiting.insert(key, vec![u]);
        drop(state);
        let this = self.clone();
        let review = reviewer.review(&token.0);
        drop(token);
        tokio::spawn(async move {
            let answer = review.await;
            drop(permit);
            let mut state = this.state.lock().unwrap_or_else(PoisonError::into_inner);
            let waiting = state.waiting.remove(&key).unwrap_or_default();
            match &answer {
                Ok(review) => state.answers.insert(key, review.clone()),
                Err(why) => tracing::debug!(%why, "a skewed resource's client's token could not be reviewed: counted under its claim"),
            }
            drop(state);
            this.metrics.skew_token_review(match &answer {
                Ok(Review::User { .. }) => "reviewed",
                Ok(Review::Rejected) => "rejected",
                Err(_) => "failed",
            });
            for mut u in waiting {
                if let Ok(review) = &answer {
                    u.who = reviewed(review, u.who);
                }
                this.record(u);
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::SystemTime;

    use super::*;

    /// Names `sa-<token>` for tokens starting `good`, rejects the others,
    /// after `delay`; counts its reviews.
    struct Fake {
        reviews: Arc<AtomicUsize>,
        delay: Duration,
    }

    impl Reviewer for Fake {
        fn review(&self, token: &str) -> BoxFuture<'static, Result<Review, String>> {
            self.reviews.fetch_add(1, Ordering::SeqCst);
            let (token, delay) = (token.to_string(), self.delay);
            Box::pin(async move {
                tokio::time::sleep(delay).await;
                Ok(if token.starts_with("good") { Review::User { user: format!("sa-{token}"), groups: vec!["system:serviceaccounts".into()] } } else { Review::Rejected })
            })
        }
    }

    fn entry(token: Option<&str>, who: Who) -> Use {
        Use {
            api: "coordination.k8s.io/v1beta1/leasecandidates".into(),
            who,
            user_agent: "ua".into(),
            source: "10.0.0.1".into(),
            answered_by: None,
            at: SystemTime::now(),
            token: token.and_then(|t| Bearer::from_header(&format!("Bearer {t}"))),
        }
    }

    fn clients(u: &Usage) -> Vec<(String, u64)> {
        let api = u.of("coordination.k8s.io/v1beta1/leasecandidates", SystemTime::now(), Duration::from_secs(3600)).unwrap_or_default();
        let mut rows: Vec<_> = api.clients.iter().map(|c| (c.who.to_string(), c.count)).collect();
        rows.sort();
        rows
    }

    fn verifier(delay: Duration) -> (Arc<Verifier>, Arc<Usage>, Arc<AtomicUsize>) {
        let usage = Arc::new(Usage::default());
        let reviews = Arc::new(AtomicUsize::new(0));
        let v = Verifier::new(usage.clone(), Metrics::new(), Some(Arc::new(Fake { reviews: reviews.clone(), delay })));
        (v, usage, reviews)
    }

    async fn settled(usage: &Usage, total: u64) {
        let counted = || usage.of("coordination.k8s.io/v1beta1/leasecandidates", SystemTime::now(), Duration::from_secs(3600)).map_or(0, |a| a.others + a.clients.iter().map(|c| c.count).sum::<u64>());
        tokio::time::timeout(Duration::from_secs(10), async {
            while counted() < total {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
        .await
        .unwrap_or_else(|_| panic!("{} of {total} entries counted", counted()));
    }

    /// One review per distinct token, however many requests carried it;
    /// the reviewed user replaces the claim, a rejected token is marked.
    #[tokio::test]
    async fn one_review_per_token_and_the_reviewed_user_counted() {
        let (v, usage, reviews) = verifier(Duration::from_millis(50));
        let claim = || Who::TokenClaim { subject: "system:serviceaccount:kube-system:admin".into() };
        for _ in 0..5 {
            v.count(entry(Some("good-1"), claim()));
            v.count(entry(Some("forged"), claim()));
        }
        v.count(entry(Some("opaque"), Who::Unidentified));
        // A client certificate's user is what the door forwards: no review.
        v.count(entry(Some("good-2"), Who::Certificate { user: "alice".into(), groups: vec![] }));
        settled(&usage, 12).await;
        // Later requests with a reviewed token: from the cache.
        v.count(entry(Some("good-1"), claim()));
        settled(&usage, 13).await;
        assert_eq!(reviews.load(Ordering::SeqCst), 3, "good-1, forged, opaque");
        assert_eq!(
            clients(&usage),
            [
                ("(token rejected by the cluster)".to_string(), 1),
                ("alice".into(), 1),
                ("sa-good-1 (token; groups system:serviceaccounts)".into(), 6),
                ("system:serviceaccount:kube-system:admin (token claim, rejected by the cluster)".into(), 5),
            ]
        );
    }

    /// A flood of distinct tokens: at most MAX_IN_FLIGHT reviews at once;
    /// the rest counted at once under their claims, none lost.
    #[tokio::test]
    async fn a_flood_of_tokens_costs_the_cluster_at_most_the_reviews_in_flight() {
        let (v, usage, reviews) = verifier(Duration::from_secs(1));
        for i in 0..1000 {
            v.count(entry(Some(&format!("good-{i}")), Who::TokenClaim { subject: format!("claim-{i}") }));
        }
        assert_eq!(reviews.load(Ordering::SeqCst), MAX_IN_FLIGHT);
        settled(&usage, 1000).await;
        assert_eq!(reviews.load(Ordering::SeqCst), MAX_IN_FLIGHT, "every request counted, no more reviews");
        // The reviews done, the next token is reviewed again.
        v.count(entry(Some("good-next"), Who::TokenClaim { subject: "next".into() }));
        settled(&usage, 1001).await;
        assert_eq!(reviews.load(Ordering::SeqCst), MAX_IN_FLIGHT + 1);
    }

    /// Past the cache's bound a flood of junk tokens evicts junk: the
    /// answer a real client keeps using stays (issue 64 item 9).
    #[test]
    fn a_flood_of_tokens_evicts_the_least_recently_used_answer() {
        let mut a = Answers::default();
        let key = |i: usize| Bearer(format!("t-{i}")).digest();
        let real = Bearer("real".into()).digest();
        a.insert(real, Review::User { user: "system:serviceaccount:ns:real".into(), groups: vec![] });
        for i in 0..3 * MAX_CACHED {
            a.insert(key(i), Review::Rejected);
            if i % 100 == 0 {
                assert!(a.get(&real).is_some(), "evicted after {i} junk tokens");
            }
        }
        assert!(a.by_token.len() <= MAX_CACHED);
        assert!(a.get(&real).is_some());
        assert!(a.get(&key(0)).is_none(), "the oldest junk went");
        assert!(a.get(&key(3 * MAX_CACHED - 1)).is_some());
    }

    /// No cluster to ask: the claim as the filter read it.
    #[tokio::test]
    async fn without_a_cluster_the_claim_is_counted_unverified() {
        let usage = Arc::new(Usage::default());
        let v = Verifier::new(usage.clone(), Metrics::new(), None);
        v.count(entry(Some("good-1"), Who::TokenClaim { subject: "ci".into() }));
        assert_eq!(clients(&usage), [("ci (token claim, unverified)".to_string(), 1)]);
    }

    /// `mvp_skewed_api_requests` has a series per API as counted: labels
    /// that share their first bytes up to the cut are one API, one series;
    /// a flood of new APIs stops where the counts stop.
    #[test]
    fn the_metrics_series_are_bounded_as_the_counts_are() {
        let usage = Arc::new(Usage::default());
        let metrics = Metrics::new();
        let v = Verifier::new(usage.clone(), metrics.clone(), None);
        let series = || metrics.encode().lines().filter(|l| l.starts_with("mvp_skewed_api_requests_total{")).count();
        let long = "g.example/v1/".to_string() + &"r".repeat(crate::usage::MAX_TEXT);
        for tail in ["a", "b", "c"] {
            v.count(Use { api: format!("{long}{tail}"), ..entry(None, Who::Unidentified) });
        }
        assert_eq!(series(), 1);
        for i in 0..crate::usage::MAX_APIS + 100 {
            v.count(Use { api: format!("g{i}.example/v1/r"), ..entry(None, Who::Unidentified) });
        }
        assert_eq!(series(), crate::usage::MAX_APIS);
    }

    #[test]
    fn the_token_is_never_shown() {
        let b = Bearer::from_header("Bearer s3cret").unwrap();
        assert!(!format!("{b:?}").contains("s3cret"));
        assert_eq!(Bearer::from_header("Basic abc"), None);
        assert_eq!(Bearer::from_header("bearer t x"), Some(Bearer("t".into())), "as kube reads it");
    }
}

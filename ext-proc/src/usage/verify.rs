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
//! (past it the cache starts over), keyed by the token's SHA-256 — the
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
        let (scheme, token) = value.split_once(' ')?;
        let token = token.trim();
        (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then(|| Bearer(token.to_string()))
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

#[derive(Default)]
struct State {
    answers: HashMap<[u8; 32], (Review, Instant)>,
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
        let api = u.api.clone();
        if self.usage.record(u) {
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
        if let Some((review, at)) = state.answers.get(&key)
            && at.elapsed() < CACHE_TTL
        {
            u.who = reviewed(review, u.who);
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
                Ok(review) => {
                    if state.answers.len() >= MAX_CACHED {
                        state.answers.clear();
                    }
                    state.answers.insert(key, (review.clone(), Instant::now()));
                }
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

    /// No cluster to ask: the claim as the filter read it.
    #[tokio::test]
    async fn without_a_cluster_the_claim_is_counted_unverified() {
        let usage = Arc::new(Usage::default());
        let v = Verifier::new(usage.clone(), Metrics::new(), None);
        v.count(entry(Some("good-1"), Who::TokenClaim { subject: "ci".into() }));
        assert_eq!(clients(&usage), [("ci (token claim, unverified)".to_string(), 1)]);
    }

    #[test]
    fn the_token_is_never_shown() {
        let b = Bearer::from_header("Bearer s3cret").unwrap();
        assert!(!format!("{b:?}").contains("s3cret"));
        assert_eq!(Bearer::from_header("Basic abc"), None);
        assert_eq!(Bearer::from_header("bearer  t "), Some(Bearer("t".into())));
    }
}

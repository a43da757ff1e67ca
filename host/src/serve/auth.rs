//! Who may read `/metrics` and `/policies`: the API server decides, as for kube-scheduler's secure port. The
//! request's bearer token is authenticated with a TokenReview and the user authorized with a SubjectAccessReview
//! (`get` on the non-resource URL, e.g. `/metrics`: what a Prometheus's ClusterRole grants). Answers are cached
//! for ten seconds per token and path, as kube's delegating authenticator and authorizer do, so a scrape every few
//! seconds costs the API server two requests a while.

use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use k8s_openapi::api::authorization::v1::{NonResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec};
use kube::api::PostParams;
use kube::Api;
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

const CACHE_TTL: Duration = Duration::from_secs(10);
/// Cached answers at most; past it the cache is emptied (tokens are many only under attack).
const MAX_CACHED: usize = 1024;

/// Why a request is refused: 401 (no token, or one the API server does not know) or 403.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    Unauthenticated(String),
    Forbidden(String),
}

/// Delegated authentication and authorization through the API server.
pub struct Delegated {
    client: kube::Client,
    answers: Mutex<HashMap<(String, String), (Instant, Result<(), Refusal>)>>,
}

impl Delegated {
    pub fn new(client: kube::Client) -> Delegated {
        Delegated { client, answers: Mutex::new(HashMap::new()) }
    }

    /// May the bearer of `authorization` (the request's header) GET `path`?
    pub async fn check(&self, authorization: Option<&str>, path: &str) -> Result<(), Refusal> {
        let Some(token) = authorization.and_then(|header| header.strip_prefix("Bearer ")).map(str::trim).filter(|token| !token.is_empty()) else {
            return Err(Refusal::Unauthenticated("a bearer token is required".into()));
        };
        let key = (token.to_string(), path.to_string());
        if let Some((at, answer)) = self.answers.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).get(&key) {
            if at.elapsed() < CACHE_TTL {
                return answer.clone();
            }
        }
        let answer = self.ask(token, path).await;
        let mut answers = self.answers.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if answers.len() >= MAX_CACHED {
            answers.clear();
        }
        answers.insert(key, (Instant::now(), answer.clone()));
        answer
    }

    async fn ask(&self, token: &str, path: &str) -> Result<(), Refusal> {
        let review = TokenReview { spec: TokenReviewSpec { token: Some(token.to_string()), ..Default::default() }, ..Default::default() };
        let reviewed = Api::<TokenReview>::all(self.client.clone()).create(&PostParams::default(), &review).await.map_err(|error| {
            tracing::warn!(%error, "TokenReview failed; refusing the request");
            Refusal::Unauthenticated(format!("the token could not be reviewed: {error}"))
        })?;
        let status = reviewed.status.unwrap_or_default();
        let user = status.user.filter(|_| status.authenticated == Some(true)).ok_or_else(|| Refusal::Unauthenticated("the API server does not know the token".into()))?;
        let name = user.username.clone().unwrap_or_default();
        let access = SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                user: user.username,
                groups: user.groups,
                uid: user.uid,
                extra: user.extra,
                non_resource_attributes: Some(NonResourceAttributes { path: Some(path.to_string()), verb: Some("get".into()) }),
                ..Default::default()
            },
            ..Default::default()
        };
        let decided = Api::<SubjectAccessReview>::all(self.client.clone()).create(&PostParams::default(), &access).await.map_err(|error| {
            tracing::warn!(%error, user = %name, "SubjectAccessReview failed; refusing the request");
            Refusal::Forbidden(format!("the request could not be authorized: {error}"))
        })?;
        match decided.status.is_some_and(|status| status.allowed) {
            true => Ok(()),
            // kube-apiserver's wording for a non-resource URL.
            false => Err(Refusal::Forbidden(format!("forbidden: User \"{name}\" cannot get path \"{path}\""))),
        }
    }
}

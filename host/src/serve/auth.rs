//! Who may read `/metrics`, `/policies` and `/explain`: the API server decides, as for kube-scheduler's secure
//! port. The user is the one of the request's bearer token (a TokenReview) or, without a token, of the client
//! certificate the connection presented (signed by the cluster's client CA: [`super::client_certs`]); a
//! SubjectAccessReview then says whether that user may `get` the non-resource URL (`/metrics`: what a Prometheus's
//! ClusterRole grants). Answers are cached for ten seconds per credential and path, as kube's delegating
//! authenticator and authorizer do, so a scrape every few seconds costs the API server two requests a while.

use super::client_certs::{ClientCa, PeerCertificates};
use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use k8s_openapi::api::authorization::v1::{NonResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec};
use kube::api::PostParams;
use kube::Api;
use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::time::{Duration, Instant};

const CACHE_TTL: Duration = Duration::from_secs(10);
/// Cached answers at most; past it the cache is emptied (credentials are many only under attack).
const MAX_CACHED: usize = 1024;
/// The group kube-apiserver adds to every authenticated user (but the anonymous one), which RBAC bindings may name.
const AUTHENTICATED_GROUP: &str = "system:authenticated";
const UNAUTHENTICATED_GROUP: &str = "system:unauthenticated";
const ANONYMOUS: &str = "system:anonymous";
/// A credential's review and authorization together take at most this long (a stalled API server gets a refusal).
const REVIEW_TIMEOUT: Duration = Duration::from_secs(10);

/// Why a request is refused: 401 (no credential, or one the API server does not know) or 403.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    Unauthenticated(String),
    Forbidden(String),
}

/// An authenticated user, as a SubjectAccessReview names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct User {
    pub name: String,
    pub groups: Vec<String>,
    pub uid: Option<String>,
    pub extra: Option<BTreeMap<String, Vec<String>>>,
}

/// Delegated authentication and authorization through the API server.
pub struct Delegated {
    client: kube::Client,
    client_ca: ClientCa,
    answers: Mutex<HashMap<(String, String), (Instant, Result<(), Refusal>)>>,
}

impl Delegated {
    pub fn new(client: kube::Client) -> Delegated {
        Delegated { client_ca: ClientCa::new(client.clone()), client, answers: Mutex::new(HashMap::new()) }
    }

    /// May the bearer of `authorization` (the request's header), or else the holder of the connection's client
    /// certificate, GET `path`?
    pub async fn check(&self, authorization: Option<&str>, peer: Option<&PeerCertificates>, path: &str) -> Result<(), Refusal> {
        let token = authorization.and_then(|header| header.strip_prefix("Bearer ")).map(str::trim).filter(|token| !token.is_empty());
        let sha256 = |bytes: &[u8]| hex::encode(ring::digest::digest(&ring::digest::SHA256, bytes).as_ref());
        let credential = match (token, peer.and_then(|peer| peer.0.first())) {
            (Some(token), _) => format!("token {}", sha256(token.as_bytes())),
            (None, Some(leaf)) => format!("certificate {}", sha256(leaf)),
            (None, None) => return Err(Refusal::Unauthenticated("a bearer token, or a client certificate the cluster's client CA signed, is required".into())),
        };
        let key = (credential, path.to_string());
        if let Some((at, answer)) = self.answers.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).get(&key) {
            if at.elapsed() < CACHE_TTL {
                return answer.clone();
            }
        }
        let decide = async {
            let user = match token {
                Some(token) => self.review_token(token).await?,
                None => self.client_ca.authenticate(&peer.expect("a certificate").0).await?,
            };
            self.authorize(user, path).await
        };
        let answer = tokio::time::timeout(REVIEW_TIMEOUT, decide)
            .await
            .unwrap_or_else(|_| Err(Refusal::Unauthenticated(format!("the API server did not review the credential within {REVIEW_TIMEOUT:?}"))));
        let mut answers = self.answers.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if answers.len() >= MAX_CACHED {
            answers.clear();
        }
        answers.insert(key, (Instant::now(), answer.clone()));
        answer
    }

    async fn review_token(&self, token: &str) -> Result<User, Refusal> {
        let review = TokenReview { spec: TokenReviewSpec { token: token.to_string(), ..Default::default() }, ..Default::default() };
        let reviewed = Api::<TokenReview>::all(self.client.clone()).create(&PostParams::default(), &review).await.map_err(|error| {
            tracing::warn!(%error, "TokenReview failed; refusing the request");
            Refusal::Unauthenticated(format!("the token could not be reviewed: {error}"))
        })?;
        let status = reviewed.status.unwrap_or_default();
        let user = status
            .user
            .filter(|_| status.authenticated == Some(true))
            .ok_or_else(|| Refusal::Unauthenticated("the API server does not know the token".into()))?;
        Ok(User { name: user.username.unwrap_or_default(), groups: user.groups.unwrap_or_default(), uid: user.uid, extra: user.extra })
    }

    async fn authorize(&self, mut user: User, path: &str) -> Result<(), Refusal> {
        // kube-apiserver's AuthenticatedGroupAdder.
        if user.name != ANONYMOUS && !user.groups.iter().any(|group| group == AUTHENTICATED_GROUP || group == UNAUTHENTICATED_GROUP) {
            user.groups.push(AUTHENTICATED_GROUP.to_string());
        }
        let name = user.name.clone();
        let access = SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                user: Some(user.name),
                groups: Some(user.groups),
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

//! Route matching: the first `[[routes]]` entry whose host, path prefix and method all match.
//! Routes are compiled at config load; matching allocates nothing.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use http::Method;

/// A `[[routes]]` entry, validated.
#[derive(Debug, Clone)]
pub struct RouteConfig {
    pub name: String,
    /// Lower-case host without port; `None` matches any host.
    pub host: Option<String>,
    /// In canonical form (`crate::request::canonical::path`).
    pub path_prefix: String,
    /// False: the prefix matches paths in any case (`case_sensitive = false`).
    pub case_sensitive: bool,
    /// `None` matches any method.
    pub methods: Option<Vec<Method>>,
    /// Protocols a request may switch to (lower-case); `h2c` never.
    pub upgrades: Vec<String>,
    /// Index into `Config::upstreams`.
    pub upstream: usize,
    /// Indices into `Config::limits`.
    pub limits: Vec<usize>,
    pub cost: u64,
    /// Concurrency cap: beyond it, 503 with Retry-After.
    pub max_in_flight: Option<usize>,
}

/// The limits a route applies.
#[derive(Debug, Clone, Default)]
pub struct RouteLimits {
    /// Indices into `Limiter::rules`.
    pub rules: Vec<usize>,
    pub cost: u64,
}

/// A compiled route.
#[derive(Debug)]
pub(crate) struct Route {
    pub name: String,
    host: Option<String>,
    /// Lower-case when the route matches paths in any case.
    path_prefix: String,
    case_sensitive: bool,
    methods: Option<Vec<Method>>,
    /// Protocols a request may switch to (lower-case names).
    pub upgrades: Vec<String>,
    /// Position in the config, for per-route state kept beside the router.
    pub index: usize,
    /// Index into the runtime's upstream pools.
    pub upstream: usize,
    pub limits: RouteLimits,
    max_in_flight: Option<usize>,
    in_flight: Arc<AtomicUsize>,
}

/// A request counted against its route's `max_in_flight` until dropped.
pub(crate) struct InFlightSlot(Arc<AtomicUsize>);

impl Drop for InFlightSlot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// The route is at `max_in_flight`.
pub(crate) struct RouteBusy;

impl Route {
    /// Takes an in-flight slot: Ok(None) when the route has no cap.
    pub(crate) fn enter(&self) -> Result<Option<InFlightSlot>, RouteBusy> {
        let Some(max) = self.max_in_flight else {
            return Ok(None);
        };
        if self.in_flight.fetch_add(1, Ordering::AcqRel) >= max {
            self.in_flight.fetch_sub(1, Ordering::AcqRel);
            return Err(RouteBusy);
        }
        Ok(Some(InFlightSlot(self.in_flight.clone())))
    }

    /// Whether the route takes a request for `host` (a canonical name: lower-case, no port),
    /// a canonical `path` and `method`.
    fn matches(&self, host: Option<&[u8]>, path: &str, method: &Method) -> bool {
        let host_matches = match (&self.host, host) {
            (None, _) => true,
            (Some(wanted), Some(host)) => wanted.as_bytes() == host,
            (Some(_), None) => false,
        };
        host_matches
            && self.prefix_matches(path)
            && self.methods.as_ref().is_none_or(|m| m.contains(method))
    }

    fn prefix_matches(&self, path: &str) -> bool {
        if self.case_sensitive {
            return path.starts_with(&self.path_prefix);
        }
        let prefix = self.path_prefix.as_bytes();
        (path.as_bytes().get(..prefix.len()))
            .is_some_and(|start| start.eq_ignore_ascii_case(prefix))
    }

    /// Whether paths are matched in any case: a `path` key then counts them in one case too.
    pub(crate) fn case_insensitive(&self) -> bool {
        !self.case_sensitive
    }
}

/// All routes of a config in file order.
#[derive(Debug)]
pub(crate) struct Router {
    routes: Vec<Route>,
    /// Whether any route names a host; when none does, a request's is not looked at.
    any_host: bool,
}

impl Router {
    pub(crate) fn new(configs: &[RouteConfig]) -> Router {
        let routes = configs
            .iter()
            .enumerate()
            .map(|(index, c)| Route {
                index,
                name: c.name.clone(),
                host: c.host.clone(),
                path_prefix: match c.case_sensitive {
                    true => c.path_prefix.clone(),
                    false => c.path_prefix.to_ascii_lowercase(),
                },
                case_sensitive: c.case_sensitive,
                methods: c.methods.clone(),
                upgrades: c.upgrades.clone(),
                upstream: c.upstream,
                limits: RouteLimits {
                    rules: c.limits.clone(),
                    cost: c.cost,
                },
                max_in_flight: c.max_in_flight,
                in_flight: Arc::new(AtomicUsize::new(0)),
            })
            .collect::<Vec<_>>();
        let any_host = routes.iter().any(|route| route.host.is_some());
        Router { routes, any_host }
    }

    /// The first route that matches a canonical request's host name (without port), path
    /// and method (`crate::request::canonical`).
    pub(crate) fn find(&self, host: Option<&[u8]>, path: &str, method: &Method) -> Option<&Route> {
        let host = host.filter(|_| self.any_host);
        self.routes.iter().find(|r| r.matches(host, path, method))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(
        name: &str,
        host: Option<&str>,
        prefix: &str,
        methods: Option<&[Method]>,
    ) -> RouteConfig {
        RouteConfig {
            name: name.into(),
            host: host.map(Into::into),
            path_prefix: prefix.into(),
            methods: methods.map(|m| m.to_vec()),
            case_sensitive: true,
            upgrades: vec!["websocket".into()],
            upstream: 0,
            limits: Vec::new(),
            cost: 1,
            max_in_flight: Some(2),
        }
    }

    fn router() -> Router {
        Router::new(&[
            config("login", None, "/login", Some(&[Method::POST])),
            config("admin", Some("admin.example.com"), "/", None),
            config("default", None, "/", None),
        ])
    }

    fn name<'a>(
        router: &'a Router,
        host: Option<&str>,
        path: &str,
        method: Method,
    ) -> Option<&'a str> {
        (router.find(host.map(str::as_bytes), path, &method)).map(|r| r.name.as_str())
    }

    #[test]
    fn first_match_wins_by_host_path_and_method() {
        let r = router();
        assert_eq!(name(&r, None, "/login", Method::POST), Some("login"));
        assert_eq!(name(&r, None, "/login", Method::GET), Some("default"));
        assert_eq!(
            name(&r, Some("admin.example.com"), "/x", Method::GET),
            Some("admin")
        );
        assert_eq!(
            name(&r, Some("api.example.com"), "/x", Method::GET),
            Some("default")
        );
    }

    #[test]
    fn a_case_insensitive_route_matches_its_prefix_in_any_case() {
        let mut login = config("login", None, "/Login", Some(&[Method::POST]));
        login.case_sensitive = false;
        let r = Router::new(&[login, config("v1", None, "/v1/", None)]);
        for path in ["/login", "/LOGIN", "/lOgIn/x", "/Login"] {
            assert_eq!(name(&r, None, path, Method::POST), Some("login"), "{path}");
        }
        assert!(
            r.find(None, "/login", &Method::POST)
                .unwrap()
                .case_insensitive()
        );
        assert_eq!(name(&r, None, "/V1/x", Method::GET), None);
        assert_eq!(name(&r, None, "/logi", Method::POST), None);
    }

    #[test]
    fn no_match_is_none() {
        let r = Router::new(&[config("v1", None, "/v1/", None)]);
        assert_eq!(name(&r, None, "/v2/x", Method::GET), None);
    }

    #[test]
    fn without_host_routes_any_host_or_none_matches_by_path_and_method() {
        let r = Router::new(&[
            config("login", None, "/login", Some(&[Method::POST])),
            config("v1", None, "/v1/", None),
        ]);
        assert!(!r.any_host && router().any_host);
        for host in [None, Some("api.example.com"), Some("[::1]")] {
            assert_eq!(name(&r, host, "/v1/x", Method::GET), Some("v1"));
            assert_eq!(name(&r, host, "/login", Method::POST), Some("login"));
            assert_eq!(name(&r, host, "/login", Method::GET), None);
        }
    }

    #[test]
    fn in_flight_slots_are_capped_and_released_on_drop() {
        let r = router();
        let route = r.find(None, "/", &Method::GET).unwrap();
        let first = route.enter().ok().flatten();
        let second = route.enter().ok().flatten();
        assert!(first.is_some() && second.is_some());
        assert!(route.enter().is_err());
        drop(first);
        assert!(route.enter().is_ok());
    }
}

//! Route matching: the first `[[routes]]` entry whose host, path prefix and method all match.
//! Routes are compiled at config load; matching allocates nothing.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use http::Method;

use crate::config::RouteConfig;
use crate::limit::limiter::RouteLimits;

/// A compiled route.
#[derive(Debug)]
pub struct Route {
    pub name: String,
    host: Option<String>,
    path_prefix: String,
    methods: Option<Vec<Method>>,
    /// Position in the config, for per-route state kept beside the router.
    pub index: usize,
    /// Index into the runtime's upstream pools.
    pub upstream: usize,
    pub limits: RouteLimits,
    max_in_flight: Option<usize>,
    in_flight: Arc<AtomicUsize>,
}

/// A request counted against its route's `max_in_flight` until dropped.
pub struct InFlightSlot(Arc<AtomicUsize>);

impl Drop for InFlightSlot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// The route is at `max_in_flight`.
pub struct RouteBusy;

impl Route {
    /// Takes an in-flight slot: Ok(None) when the route has no cap.
    pub fn enter(&self) -> Result<Option<InFlightSlot>, RouteBusy> {
        let Some(max) = self.max_in_flight else {
            return Ok(None);
        };
        if self.in_flight.fetch_add(1, Ordering::AcqRel) >= max {
            self.in_flight.fetch_sub(1, Ordering::AcqRel);
            return Err(RouteBusy);
        }
        Ok(Some(InFlightSlot(self.in_flight.clone())))
    }

    fn matches(&self, host: Option<&[u8]>, path: &str, method: &Method) -> bool {
        let host_matches = match (&self.host, host) {
            (None, _) => true,
            (Some(wanted), Some(host)) => wanted.as_bytes().eq_ignore_ascii_case(host),
            (Some(_), None) => false,
        };
        host_matches
            && path.starts_with(&self.path_prefix)
            && self.methods.as_ref().is_none_or(|m| m.contains(method))
    }
}

/// All routes of a config in file order.
#[derive(Debug)]
pub struct Router {
    routes: Vec<Route>,
    /// Whether any route names a host; when none does, a request's is not looked at.
    any_host: bool,
}

impl Router {
    pub fn new(configs: &[RouteConfig]) -> Router {
        let routes = configs
            .iter()
            .enumerate()
            .map(|(index, c)| Route {
                index,
                name: c.name.clone(),
                host: c.host.clone(),
                path_prefix: c.path_prefix.clone(),
                methods: c.methods.clone(),
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

    /// The first route that matches. `host` may carry a port, which is ignored.
    /// `host` is the request's Host (or `:authority`) as it came, port and all: bytes, as
    /// checking it is UTF-8 cost more than the rest of the search.
    pub fn find(&self, host: Option<&[u8]>, path: &str, method: &Method) -> Option<&Route> {
        let host = host.filter(|_| self.any_host).map(strip_port);
        self.routes.iter().find(|r| r.matches(host, path, method))
    }
}

fn strip_port(host: &[u8]) -> &[u8] {
    if host.starts_with(b"[") {
        // [v6]:port
        let end = host.iter().position(|&b| b == b']');
        return end.map_or(host, |end| &host[1..end]);
    }
    match host.iter().rposition(|&b| b == b':') {
        Some(colon) if host[colon + 1..].iter().all(u8::is_ascii_digit) => &host[..colon],
        _ => host,
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
            name(&r, Some("ADMIN.example.com:8080"), "/x", Method::GET),
            Some("admin")
        );
        assert_eq!(
            name(&r, Some("api.example.com"), "/x", Method::GET),
            Some("default")
        );
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
        for host in [
            None,
            Some("api.example.com:8080"),
            Some("[::1]:1"),
            Some(""),
        ] {
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

    #[test]
    fn strips_ports_from_names_and_ipv6_literals() {
        for (host, name) in [
            ("example.com:80", "example.com"),
            ("example.com", "example.com"),
            ("example.com:", "example.com"),
            ("example.com:http", "example.com:http"),
            ("[::1]:8080", "::1"),
            ("[::1]", "::1"),
            ("[::1", "[::1"),
        ] {
            assert_eq!(strip_port(host.as_bytes()), name.as_bytes(), "{host}");
        }
    }
}

//! Validation of `[response]`: which rate-limit header families to send and the 429 problem
//! type.

use std::sync::Arc;

use super::ResponseStyle;
use super::problems::{Problems, echo};
use super::raw::RawResponse;

pub(super) fn response(raw: Option<&RawResponse>, problems: &mut Problems) -> ResponseStyle {
    let mut style = ResponseStyle::default();
    let Some(raw) = raw else { return style };
    if let Some(families) = &raw.headers {
        style.x_ratelimit = false;
        style.ietf = false;
        for (i, family) in families.iter().enumerate() {
            match family.as_str() {
                "x-ratelimit" => style.x_ratelimit = true,
                "ietf" => style.ietf = true,
                other => problems.push(
                    format!("response.headers[{i}]"),
                    format!("expected \"x-ratelimit\" or \"ietf\", got {}", echo(other)),
                ),
            }
        }
    }
    if let Some(problem_type) = &raw.problem_type {
        if problem_type.parse::<http::Uri>().is_err() || problem_type.is_empty() {
            problems.push(
                "response.problem_type",
                format!("expected a URI, got {}", echo(problem_type)),
            );
        }
        style.problem_type = Arc::from(problem_type.as_str());
    }
    style
}

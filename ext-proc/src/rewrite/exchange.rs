//! What the response phase knows of the request: which document it asked
//! for (its path) and the three request headers the rewrite needs, which
//! Envoy attaches to the response-headers message as CEL attributes (one
//! round trip per request; Envoy cannot send the whole header map there).

use std::collections::HashMap;

use envoy_types::pb::google::protobuf::{Struct, value::Kind};

use super::negotiate::{Plan, negotiate};

/// Rendered into the ext_proc filter's `response_attributes`.
pub const REQUEST_ATTRIBUTES: [&str; 4] =
    ["request.headers['accept']", "request.headers['if-none-match']", "request.headers['accept-encoding']", "request.url_path"];

/// The merged document a request's path names (the routes that run ext_proc
/// are exactly these paths).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Target {
    /// `/apis` (also when Envoy sent no path).
    #[default]
    Apis,
    OpenApiV2,
    OpenApiV3Index,
}

impl Target {
    pub fn of(path: Option<&str>) -> Target {
        match path {
            Some("/openapi/v2") => Target::OpenApiV2,
            Some("/openapi/v3" | "/openapi/v3/") => Target::OpenApiV3Index,
            _ => Target::Apis,
        }
    }

    /// The `document` label of `mvp_discovery_rewrites_total`.
    pub fn label(self) -> &'static str {
        match self {
            Target::Apis => "apis",
            Target::OpenApiV2 => "openapi_v2",
            Target::OpenApiV3Index => "openapi_v3",
        }
    }
}

#[derive(Debug, Default, PartialEq, Eq)]
pub struct Exchange {
    pub target: Target,
    /// `None` when Envoy sent no attributes at all (misconfigured).
    pub plan: Option<Plan>,
    pub if_none_match: Option<String>,
    pub gzip: bool,
}

impl Exchange {
    pub fn new(accept: Option<&str>, if_none_match: Option<&str>, accept_encoding: Option<&str>) -> Exchange {
        Exchange { target: Target::Apis, plan: Some(negotiate(accept)), if_none_match: if_none_match.map(str::to_string), gzip: wants_gzip(accept_encoding) }
    }

    pub fn for_target(mut self, target: Target) -> Exchange {
        self.target = target;
        self
    }

    pub fn from_attributes(attributes: &HashMap<String, Struct>) -> Exchange {
        let Some(fields) = attributes.get("envoy.filters.http.ext_proc").map(|s| &s.fields) else {
            return Exchange::default();
        };
        let attribute = |attr: &str| match fields.get(attr)?.kind.as_ref()? {
            Kind::StringValue(v) => Some(v.as_str()),
            _ => None,
        };
        let get = |name: &str| attribute(REQUEST_ATTRIBUTES.iter().find(|a| a.contains(&format!("['{name}']")))?);
        Exchange::new(get("accept"), get("if-none-match"), get("accept-encoding")).for_target(Target::of(attribute("request.url_path")))
    }
}

fn wants_gzip(accept_encoding: Option<&str>) -> bool {
    accept_encoding.is_some_and(|ae| {
        ae.split(',').any(|c| {
            let mut p = c.split(';').map(str::trim);
            p.next().is_some_and(|t| t.eq_ignore_ascii_case("gzip")) && !p.any(|q| q.replace(' ', "") == "q=0")
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apidiscovery::JSON_CONTENT_TYPE;
    use crate::rewrite::negotiate::Format;
    use envoy_types::pb::google::protobuf::Value;

    #[test]
    fn request_headers_arrive_as_response_attributes() {
        let string = |s: &str| Value { kind: Some(Kind::StringValue(s.into())) };
        let attrs = [(
            "envoy.filters.http.ext_proc".to_string(),
            Struct {
                fields: [
                    (REQUEST_ATTRIBUTES[0].to_string(), string(JSON_CONTENT_TYPE)),
                    (REQUEST_ATTRIBUTES[1].to_string(), string("\"x\"")),
                    (REQUEST_ATTRIBUTES[3].to_string(), string("/openapi/v2")),
                ]
                .into_iter()
                .collect(),
            },
        )]
        .into_iter()
        .collect();
        let x = Exchange::from_attributes(&attrs);
        assert_eq!(x.plan, Some(Plan::Merged(Format::Json)));
        assert_eq!(x.if_none_match.as_deref(), Some("\"x\""));
        assert_eq!(x.target, Target::OpenApiV2);
        assert_eq!(Exchange::from_attributes(&Default::default()).plan, None);
    }

    #[test]
    fn gzip_negotiation() {
        assert!(wants_gzip(Some("gzip")));
        assert!(wants_gzip(Some("deflate, gzip;q=1.0")));
        assert!(!wants_gzip(Some("gzip;q=0")));
        assert!(!wants_gzip(Some("br")));
        assert!(!wants_gzip(None));
    }
}

//! The native build's balancer for the apiserver clusters: an Envoy whose
//! node metadata names the routing module gets every apiserver cluster with
//! the module's own load balancer (`native-filter/src/lb.rs`) in place of
//! the override-host policy ([`super::clusters`]).

use envoy_types::pb::envoy::config::cluster::v3 as cluster;
use envoy_types::pb::envoy::config::core::v3 as core;
use envoy_types::pb::google::protobuf::Any;
use envoy_types::util::pack_any;
use mvp_contract::envoy::{FILTER_STATS_NAMESPACE, NATIVE_LB_NAME, NODE_NATIVE_MODULE};
use prost::Message;

use super::clusters::extension;

/// `DynamicModuleConfig` as Envoy 1.40 has it: envoy-types lacks its
/// `module` (6) and `metrics_namespace` (5) fields, and the native build
/// loads its module by path, as the bootstrap does (the same path: one
/// `dlopen`, one process table for the filter and the balancer).
#[derive(Clone, PartialEq, prost::Message)]
struct ModuleConfig {
    #[prost(bool, tag = "3")]
    do_not_close: bool,
    #[prost(string, tag = "5")]
    metrics_namespace: String,
    #[prost(message, optional, tag = "6")]
    module: Option<core::AsyncDataSource>,
}

/// `DynamicModulesLoadBalancerConfig`, with that module config.
#[derive(Clone, PartialEq, prost::Message)]
struct NativeLbConfig {
    #[prost(message, optional, tag = "1")]
    dynamic_module_config: Option<ModuleConfig>,
    #[prost(string, tag = "2")]
    lb_policy_name: String,
}

const NATIVE_LB_TYPE: &str = "type.googleapis.com/envoy.extensions.load_balancing_policies.dynamic_modules.v3.DynamicModulesLoadBalancerConfig";

/// The native build's policy: the module's balancer (`native-filter/src/lb.rs`),
/// which fails over along the filter's list without the route header.
fn native_lb_policy(module: &str) -> cluster::LoadBalancingPolicy {
    let config = NativeLbConfig {
        dynamic_module_config: Some(ModuleConfig {
            do_not_close: true,
            metrics_namespace: FILTER_STATS_NAMESPACE.to_string(),
            module: Some(core::AsyncDataSource {
                specifier: Some(core::async_data_source::Specifier::Local(core::DataSource {
                    specifier: Some(core::data_source::Specifier::Filename(module.to_string())),
                    ..Default::default()
                })),
            }),
        }),
        lb_policy_name: NATIVE_LB_NAME.to_string(),
    };
    let any = Any { type_url: NATIVE_LB_TYPE.to_string(), value: config.encode_to_vec() };
    cluster::LoadBalancingPolicy { policies: vec![extension("envoy.load_balancing_policies.dynamic_modules", any)] }
}

/// The native build's module path, if the Envoy's node metadata names one
/// (the bootstrap `envoy-config --filter native` renders says so).
pub fn native_module(node: &core::Node) -> Option<String> {
    super::envoys::node_metadata(node, NODE_NATIVE_MODULE)
}

/// A served cluster as an Envoy running the native build gets it (the
/// node metadata named the module, `NODE_NATIVE_MODULE`): the same cluster
/// with the module's balancer. `None` if `any` is not a cluster.
pub fn with_native_lb(any: &Any, module: &str) -> Option<Any> {
    let mut c = cluster::Cluster::decode(any.value.as_slice()).ok()?;
    c.load_balancing_policy = Some(native_lb_policy(module));
    // The filter's override host (the first listed apiserver) is taken
    // whatever Envoy's health checks say, as the override-host policy takes
    // the route header's: which member serves an API is mvp-ext-proc's call
    // (a draining member is the last resort for what only it serves).
    use core::HealthStatus as S;
    let every = [S::Unknown, S::Healthy, S::Unhealthy, S::Draining, S::Timeout, S::Degraded];
    c.common_lb_config.get_or_insert_default().override_host_status = Some(core::HealthStatusSet { statuses: every.into_iter().map(|s| s as i32).collect() });
    Some(pack_any(c))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::xds::clusters::{ClusterOptions, clusters};

    /// An Envoy whose node names the native module gets the same cluster
    /// with only the balancer changed: the module's, loaded from that path.
    #[test]
    fn the_native_build_gets_the_modules_balancer() {
        use envoy_types::pb::google::protobuf::{Struct, Value, value::Kind};
        let node = |m: Option<&str>| core::Node {
            metadata: m.map(|m| Struct { fields: [(NODE_NATIVE_MODULE.to_string(), Value { kind: Some(Kind::StringValue(m.into())) })].into() }),
            ..Default::default()
        };
        assert_eq!(native_module(&node(Some("/m/lib.so"))).as_deref(), Some("/m/lib.so"));
        assert_eq!((native_module(&node(None)), native_module(&node(Some("")))), (None, None));
        let plain = clusters(&ClusterOptions::default()).remove(0);
        let native = cluster::Cluster::decode(with_native_lb(&pack_any(plain.clone()), "/m/lib.so").unwrap().value.as_slice()).unwrap();
        let mut lb = plain.common_lb_config.clone().unwrap();
        lb.override_host_status = Some(core::HealthStatusSet { statuses: (0..=5).collect() });
        assert_eq!(native.common_lb_config.as_ref(), Some(&lb), "every health status may be the override host");
        assert_eq!(cluster::Cluster { load_balancing_policy: plain.load_balancing_policy.clone(), common_lb_config: plain.common_lb_config.clone(), ..native.clone() }, plain);
        let policy = &native.load_balancing_policy.unwrap().policies[0];
        let typed = policy.typed_extension_config.as_ref().unwrap().typed_config.as_ref().unwrap();
        assert_eq!(typed.type_url, NATIVE_LB_TYPE);
        let config = NativeLbConfig::decode(typed.value.as_slice()).unwrap();
        assert_eq!(config.lb_policy_name, NATIVE_LB_NAME);
        let module = config.dynamic_module_config.unwrap();
        assert!(module.do_not_close);
        let Some(core::async_data_source::Specifier::Local(local)) = module.module.unwrap().specifier else { panic!() };
        assert_eq!(local.specifier, Some(core::data_source::Specifier::Filename("/m/lib.so".into())));
        assert!(with_native_lb(&Any { type_url: "x".into(), value: vec![0xff] }, "/m/lib.so").is_none());
    }
}

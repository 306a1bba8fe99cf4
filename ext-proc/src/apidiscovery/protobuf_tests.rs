use super::*;

fn gvk(k: &ad::GroupVersionKind) -> pbmeta::GroupVersionKind {
    pbmeta::GroupVersionKind { group: Some(k.group.to_string()), version: Some(k.version.to_string()), kind: Some(k.kind.to_string()) }
}

fn strings<'a>(all: impl IntoIterator<Item = &'a ad::Str>) -> Vec<String> {
    all.into_iter().map(|s| s.to_string()).collect()
}

/// The same document through prost's generated messages.
fn by_prost(list: &APIGroupDiscoveryList) -> Vec<u8> {
    let msg = pbd::ApiGroupDiscoveryList {
        metadata: Some(pbmeta::ListMeta { self_link: Some(String::new()), resource_version: Some(String::new()), r#continue: Some(String::new()), remaining_item_count: None }),
        items: list
            .items
            .iter()
            .map(|g| pbd::ApiGroupDiscovery {
                metadata: Some(pbmeta::ObjectMeta {
                    name: Some(g.metadata.name.to_string()),
                    generate_name: Some(String::new()),
                    namespace: Some(String::new()),
                    self_link: Some(String::new()),
                    uid: Some(String::new()),
                    resource_version: Some(String::new()),
                    generation: Some(0),
                    creation_timestamp: Some(pbmeta::Time::default()),
                }),
                versions: g
                    .versions
                    .iter()
                    .map(|v| pbd::ApiVersionDiscovery {
                        version: Some(v.version.to_string()),
                        freshness: Some(v.freshness.to_string()),
                        resources: v
                            .resources
                            .iter()
                            .map(|r| pbd::ApiResourceDiscovery {
                                resource: Some(r.resource.to_string()),
                                response_kind: r.response_kind.as_ref().map(gvk),
                                scope: Some(r.scope.to_string()),
                                singular_resource: Some(r.singular_resource.to_string()),
                                verbs: strings(r.verbs.iter().flatten()),
                                short_names: strings(&r.short_names),
                                categories: strings(&r.categories),
                                subresources: r
                                    .subresources
                                    .iter()
                                    .map(|s| pbd::ApiSubresourceDiscovery {
                                        subresource: Some(s.subresource.to_string()),
                                        response_kind: s.response_kind.as_ref().map(gvk),
                                        accepted_types: s.accepted_types.iter().map(gvk).collect(),
                                        verbs: strings(s.verbs.iter().flatten()),
                                    })
                                    .collect(),
                            })
                            .collect(),
                    })
                    .collect(),
            })
            .collect(),
    };
    let unknown = pbrt::Unknown {
        type_meta: Some(pbrt::TypeMeta { api_version: Some(ad::API_VERSION.into()), kind: Some(ad::KIND.into()) }),
        raw: Some(msg.encode_to_vec()),
        content_encoding: Some(String::new()),
        content_type: Some(String::new()),
    };
    let mut out = b"k8s\x00".to_vec();
    unknown.encode(&mut out).unwrap();
    out
}

#[test]
fn the_envelope_never_outgrows_its_room() {
    for items in [vec![], vec![3], vec![5_500_000; 3000], vec![usize::MAX / 8]] {
        let mut out = Vec::new();
        envelope(&items, &mut out);
        assert!(out.len() <= envelope_max_len(), "{} > {}", out.len(), envelope_max_len());
    }
}

#[test]
fn written_exactly_as_the_generated_messages_encode() {
    let mut lists: Vec<APIGroupDiscoveryList> = ["v1.30", "v1.33", "v1.37"]
        .iter()
        .flat_map(|r| ["api.json", "apis.json"].map(|f| serde_json::from_slice(&crate::testdata::fixture(r, f)).unwrap()))
        .collect();
    // Empty lists, nil verbs and kinds, empty strings, a long name (two-byte lengths).
    let odd = ad::APIResourceDiscovery {
        resource: "x".repeat(300).into(),
        subresources: vec![ad::APISubresourceDiscovery {
            subresource: Default::default(),
            accepted_types: vec![Default::default()],
            ..Default::default()
        }],
        ..Default::default()
    };
    let versions = vec![ad::APIVersionDiscovery { version: "v1".into(), resources: vec![odd], freshness: Default::default() }];
    lists.push(APIGroupDiscoveryList { items: vec![APIGroupDiscovery::default(), APIGroupDiscovery { metadata: ad::ObjectMeta { name: "g".into() }, versions }], ..Default::default() });
    lists.push(APIGroupDiscoveryList::default());
    for list in &lists {
        let ours = encode(list);
        assert!(ours == by_prost(list), "{} groups", list.items.len());
        let back = decode(&ours).unwrap();
        assert_eq!(back.items.len(), list.items.len());
    }
}

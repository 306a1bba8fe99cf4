//! Compiles `mvp/**/*.proto` with protox (a pure-Rust protobuf compiler), so
//! building needs no `protoc` on the machine.
fn main() -> Result<(), Box<dyn std::error::Error>> {
    let protos = [
        "mvp/routing/v1/routing.proto",
        "k8s.io/api/apidiscovery/v2/generated.proto",
        "k8s.io/apimachinery/pkg/apis/meta/v1/generated.proto",
        "k8s.io/apimachinery/pkg/runtime/generated.proto",
    ];
    for p in protos {
        println!("cargo:rerun-if-changed={p}");
    }
    let fds = protox::compile(protos, ["."])?;
    let grpc = std::env::var_os("CARGO_FEATURE_GRPC").is_some();
    tonic_prost_build::configure()
        .build_server(grpc)
        .build_client(grpc)
        .build_transport(false)
        .compile_fds(fds)?;
    Ok(())
}

# Images for docker-compose.yml, built from this workspace.
#   target mvp:   mvp-ext-proc and the fake apiserver (with the real discovery fixtures)
#   target envoy: Envoy 1.40 with both builds of the mvp routing filter: the
#                 native module (built for Envoy 1.40; envoy-config picks it
#                 with --envoy-version 1.40.0) and the .wasm (any Envoy)
FROM rust:1.95-bookworm AS build
WORKDIR /src
COPY . .
RUN rustup target add wasm32-wasip1 \
 && cargo build --locked --release -p mvp-ext-proc -p integration --bins \
 && cargo build --locked --release -p mvp-native-filter \
 && cargo build --locked -p mvp-wasm-filter --target wasm32-wasip1 --profile wasm

FROM debian:bookworm-slim AS mvp
COPY --from=build /src/target/release/mvp-ext-proc /src/target/release/fake-apiserver /usr/local/bin/
COPY integration/fixtures/discovery /usr/share/mvp/fixtures/discovery
USER 65532:65532

FROM envoyproxy/envoy:v1.40.0 AS envoy
COPY --from=build /src/target/wasm32-wasip1/wasm/mvp_wasm_filter.wasm /usr/local/lib/mvp/mvp_wasm_filter.wasm
COPY --from=build /src/target/release/libmvp_native_filter.so /usr/local/lib/mvp/libmvp_native_filter.so

# Images for docker-compose.yml and the deploy manifests, built from this workspace.
#   target mvp:   mvp-ext-proc and the fake apiserver (with the real discovery fixtures); user 65532
#   target envoy: Envoy 1.40 with both builds of the mvp routing filter — the native module (built for
#                 Envoy 1.40; envoy-config picks it with --envoy-version 1.40.0) and the .wasm (any Envoy);
#                 user 101
# No build tools in either: the binaries are built in a stage of their own (or on the host) and copied.
#
# The bases are build arguments, so the same file builds where no registry is reachable:
#   RUST_IMAGE     the toolchain the binaries are built with            (default rust:1.95-bookworm)
#   RUNTIME_IMAGE  the mvp image's base: a Debian with /bin/sh          (default debian:bookworm-slim)
#   ENVOY_IMAGE    the envoy image's base: /usr/local/bin/envoy, 1.40   (default envoyproxy/envoy:v1.40.0)
#   BINARIES       source: built here from the workspace (the default); prebuilt: taken from the build
#                  context's target/docker/ (scripts/images.sh puts the host's release build there)
# e.g. docker compose build --build-arg RUNTIME_IMAGE=... --build-arg BINARIES=prebuilt (scripts/images.sh).
ARG RUST_IMAGE=rust:1.95-bookworm
ARG RUNTIME_IMAGE=debian:bookworm-slim
ARG ENVOY_IMAGE=envoyproxy/envoy:v1.40.0
ARG BINARIES=source

FROM ${RUST_IMAGE} AS binaries-source
WORKDIR /src
COPY . .
RUN rustup target add wasm32-wasip1 \
 && cargo build --locked --release -p mvp-ext-proc -p integration --bins \
 && cargo build --locked --release -p mvp-native-filter \
 && cargo build --locked -p mvp-wasm-filter --target wasm32-wasip1 --profile wasm \
 && mkdir -p /out \
 && cp target/release/mvp-ext-proc target/release/fake-apiserver target/release/libmvp_native_filter.so \
       target/wasm32-wasip1/wasm/mvp_wasm_filter.wasm /out/ \
 && strip --strip-debug /out/mvp-ext-proc /out/fake-apiserver /out/libmvp_native_filter.so

FROM ${RUNTIME_IMAGE} AS binaries-prebuilt
COPY target/docker/mvp-ext-proc target/docker/fake-apiserver target/docker/libmvp_native_filter.so target/docker/mvp_wasm_filter.wasm /out/

FROM binaries-${BINARIES} AS binaries

FROM ${RUNTIME_IMAGE} AS mvp
COPY --from=binaries /out/mvp-ext-proc /out/fake-apiserver /usr/local/bin/
COPY integration/fixtures/discovery /usr/share/mvp/fixtures/discovery
USER 65532:65532

FROM ${ENVOY_IMAGE} AS envoy
COPY --from=binaries /out/mvp_wasm_filter.wasm /usr/local/lib/mvp/mvp_wasm_filter.wasm
COPY --from=binaries /out/libmvp_native_filter.so /usr/local/lib/mvp/libmvp_native_filter.so
USER 101:101

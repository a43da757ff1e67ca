# The wasp host image used by manifests/30-deployment.yaml (`docker build -t wasp:dev .`). Policies are not in
# the image, and neither is the simulator (test infrastructure: the `sim` feature is off). Policies come from ConfigMaps (`wasp configmap --from-dir plugins/out --split`).
FROM rust:1.95-bookworm AS build
WORKDIR /src
COPY . .
RUN cargo build --release --locked -p wasp --no-default-features --features jemalloc

FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /src/target/release/wasp /usr/local/bin/wasp
USER 65532
ENTRYPOINT ["/usr/local/bin/wasp"]

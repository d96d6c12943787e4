# Build stage: compile a release binary with the committed Cargo.lock.
FROM rust:1-slim-bookworm AS build
WORKDIR /src
COPY Cargo.toml Cargo.lock ./
COPY src ./src
COPY benches ./benches
RUN cargo build --release --locked && strip target/release/ratelimit-proxy

# Runtime stage: a slim image with only the binary, run as a non-root user.
FROM debian:bookworm-slim
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --system --uid 10001 --no-create-home --shell /usr/sbin/nologin ratelimit
COPY --from=build /src/target/release/ratelimit-proxy /usr/local/bin/ratelimit-proxy
COPY config.example.toml /etc/ratelimit-proxy/gw.toml
USER 10001
EXPOSE 8080
ENTRYPOINT ["ratelimit-proxy"]
CMD ["--config", "/etc/ratelimit-proxy/gw.toml"]

# Build stage: a profile-guided release build with the committed Cargo.lock. benches/pgo.sh
# builds the proxy instrumented, runs it for a few seconds under each of its loads on loopback
# (HTTP/1.1 and HTTP/2, plain and TLS, memory and Redis limits, denials), and builds it again
# laid out by what ran: 17-21% fewer instructions and ~25% less user-space CPU a proxied
# request than the plain release build (docs/PERFORMANCE.md). ~15 min on 2 cores.
# `--build-arg PGO=0` builds the plain release binary instead (~5 min).
FROM rust:1-slim-bookworm AS build
ARG PGO=1
RUN case "$PGO" in \
      1) apt-get update \
         && apt-get install -y --no-install-recommends python3 wrk redis-server openssl nghttp2-client \
         && rm -rf /var/lib/apt/lists/* \
         && rustup component add llvm-tools ;; \
      0) ;; \
      *) echo "PGO is \"$PGO\": expected 1 (profile-guided build) or 0 (plain release build)" >&2; exit 1 ;; \
    esac
WORKDIR /src
COPY Cargo.toml Cargo.lock build.rs ./
# The commit in rlp_build_info: the build context has no .git, so build.rs says "unknown"
# unless given (`--build-arg RLP_GIT_COMMIT=$(git rev-parse --short=12 HEAD)`).
ARG RLP_GIT_COMMIT
COPY src ./src
COPY benches ./benches
# Cargo.toml names the example, so the manifest does not parse without it.
COPY examples ./examples
RUN if [ "$PGO" = 1 ]; then benches/pgo.sh && cp target/pgo/ratelimit-proxy /ratelimit-proxy; \
    else cargo build --release --locked && cp target/release/ratelimit-proxy /ratelimit-proxy; fi \
 && strip /ratelimit-proxy

# Runtime stage: a slim image with only the binary, run as a non-root user. Its config proxies
# to the upstream that RLP_UPSTREAM names (`docker run -e RLP_UPSTREAM=http://api:8080 ...`),
# and refuses to start, naming the variable, without it; mount your own over it for more.
FROM debian:bookworm-slim
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --system --uid 10001 --no-create-home --shell /usr/sbin/nologin ratelimit
# OCI labels: the version is Cargo.toml's (tests/it/config/image.rs keeps them equal); pass the commit
# and where the source lives: `--build-arg RLP_GIT_COMMIT=$(git rev-parse --short=12 HEAD)
# --build-arg RLP_SOURCE=https://...`.
ARG RLP_VERSION=0.1.0
ARG RLP_GIT_COMMIT=unknown
ARG RLP_SOURCE=
LABEL org.opencontainers.image.title="ratelimit-proxy" \
      org.opencontainers.image.description="An edge reverse proxy that sheds abusive traffic before it reaches an API" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version="${RLP_VERSION}" \
      org.opencontainers.image.revision="${RLP_GIT_COMMIT}" \
      org.opencontainers.image.source="${RLP_SOURCE}"
COPY --from=build /ratelimit-proxy /usr/local/bin/ratelimit-proxy
COPY contrib/container/gw.toml /etc/ratelimit-proxy/gw.toml
COPY LICENSE /usr/share/doc/ratelimit-proxy/LICENSE
COPY NOTICE /usr/share/doc/ratelimit-proxy/NOTICE
USER 10001
# 8080: the proxy. 9090: the admin listener (/healthz /readyz /metrics /config), for probes;
# publish it to your own network only.
EXPOSE 8080 9090
# `health` asks 127.0.0.1:9090/healthz and exits 0 on a 200 within 2 s.
HEALTHCHECK --interval=10s --timeout=5s --start-period=5s --retries=3 \
  CMD ["ratelimit-proxy", "health"]
ENTRYPOINT ["ratelimit-proxy"]
CMD ["--config", "/etc/ratelimit-proxy/gw.toml"]

# Builds ipaudit's collector and analyzer into one small image.
#   docker build -t ipaudit .
#   docker run --rm ipaudit collector --help
FROM rust:1.95-bookworm AS build
WORKDIR /src
COPY . .
# The analyzer is built with profile-guided optimisation (scripts/build-pgo: an
# instrumented build replays generated histories first; about 20 minutes on 2 cores), which
# takes an Avro replay to about 0.82 of its time (BENCHMARKS.md). The collector is built
# plainly (a third build with link-time optimisation).
RUN cargo build --profile dist --locked -p ipaudit-collector --bins \
 && scripts/build-pgo --out /tmp/pgo \
 && cp target/dist/collector /tmp/pgo/analyzer /usr/local/bin/

FROM debian:bookworm-slim
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --system --uid 65532 --home-dir /var/lib/ipaudit ipaudit \
 && mkdir -p /var/lib/ipaudit /var/lib/ipaudit-analyzer \
 && chown ipaudit /var/lib/ipaudit /var/lib/ipaudit-analyzer
COPY --from=build /usr/local/bin/collector /usr/local/bin/analyzer /usr/local/bin/
USER 65532
EXPOSE 8080

# syntax=docker/dockerfile:1
#
# The drover binary in a small image: built with cgo (the SQLite driver is
# then mattn/go-sqlite3, the faster one; CGO_ENABLED=0 would link the pure-Go
# modernc.org/sqlite) on Debian, run on distroless/cc (glibc, no shell, no package
# manager) as the non-root user "nonroot". Build and run:
#
#   docker build -t drover .
#   docker run --rm -p 127.0.0.1:8080:8080 -e DROVER_API_TOKENS='TOKEN operator admin' drover
#
# deploy/compose.yaml runs it on PostgreSQL with split roles.

ARG GO_VERSION=1.26

FROM golang:${GO_VERSION}-bookworm AS build
WORKDIR /src
# The modules first, so that a change of the code reuses their layer.
COPY go.mod go.sum ./
RUN go mod download
COPY . .
# -trimpath: no build paths in the binary; the version comes from the
# module's build info ("(devel)" unless built by "go install …@vX").
RUN CGO_ENABLED=1 go build -trimpath -ldflags='-s -w' -o /out/drover ./cmd/drover \
 && /out/drover version \
 && mkdir -p /out/data

FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /out/drover /usr/local/bin/drover
# The working directory, writable by nonroot (uid 65532), holds the
# default SQLite store (./drover.db). No DROVER_* variable is set here: it
# would outrank a --config file's settings.
COPY --from=build --chown=65532:65532 /out/data /var/lib/drover
WORKDIR /var/lib/drover
USER nonroot:nonroot
EXPOSE 8080
# The image has no curl: the binary checks its own /healthz.
HEALTHCHECK --interval=10s --timeout=5s --start-period=30s --retries=3 \
  CMD ["/usr/local/bin/drover", "healthcheck", "--url", "http://127.0.0.1:8080/healthz"]
ENTRYPOINT ["/usr/local/bin/drover"]
CMD ["server", "--listen", "0.0.0.0:8080"]
